package migrate

import (
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// lbCleanupFinalizer is the service controller's finalizer on LoadBalancer Services.
const lbCleanupFinalizer = "service.kubernetes.io/load-balancer-cleanup"

// ours tells whether a Service is a LoadBalancer the cloud's service
// controller handles (loadBalancerClass set: another controller's).
func ours(s *corev1.Service) bool {
	return s.Spec.Type == corev1.ServiceTypeLoadBalancer && s.Spec.LoadBalancerClass == nil
}

// LoadBalancerCleanupWithoutController: Services carrying the service
// controller's finalizer while no CCM runs are not reconciled, and their
// deletion hangs until one does.
func LoadBalancerCleanupWithoutController(services []corev1.Service, activeCCM string) *Finding {
	if activeCCM != "" {
		return nil
	}
	var names []string
	for i := range services {
		s := &services[i]
		if ours(s) && slices.Contains(s.Finalizers, lbCleanupFinalizer) {
			names = append(names, s.Namespace+"/"+s.Name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	return &Finding{
		ID: "lb-finalizer-no-controller", Area: AreaLoadBalancers, Severity: Warning,
		Title:   "LoadBalancer Services carry the " + lbCleanupFinalizer + " finalizer and no CCM holds a leader-election lease",
		Objects: names,
		Detail: "No CCM holds a leader-election lease (kube-system/cloud-controller-manager or " + LeaseMigration + "): their load balancers " +
			"are not reconciled, and deleting them hangs until a service controller removes the finalizer. A CCM running with --leader-elect=false " +
			"cannot be seen through the API: ignore this warning if one runs.",
		Fix: "Run the external CCM (it adopts these Services and their load balancers); do not remove the finalizer by hand unless the load balancer is gone.",
	}
}

// providerAnnotationPrefixes mark in-tree providers' Service annotations.
var providerAnnotationPrefixes = []string{
	"service.beta.kubernetes.io/aws-load-balancer-",
	"service.kubernetes.io/aws-load-balancer-",
	"cloud.google.com/load-balancer-type",
	"networking.gke.io/",
	"service.beta.kubernetes.io/azure-",
	"service.beta.kubernetes.io/openstack-",
	"loadbalancer.openstack.org/",
	"service.beta.kubernetes.io/vsphere-",
}

// LoadBalancerProviderAnnotations lists LoadBalancer Services with in-tree
// providers' annotations, which the new CCM may not honour.
func LoadBalancerProviderAnnotations(services []corev1.Service) *Finding {
	var objs []string
	for i := range services {
		s := &services[i]
		if !ours(s) {
			continue
		}
		var keys []string
		for k := range s.Annotations {
			if slices.ContainsFunc(providerAnnotationPrefixes, func(p string) bool { return strings.HasPrefix(k, p) }) {
				keys = append(keys, k)
			}
		}
		if len(keys) > 0 {
			sort.Strings(keys)
			objs = append(objs, s.Namespace+"/"+s.Name+" ("+strings.Join(keys, ", ")+")")
		}
	}
	if len(objs) == 0 {
		return nil
	}
	return &Finding{
		ID: "lb-provider-annotations", Area: AreaLoadBalancers, Severity: Warning,
		Title:   "LoadBalancer Services use in-tree provider annotations the new CCM may not honour",
		Objects: objs,
		Fix: "Compare each annotation with the external CCM's documented annotations; translate or drop the unsupported ones " +
			"before the switch, or the load balancers may be reconfigured (scheme, type, health checks, TLS) when the CCM takes over.",
	}
}
