package bench

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// realisticService is a LoadBalancer Service as a Helm chart applied with
// `kubectl apply` leaves it: the chart's labels and annotations, and
// kubectl's last-applied copy of the whole manifest (about 1 KB).
func realisticService(ns string, i int) *corev1.Service {
	name := fmt.Sprintf("svc-%05d", i)
	release := fmt.Sprintf("release-%04d", i/3)
	labels := map[string]string{
		"app.kubernetes.io/name": name, "app.kubernetes.io/instance": release, "app.kubernetes.io/version": "1.14.2",
		"app.kubernetes.io/component": "frontend", "app.kubernetes.io/part-of": "storefront",
		"app.kubernetes.io/managed-by": "Helm", "helm.sh/chart": "storefront-3.2.1", "team": fmt.Sprintf("team-%02d", i%17),
	}
	svc := &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, Annotations: map[string]string{
			"meta.helm.sh/release-name": release, "meta.helm.sh/release-namespace": ns,
			"portside.io/owner":       fmt.Sprintf("platform-team-%02d@example.com", i%17),
			"portside.io/description": "Public HTTPS entry point of the storefront's " + name + " frontend, behind the CDN.",
		}},
		Spec: corev1.ServiceSpec{
			Type:                  corev1.ServiceTypeLoadBalancer,
			Selector:              map[string]string{"app.kubernetes.io/name": name, "app.kubernetes.io/instance": release},
			Ports:                 []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromString("https"), Protocol: corev1.ProtocolTCP}},
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster, SessionAffinity: corev1.ServiceAffinityNone,
		},
	}
	applied, _ := json.Marshal(svc)
	svc.Annotations["kubectl.kubernetes.io/last-applied-configuration"] = string(applied) + "\n"
	return svc
}

// deleteRealisticServices removes the Services in the given namespaces and
// the namespaces, clearing the cleanup finalizer first (no CCM runs any
// more to remove it).
func deleteRealisticServices(ctx context.Context, client kubernetes.Interface, namespaces []string) error {
	clear := []byte(`{"metadata":{"finalizers":null}}`)
	for _, ns := range namespaces {
		list, err := client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, s := range list.Items {
			if len(s.Finalizers) > 0 {
				if _, err := client.CoreV1().Services(ns).Patch(ctx, s.Name, types.MergePatchType, clear, metav1.PatchOptions{}); err != nil {
					return err
				}
			}
		}
		if err := client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
			return err
		}
	}
	return nil
}
