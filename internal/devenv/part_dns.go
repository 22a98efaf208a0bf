package devenv

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/portside-io/portside/internal/nodeimages"
)

// Cluster DNS as kubeadm deploys it: CoreDNS (built from its module,
// internal/nodeimages) behind the kube-dns Service in kube-system, the
// kubelets' clusterDNS.
const (
	dnsDomain      = "cluster.local"
	dnsNamespace   = "kube-system"
	dnsService     = "kube-dns"
	dnsName        = "coredns"
	dnsClusterRole = "system:coredns"
	dnsReplicas    = 2
	// dnsServiceIndex: kubeadm gives kube-dns the 10th address of the
	// Service range (10.96.0.10 of its default 10.96.0.0/12; of
	// the environment's Service range here).
	dnsServiceIndex = 10
	dnsFieldManager = "portside-up"
)

// dnsLabels select the CoreDNS pods (kubeadm's, which upstream tests and
// tools look for).
var dnsLabels = map[string]string{"k8s-app": "kube-dns"}

// corefile is kubeadm's default, save what would send a query off this
// machine: no upstream DNS is reachable here (the host's resolver would
// be, and the brief keeps traffic on loopback and in our namespaces), so
// there is no forward (nor loop, which only detects forwarding loops).
// Its server keys are the cluster's zones instead of ".": a name outside
// them is answered REFUSED at once by the server, not SERVFAIL after a
// plugin chain with no next plugin (logged by errors at every query); and
// the kubernetes plugin does not fall through, so an unknown address's
// reverse name is an authoritative NXDOMAIN.
func corefile(domain string) string {
	return fmt.Sprintf(`%[1]s:53 in-addr.arpa:53 ip6.arpa:53 {
    errors
    health {
       lameduck 5s
    }
    ready
    kubernetes %[1]s in-addr.arpa ip6.arpa {
       pods insecure
       ttl 30
    }
    prometheus :9153
    cache 30 {
       disable success %[1]s
       disable denial %[1]s
    }
    reload
    loadbalance
}
`, domain)
}

// nthAddr is the index-th address of a prefix (0 is its first), if the
// prefix holds it.
func nthAddr(prefix string, index int) (netip.Addr, error) {
	// A dual-stack list: the primary family's.
	prefix = firstOfList(prefix)
	p, err := netip.ParsePrefix(prefix)
	if err != nil {
		return netip.Addr{}, err
	}
	a := p.Masked().Addr()
	for i := 0; i < index; i++ {
		a = a.Next()
	}
	if index < 0 || !a.IsValid() || !p.Contains(a) {
		return netip.Addr{}, fmt.Errorf("%s has no address %d", prefix, index)
	}
	return a, nil
}

// clusterDNS is the kube-dns Service's address in the environment's
// Service range, the kubelets' clusterDNS ("" if the range has no 10th
// address: then startClusterDNS fails, saying why).
func (env *environment) clusterDNS() string {
	a, err := nthAddr(env.serviceCIDR(), dnsServiceIndex)
	if err != nil {
		return ""
	}
	return a.String()
}

// startClusterDNS applies kubeadm's CoreDNS objects (server-side apply:
// the data directory keeps them across runs) and waits until both pods
// are ready, so `up` says DNS works only when it does.
func startClusterDNS(ctx context.Context, s *stack, env *environment) error {
	logger := klog.FromContext(ctx)
	addr, err := nthAddr(env.serviceCIDR(), dnsServiceIndex)
	if err != nil {
		return fmt.Errorf("the kube-dns Service's address: %w", err)
	}
	ip := addr.String()
	ips := []string{ip}
	if env.dual && env.realNet.Services6.IsValid() {
		// The Service of both families (as the kubelets' clusterDNS the
		// primary's, as kubeadm's dual-stack clusters have it): pods
		// query it over IPv6 too.
		a6, err := nthAddr(env.realNet.Services6.String(), dnsServiceIndex)
		if err != nil {
			return fmt.Errorf("the kube-dns Service's IPv6 address: %w", err)
		}
		ips = append(ips, a6.String())
	}
	objs := dnsObjects(ips)
	for _, o := range objs {
		data, err := json.Marshal(o.obj)
		if err != nil {
			return err
		}
		if err := o.apply(ctx, env, data); err != nil {
			return fmt.Errorf("apply %s: %w", o.what, err)
		}
		logger.V(2).Info("Applied", "object", o.what)
	}
	began := time.Now()
	for {
		d, err := env.client.AppsV1().Deployments(dnsNamespace).Get(ctx, dnsName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		st := d.Status
		if st.ObservedGeneration >= d.Generation && st.UpdatedReplicas == dnsReplicas && st.ReadyReplicas == dnsReplicas && st.Replicas == dnsReplicas {
			s.p.step("cluster DNS", "ready in %.1fs: %d/%d CoreDNS pods (%s) ready behind Service %s/%s %s (%s; %s the kubelets' clusterDNS)",
				time.Since(began).Seconds(), st.ReadyReplicas, dnsReplicas, nodeimages.CoreDNSImage, dnsNamespace, dnsService, strings.Join(ips, ", "), dnsDomain, ip)
			return nil
		}
		if time.Since(began) > 3*time.Minute {
			return fmt.Errorf("%d/%d CoreDNS pods ready after 3 minutes: %s", st.ReadyReplicas, dnsReplicas, dnsPodsWaiting(ctx, env))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// dnsPodsWaiting says what the first CoreDNS pod not ready waits for.
func dnsPodsWaiting(ctx context.Context, env *environment) string {
	pods, err := env.client.CoreV1().Pods(dnsNamespace).List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
	if err != nil {
		return err.Error()
	}
	for _, p := range pods.Items {
		for _, c := range p.Status.ContainerStatuses {
			if c.Ready {
				continue
			}
			if w := c.State.Waiting; w != nil {
				return fmt.Sprintf("pod %s on %q: %s: %s", p.Name, p.Spec.NodeName, w.Reason, w.Message)
			}
			return fmt.Sprintf("pod %s on %q: not ready (restarts %d)", p.Name, p.Spec.NodeName, c.RestartCount)
		}
		if len(p.Status.ContainerStatuses) == 0 {
			return fmt.Sprintf("pod %s: %s %v", p.Name, p.Status.Phase, p.Status.Conditions)
		}
	}
	return fmt.Sprintf("%d pods, none waiting", len(pods.Items))
}

type dnsObject struct {
	what  string
	obj   any
	apply func(ctx context.Context, env *environment, data []byte) error
}

// dnsObjects are kubeadm's: ServiceAccount, ClusterRole and its binding,
// the Corefile's ConfigMap, the Deployment and the Service, whose
// ClusterIPs are ips (one, or one per family: PreferDualStack).
func dnsObjects(ips []string) []dnsObject {
	opts := metav1.PatchOptions{FieldManager: dnsFieldManager, Force: ptr.To(true)}
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: dnsNamespace}
	}
	sa := &corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}, ObjectMeta: meta(dnsName)}
	role := &rbacv1.ClusterRole{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
		ObjectMeta: metav1.ObjectMeta{Name: dnsClusterRole},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: dnsClusterRole},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: dnsClusterRole},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: dnsName, Namespace: dnsNamespace}},
	}
	cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: meta(dnsName),
		Data: map[string]string{"Corefile": corefile(dnsDomain)}}
	svc := &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: dnsService, Namespace: dnsNamespace,
			Labels:      map[string]string{"k8s-app": "kube-dns", "kubernetes.io/cluster-service": "true", "kubernetes.io/name": "CoreDNS"},
			Annotations: map[string]string{"prometheus.io/port": "9153", "prometheus.io/scrape": "true"}},
		Spec: corev1.ServiceSpec{ClusterIP: ips[0], ClusterIPs: ips, IPFamilyPolicy: dnsFamilyPolicy(ips), Selector: dnsLabels, Ports: []corev1.ServicePort{
			{Name: "dns", Port: 53, TargetPort: intstr.FromInt32(53), Protocol: corev1.ProtocolUDP},
			{Name: "dns-tcp", Port: 53, TargetPort: intstr.FromInt32(53), Protocol: corev1.ProtocolTCP},
			{Name: "metrics", Port: 9153, TargetPort: intstr.FromInt32(9153), Protocol: corev1.ProtocolTCP},
		}},
	}
	return []dnsObject{
		{"ServiceAccount " + dnsName, sa, func(ctx context.Context, env *environment, d []byte) error {
			_, err := env.client.CoreV1().ServiceAccounts(dnsNamespace).Patch(ctx, dnsName, types.ApplyPatchType, d, opts)
			return err
		}},
		{"ClusterRole " + dnsClusterRole, role, func(ctx context.Context, env *environment, d []byte) error {
			_, err := env.client.RbacV1().ClusterRoles().Patch(ctx, dnsClusterRole, types.ApplyPatchType, d, opts)
			return err
		}},
		{"ClusterRoleBinding " + dnsClusterRole, binding, func(ctx context.Context, env *environment, d []byte) error {
			_, err := env.client.RbacV1().ClusterRoleBindings().Patch(ctx, dnsClusterRole, types.ApplyPatchType, d, opts)
			return err
		}},
		{"ConfigMap " + dnsName, cm, func(ctx context.Context, env *environment, d []byte) error {
			_, err := env.client.CoreV1().ConfigMaps(dnsNamespace).Patch(ctx, dnsName, types.ApplyPatchType, d, opts)
			return err
		}},
		{"Deployment " + dnsName, dnsDeployment(), func(ctx context.Context, env *environment, d []byte) error {
			_, err := env.client.AppsV1().Deployments(dnsNamespace).Patch(ctx, dnsName, types.ApplyPatchType, d, opts)
			return err
		}},
		{"Service " + dnsService, svc, func(ctx context.Context, env *environment, d []byte) error {
			_, err := env.client.CoreV1().Services(dnsNamespace).Patch(ctx, dnsService, types.ApplyPatchType, d, opts)
			return err
		}},
	}
}

// dnsDeployment is kubeadm's CoreDNS Deployment. Its in-cluster client
// reaches kube-apiserver by the kubernetes Service, whose endpoint `up`
// puts at the VPC gateway (publishAPIServerEndpoint).
func dnsDeployment() *appsv1.Deployment {
	probe := func(path, port string) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString(port), Scheme: corev1.URISchemeHTTP}}}
	}
	live := probe("/health", "liveness-probe")
	live.InitialDelaySeconds, live.TimeoutSeconds, live.SuccessThreshold, live.FailureThreshold = 60, 5, 1, 5
	// kubeadm's readiness probe runs every 10 s (the default): the first
	// comes as the container starts, before CoreDNS has synced with the
	// API, so a new pod waited ~10 s to be ready, most of `up`'s cluster
	// DNS step. Every second costs the node one HTTP request.
	ready := probe("/ready", "readiness-probe")
	ready.PeriodSeconds = 1
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: dnsName, Namespace: dnsNamespace, Labels: dnsLabels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](dnsReplicas),
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: ptr.To(intstr.FromInt32(1))}},
			Selector: &metav1.LabelSelector{MatchLabels: dnsLabels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: dnsLabels},
				Spec: corev1.PodSpec{
					PriorityClassName:  "system-cluster-critical",
					ServiceAccountName: dnsName,
					Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
						PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 100,
							PodAffinityTerm: corev1.PodAffinityTerm{TopologyKey: corev1.LabelHostname, LabelSelector: &metav1.LabelSelector{
								MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k8s-app", Operator: metav1.LabelSelectorOpIn, Values: []string{"kube-dns"}}}}}}}}},
					Tolerations: []corev1.Toleration{{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists},
						{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}},
					NodeSelector: map[string]string{corev1.LabelOSStable: "linux"},
					DNSPolicy:    corev1.DNSDefault,
					Containers: []corev1.Container{{
						Name: dnsName, Image: nodeimages.CoreDNSImage, ImagePullPolicy: corev1.PullIfNotPresent,
						Args: []string{"-conf", "/etc/coredns/Corefile"},
						Resources: corev1.ResourceRequirements{
							Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("170Mi")},
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("70Mi")},
						},
						VolumeMounts: []corev1.VolumeMount{{Name: "config-volume", MountPath: "/etc/coredns", ReadOnly: true}},
						Ports: []corev1.ContainerPort{
							{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
							{Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP},
							{Name: "metrics", ContainerPort: 9153, Protocol: corev1.ProtocolTCP},
							{Name: "liveness-probe", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
							{Name: "readiness-probe", ContainerPort: 8181, Protocol: corev1.ProtocolTCP},
						},
						LivenessProbe:  live,
						ReadinessProbe: ready,
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
							Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}, Drop: []corev1.Capability{"ALL"}},
						},
					}},
					Volumes: []corev1.Volume{{Name: "config-volume", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
						LocalObjectReference: corev1.LocalObjectReference{Name: dnsName},
						Items:                []corev1.KeyToPath{{Key: "Corefile", Path: "Corefile"}},
					}}}},
				},
			},
		},
	}
}

// dnsFamilyPolicy is the kube-dns Service's policy for its ClusterIPs:
// SingleStack said outright for one, so an environment that was
// dual-stack before (its data directory kept) is applied back to one
// family rather than refused.
func dnsFamilyPolicy(ips []string) *corev1.IPFamilyPolicy {
	if len(ips) > 1 {
		return ptr.To(corev1.IPFamilyPolicyPreferDualStack)
	}
	return ptr.To(corev1.IPFamilyPolicySingleStack)
}
