package devenv

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kube-apiserver runs on loopback with --endpoint-reconciler-type=none (an
// endpoint on 127.0.0.1 would point pods at themselves), so the default/
// kubernetes Service has no endpoint of its own. With real nodes pods do
// reach kube-apiserver, at the VPC gateway's apiServerGatewayPort, as the
// kubelets do: `up` writes that endpoint, as the reconciler would write
// the advertised address, so in-cluster clients (rest.InClusterConfig:
// KUBERNETES_SERVICE_HOST is the Service's ClusterIP) work unchanged.
// kube-apiserver's serving certificate names the ClusterIP (startControl-
// Plane) and the gateway.

// apiServerEndpoints is the kubernetes Service's Endpoints for real nodes:
// the gateway's port, named as the Service's port ("https"), which the
// EndpointSlice mirroring controller copies into an EndpointSlice.
func apiServerEndpoints(gateway netip.Addr) *corev1.Endpoints {
	return &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "kubernetes",
			Labels: map[string]string{"app.kubernetes.io/managed-by": "portside-up"}},
		Subsets: []corev1.EndpointSubset{{
			Addresses: []corev1.EndpointAddress{{IP: gateway.String()}},
			Ports:     []corev1.EndpointPort{{Name: "https", Port: apiServerGatewayPort, Protocol: corev1.ProtocolTCP}},
		}},
	}
}

// publishAPIServerEndpoint writes apiServerEndpoints (create, or update
// what an earlier run wrote).
func publishAPIServerEndpoint(ctx context.Context, s *stack, env *environment) error {
	gw := env.realNet.gateway()
	if env.ipv6Only {
		// The kubernetes Service is IPv6: its endpoint must be too.
		gw = env.realNet.gateway6()
	}
	want := apiServerEndpoints(gw)
	eps := env.client.CoreV1().Endpoints(metav1.NamespaceDefault)
	cur, err := eps.Get(ctx, want.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = eps.Create(ctx, want, metav1.CreateOptions{})
	case err == nil:
		cur.Labels, cur.Subsets = want.Labels, want.Subsets
		_, err = eps.Update(ctx, cur, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("the kubernetes Service's endpoint for pods: %w", err)
	}
	s.p.step("control plane", "pods reach kube-apiserver as Service default/kubernetes (%s) at the VPC gateway %s",
		env.kubernetesServiceIP(), netip.AddrPortFrom(gw, apiServerGatewayPort))
	return nil
}

// kubernetesServiceIP is the kubernetes Service's ClusterIP: the Service
// range's first address.
func (env *environment) kubernetesServiceIP() string {
	a, err := nthAddr(env.serviceCIDR(), 1)
	if err != nil {
		return ""
	}
	return a.String()
}
