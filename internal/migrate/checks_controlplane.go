package migrate

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// inTreeCloudProviders are the cloud providers once compiled into Kubernetes.
var inTreeCloudProviders = []string{"aws", "gce", "azure", "vsphere", "openstack", "cloudstack", "ovirt", "photon", "kubemark"}

// flagValue returns the value of --name in args ("--name=v" or "--name v")
// and whether it is there.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		switch {
		case strings.HasPrefix(a, "--"+name+"="):
			return strings.TrimPrefix(a, "--"+name+"="), true
		case a == "--"+name:
			if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
				return args[i+1], true
			}
			return "", true
		}
	}
	return "", false
}

// controlPlaneComponent tells which component a kube-system static pod's
// mirror pod is ("" for other pods).
func controlPlaneComponent(p *corev1.Pod) string {
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; !mirror {
		return ""
	}
	for _, c := range []string{"kube-controller-manager", "kube-apiserver"} {
		if strings.HasPrefix(p.Name, c+"-") || p.Labels["component"] == c {
			return c
		}
	}
	return ""
}

// ControlPlaneFlags reads kube-controller-manager's and kube-apiserver's
// flags from their static pods' mirror pods in kube-system.
func ControlPlaneFlags(pods []corev1.Pod) []*Finding {
	var inTree, cloudConfig, cloudControllers []string
	for i := range pods {
		p := &pods[i]
		comp := controlPlaneComponent(p)
		if comp == "" {
			continue
		}
		for _, c := range p.Spec.Containers {
			args := append(append([]string{}, c.Command...), c.Args...)
			provider, hasProvider := flagValue(args, "cloud-provider")
			if hasProvider && provider != "" && provider != "external" {
				inTree = append(inTree, fmt.Sprintf("%s (%s: --cloud-provider=%s)", p.Name, comp, provider))
			}
			if cfg, ok := flagValue(args, "cloud-config"); ok && (provider == "" || provider == "external") {
				cloudConfig = append(cloudConfig, fmt.Sprintf("%s (%s: --cloud-config=%s)", p.Name, comp, cfg))
			}
			if comp == "kube-controller-manager" && provider == "external" {
				if ctrls, ok := flagValue(args, "controllers"); ok {
					if enabled := enabledCloudControllers(ctrls); len(enabled) > 0 {
						cloudControllers = append(cloudControllers, fmt.Sprintf("%s (--controllers=%s)", p.Name, ctrls))
					}
				}
			}
		}
	}
	var out []*Finding
	if len(inTree) > 0 {
		out = append(out, &Finding{
			ID: "control-plane-in-tree-provider", Area: AreaControlPlane, Severity: Blocking,
			Title:   "Control-plane components run an in-tree cloud provider",
			Objects: inTree,
			Detail: "In-tree providers (" + strings.Join(inTreeCloudProviders, ", ") + ") were removed from Kubernetes in v1.31 (KEP-2395); " +
				"kube-controller-manager v1.31+ refuses them.",
			Fix: "Set --cloud-provider=external on kube-controller-manager (and drop --cloud-provider/--cloud-config from kube-apiserver), " +
				"deploy the external CCM with the cloud config, and hand the cloud controllers over with leader migration (below) on an HA control plane.",
		})
	}
	if len(cloudConfig) > 0 {
		out = append(out, &Finding{
			ID: "control-plane-cloud-config", Area: AreaControlPlane, Severity: Warning,
			Title:   "Control-plane components still get --cloud-config without an in-tree provider",
			Objects: cloudConfig,
			Fix:     "Give the cloud config to the CCM (portside ccm --cloud-config) and remove --cloud-config from these components: they no longer use it.",
		})
	}
	if len(cloudControllers) > 0 {
		out = append(out, &Finding{
			ID: "kcm-external-cloud-controllers", Area: AreaControlPlane, Severity: Info,
			Title:   "kube-controller-manager runs with --cloud-provider=external and --controllers does not disable the cloud controllers",
			Objects: cloudControllers,
			Detail: "With --cloud-provider=external kube-controller-manager has no cloud, so it does not run cloud-node-lifecycle, service(-lb) " +
				"or (node-)route; since v1.31 it has no cloud controllers at all. The external CCM runs them.",
			Fix: "Nothing is required; for clarity list them disabled (--controllers=*,-cloud-node-lifecycle,-service,-route) on versions that still know them.",
		})
	}
	return out
}

// enabledCloudControllers returns the cloud controllers a --controllers
// value enables ("*" enables the default ones, which include them before v1.31).
func enabledCloudControllers(value string) []string {
	items := strings.Split(value, ",")
	star := slices.Contains(items, "*")
	var out []string
	for _, names := range [][]string{
		{"cloud-node-lifecycle", "cloud-node-lifecycle-controller"},
		{"service", "service-controller", "service-lb-controller"},
		{"route", "route-controller", "node-route-controller"},
	} {
		disabled, enabled := false, false
		for _, n := range names {
			disabled = disabled || slices.Contains(items, "-"+n)
			enabled = enabled || slices.Contains(items, n)
		}
		if !disabled && (enabled || star) {
			out = append(out, names[0])
		}
	}
	return out
}

// KubeletProbe is what a kubelet's /configz said, read through the node proxy.
type KubeletProbe struct {
	Node string
	// Err is why configz could not be read (forbidden, unreachable).
	Err string
	// CloudProvider is kubeletconfig.cloudProvider when configz reports it
	// (old kubelets); Reported tells whether it did.
	CloudProvider string
	Reported      bool
}

// KubeletCloudProviders: kubelets reporting an in-tree cloud provider are
// blocking; unreadable configz and kubelets that do not report the flag are
// info, pointing at the API-visible signals.
func KubeletCloudProviders(probes []KubeletProbe) []*Finding {
	var inTree, unreadable, unreported []string
	for _, p := range probes {
		switch {
		case p.Err != "":
			unreadable = append(unreadable, p.Node+": "+p.Err)
		case !p.Reported:
			unreported = append(unreported, p.Node)
		case p.CloudProvider != "" && p.CloudProvider != "external":
			inTree = append(inTree, p.Node+" (cloudProvider="+p.CloudProvider+")")
		}
	}
	var out []*Finding
	if len(inTree) > 0 {
		out = append(out, &Finding{
			ID: "kubelet-in-tree-provider", Area: AreaKubelets, Severity: Blocking,
			Title:   "Kubelets report an in-tree cloud provider",
			Objects: inTree,
			Fix:     "Restart these kubelets with --cloud-provider=external (one node pool at a time, after the CCM runs).",
		})
	}
	if len(unreadable) > 0 {
		out = append(out, &Finding{
			ID: "kubelet-configz-unreadable", Area: AreaKubelets, Severity: Info,
			Title:   "Kubelet configuration not readable through the API (nodes/proxy configz): skipped",
			Objects: unreadable,
			Fix:     "Check these kubelets' --cloud-provider flag on the hosts: it must be external (or empty without a cloud).",
		})
	}
	if len(unreported) > 0 {
		out = append(out, &Finding{
			ID: "kubelet-cloud-provider-unreported", Area: AreaKubelets, Severity: Info,
			Title:   "Kubelets do not report --cloud-provider in configz (a command-line flag, not KubeletConfiguration)",
			Objects: unreported,
			Detail:  "A Node without providerID or still tainted uninitialized (Nodes above) is the API-visible sign of a kubelet's cloud provider setting.",
			Fix:     "Check these kubelets' --cloud-provider flag on the hosts: it must be external.",
		})
	}
	return out
}
