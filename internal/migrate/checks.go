package migrate

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// Snapshot is what Collect read from the cluster: the input of the pure
// decision functions.
type Snapshot struct {
	Server        string
	ServerVersion string
	// Minor is the server's minor version (0 when unknown).
	Minor int

	Nodes          []corev1.Node
	KubeSystemPods []corev1.Pod
	Kubelets       []KubeletProbe
	PVs            []corev1.PersistentVolume
	StorageClasses []storagev1.StorageClass
	CSIDrivers     []storagev1.CSIDriver
	CSINodes       []storagev1.CSINode
	Services       []corev1.Service
	// ServiceAccount tells whether kube-system/cloud-controller-manager exists.
	ServiceAccount bool
	Access         []AccessCheck
	// MigrationAccess: kube-controller-manager's and the CCM's access to
	// the migration Lease.
	MigrationAccess []SubjectAccess
	// Leases by name in kube-system; absent names were not found.
	Leases map[string]*coordinationv1.Lease
	// Errors are the reads that failed, by what was read ("nodes": "forbidden").
	Errors map[string]string
	Now    time.Time
}

// Evaluate runs every decision function over s.
func Evaluate(s *Snapshot) *Report {
	r := &Report{Server: s.Server, ServerVersion: s.ServerVersion, CheckedAt: s.Now}
	add := func(fs ...*Finding) {
		for _, f := range fs {
			if f != nil {
				r.Findings = append(r.Findings, *f)
			}
		}
	}
	active := ActiveCCM(s.Leases, s.Now)
	add(ReadErrors(s.Errors)...)
	add(NodesWithoutProviderID(s.Nodes), NodesWithBetaLabelsOnly(s.Nodes), NodesUninitialized(s.Nodes, active))
	add(ControlPlaneFlags(s.KubeSystemPods)...)
	add(KubeletCloudProviders(s.Kubelets)...)
	add(InTreeVolumes(s.PVs, s.CSIDrivers, s.Minor)...)
	add(InTreeStorageClasses(s.StorageClasses, s.CSIDrivers, s.Minor)...)
	add(CSINodeReadiness(s.Nodes, s.CSINodes, s.PVs, s.StorageClasses)...)
	add(LoadBalancerCleanupWithoutController(s.Services, active), LoadBalancerProviderAnnotations(s.Services))
	add(CCMAccess(s.ServiceAccount, s.Access))
	add(CCMLeases(s.Leases, s.Now)...)
	r.LeaderMigration = LeaderMigrationConfigs()
	r.LeaderMigrationPlan = LeaderMigrationPlan()
	add(LeaderMigrationFinding())
	add(MigrationLeaseAccess(s.MigrationAccess, s.Leases[LeaseMigration] != nil))
	add(KCMLeaderMigrationFlags(s.KubeSystemPods)...)
	r.finish()
	return r
}

// ReadErrors: reads that failed leave checks undone, so the cluster cannot
// be called ready.
func ReadErrors(errs map[string]string) []*Finding {
	keys := make([]string, 0, len(errs))
	for k := range errs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []*Finding
	for _, k := range keys {
		out = append(out, &Finding{
			ID: "read-failed", Area: AreaAccess, Severity: Blocking,
			Title:  "Could not read " + k + ": its checks were not run",
			Detail: errs[k],
			Fix:    "Run the check with credentials that can list/get " + k + " (cluster-admin or a read-only role covering it).",
		})
	}
	return out
}

// Node labels and taints.
const (
	betaZone         = "failure-domain.beta.kubernetes.io/zone"
	betaRegion       = "failure-domain.beta.kubernetes.io/region"
	betaInstanceType = "beta.kubernetes.io/instance-type"
	uninitTaint      = "node.cloudprovider.kubernetes.io/uninitialized"
)

// gaLabel maps each beta label to its GA replacement.
var gaLabel = map[string]string{
	betaZone:         corev1.LabelTopologyZone,
	betaRegion:       corev1.LabelTopologyRegion,
	betaInstanceType: corev1.LabelInstanceTypeStable,
}

// NodesWithoutProviderID: the external CCM maps Nodes to instances by
// spec.providerID.
func NodesWithoutProviderID(nodes []corev1.Node) *Finding {
	var names []string
	for _, n := range nodes {
		if n.Spec.ProviderID == "" {
			names = append(names, n.Name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	return &Finding{
		ID: "node-without-provider-id", Area: AreaNodes, Severity: Blocking,
		Title:   "Nodes without spec.providerID: the external CCM cannot map them to instances",
		Objects: names,
		Fix: "Start their kubelets with --cloud-provider=external so that the CCM initializes them (it sets providerID, " +
			"addresses and labels), or set providerID (kubelet --provider-id or KubeletConfiguration.providerID) and re-register the Node.",
	}
}

// NodesWithBetaLabelsOnly: a beta topology or instance-type label without
// its GA counterpart; the node's GA labels are what current schedulers,
// CSI drivers and CCMs read.
func NodesWithBetaLabelsOnly(nodes []corev1.Node) *Finding {
	var objs []string
	for _, n := range nodes {
		var missing []string
		for _, beta := range []string{betaZone, betaRegion, betaInstanceType} {
			if _, ok := n.Labels[beta]; !ok {
				continue
			}
			if _, ok := n.Labels[gaLabel[beta]]; !ok {
				missing = append(missing, gaLabel[beta])
			}
		}
		if len(missing) > 0 {
			objs = append(objs, n.Name+" (lacks "+strings.Join(missing, ", ")+")")
		}
	}
	if len(objs) == 0 {
		return nil
	}
	return &Finding{
		ID: "node-beta-labels-only", Area: AreaNodes, Severity: Warning,
		Title:   "Nodes with beta topology/instance-type labels only, no GA ones",
		Objects: objs,
		Fix: "Label them with the GA keys (topology.kubernetes.io/zone, topology.kubernetes.io/region, node.kubernetes.io/instance-type), " +
			"e.g. kubectl label node <n> topology.kubernetes.io/zone=<beta value>, and move nodeSelectors, affinities, " +
			"topologySpreadConstraints and StorageClass allowedTopologies off the failure-domain.beta.kubernetes.io/* and beta.kubernetes.io/instance-type keys.",
	}
}

// NodesUninitialized: the kubelet registered with --cloud-provider=external
// and waits for a CCM to initialize the Node; nothing schedules there until
// then. Blocking when no CCM holds its lease.
func NodesUninitialized(nodes []corev1.Node, activeCCM string) *Finding {
	var names []string
	for _, n := range nodes {
		if slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == uninitTaint }) {
			names = append(names, n.Name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	f := &Finding{
		ID: "node-uninitialized", Area: AreaNodes, Objects: names,
		Title: "Nodes still tainted " + uninitTaint,
	}
	if activeCCM == "" {
		f.Severity = Blocking
		f.Detail = "No cloud controller manager holds the kube-system/cloud-controller-manager (or " + LeaseMigration + ") lease: nothing will initialize " +
			"these Nodes, and no pod without a toleration schedules on them (a CCM running with --leader-elect=false cannot be seen through the API)."
		f.Fix = "Deploy the external CCM (deploy/ccm/: serviceaccount.yaml, rbac.yaml, deployment.yaml) before, or together with, switching kubelets to --cloud-provider=external."
	} else {
		f.Severity = Warning
		f.Detail = "The CCM " + activeCCM + " is running but has not initialized these Nodes."
		f.Fix = "Read the CCM's logs and the Nodes' events (cloud-node-controller): the instance is usually not found by name or providerID in the cloud."
	}
	return f
}

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

// inTreePlugin describes an in-tree volume plugin and the CSI driver CSI
// migration hands it to.
type inTreePlugin struct {
	Plugin      string // PV spec field
	Provisioner string // in-tree StorageClass provisioner
	Driver      string // CSI driver name
	GA          int    // minor version where CSI migration went GA (always on)
}

var inTreePlugins = []inTreePlugin{
	{"awsElasticBlockStore", "kubernetes.io/aws-ebs", "ebs.csi.aws.com", 25},
	{"gcePersistentDisk", "kubernetes.io/gce-pd", "pd.csi.storage.gke.io", 25},
	{"azureDisk", "kubernetes.io/azure-disk", "disk.csi.azure.com", 24},
	{"azureFile", "kubernetes.io/azure-file", "file.csi.azure.com", 26},
	{"cinder", "kubernetes.io/cinder", "cinder.csi.openstack.org", 24},
	{"vsphereVolume", "kubernetes.io/vsphere-volume", "csi.vsphere.vmware.com", 26},
	{"portworxVolume", "kubernetes.io/portworx-volume", "pxd.portworx.com", 33},
}

// volumePlugin returns the in-tree plugin a PV uses, if any.
func volumePlugin(pv *corev1.PersistentVolume) *inTreePlugin {
	s := pv.Spec.PersistentVolumeSource
	used := map[string]bool{
		"awsElasticBlockStore": s.AWSElasticBlockStore != nil,
		"gcePersistentDisk":    s.GCEPersistentDisk != nil,
		"azureDisk":            s.AzureDisk != nil,
		"azureFile":            s.AzureFile != nil,
		"cinder":               s.Cinder != nil,
		"vsphereVolume":        s.VsphereVolume != nil,
		"portworxVolume":       s.PortworxVolume != nil,
	}
	for i := range inTreePlugins {
		if used[inTreePlugins[i].Plugin] {
			return &inTreePlugins[i]
		}
	}
	return nil
}

func hasDriver(drivers []storagev1.CSIDriver, name string) bool {
	return slices.ContainsFunc(drivers, func(d storagev1.CSIDriver) bool { return d.Name == name })
}

// migrationNote says how CSI migration covers plugin p on server minor.
func migrationNote(p *inTreePlugin, minor int) string {
	if minor > 0 && minor < p.GA {
		return fmt.Sprintf("CSI migration for %s is GA only from v1.%d: on v1.%d enable its CSIMigration feature gate on kube-controller-manager and kubelets.", p.Plugin, p.GA, minor)
	}
	return fmt.Sprintf("CSI migration for %s is GA and always on since v1.%d: the in-tree code no longer serves these volumes, the CSI driver %s does.", p.Plugin, p.GA, p.Driver)
}

// InTreeVolumes groups PVs by in-tree plugin: blocking when the plugin's
// CSI driver (its CSIDriver object) is not installed, info otherwise.
func InTreeVolumes(pvs []corev1.PersistentVolume, drivers []storagev1.CSIDriver, minor int) []*Finding {
	byPlugin := map[string][]string{}
	for i := range pvs {
		if p := volumePlugin(&pvs[i]); p != nil {
			byPlugin[p.Plugin] = append(byPlugin[p.Plugin], pvs[i].Name)
		}
	}
	var out []*Finding
	for i := range inTreePlugins {
		p := &inTreePlugins[i]
		names := byPlugin[p.Plugin]
		if len(names) == 0 {
			continue
		}
		f := &Finding{ID: "pv-in-tree-plugin", Area: AreaStorage, Objects: names, Detail: migrationNote(p, minor)}
		if hasDriver(drivers, p.Driver) {
			f.Severity = Info
			f.Title = fmt.Sprintf("PersistentVolumes use the in-tree %s plugin; CSI migration serves them through %s (installed)", p.Plugin, p.Driver)
			f.Fix = "Nothing is required; keep the CSI driver installed and up to date."
		} else {
			f.Severity = Blocking
			f.Title = fmt.Sprintf("PersistentVolumes use the in-tree %s plugin and the CSI driver %s is not installed", p.Plugin, p.Driver)
			f.Fix = fmt.Sprintf("Install the %s CSI driver (a CSIDriver object %s must exist) before removing the in-tree provider: "+
				"without it these volumes cannot be attached or mounted.", p.Driver, p.Driver)
		}
		out = append(out, f)
	}
	return out
}

// InTreeStorageClasses groups StorageClasses with in-tree provisioners like
// InTreeVolumes.
func InTreeStorageClasses(classes []storagev1.StorageClass, drivers []storagev1.CSIDriver, minor int) []*Finding {
	byProv := map[string][]string{}
	for _, sc := range classes {
		byProv[sc.Provisioner] = append(byProv[sc.Provisioner], sc.Name)
	}
	var out []*Finding
	for i := range inTreePlugins {
		p := &inTreePlugins[i]
		names := byProv[p.Provisioner]
		if len(names) == 0 {
			continue
		}
		f := &Finding{ID: "storageclass-in-tree-provisioner", Area: AreaStorage, Objects: names, Detail: migrationNote(p, minor)}
		if hasDriver(drivers, p.Driver) {
			f.Severity = Info
			f.Title = fmt.Sprintf("StorageClasses name the in-tree provisioner %s; CSI migration provisions through %s (installed)", p.Provisioner, p.Driver)
			f.Fix = fmt.Sprintf("Nothing is required; create new StorageClasses with provisioner %s (the default class too).", p.Driver)
		} else {
			f.Severity = Blocking
			f.Title = fmt.Sprintf("StorageClasses name the in-tree provisioner %s and the CSI driver %s is not installed", p.Provisioner, p.Driver)
			f.Fix = fmt.Sprintf("Install the %s CSI driver (with its external-provisioner): without it claims of these classes stay Pending. "+
				"Then prefer StorageClasses with provisioner %s.", p.Driver, p.Driver)
		}
		out = append(out, f)
	}
	return out
}

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

// CCMServiceAccount is the external CCM's ServiceAccount (deploy/ccm).
const (
	CCMNamespace      = "kube-system"
	CCMServiceAccount = "cloud-controller-manager"
)

// AccessCheck is one verb the CCM needs, and whether its ServiceAccount may.
type AccessCheck struct {
	Verb, Group, Resource, Subresource, Namespace, Name string
	Allowed                                             bool
	// Err is set when the SubjectAccessReview itself failed.
	Err string
}

// String is e.g. "patch nodes/status" or "update leases kube-system/cloud-controller-manager".
func (a AccessCheck) String() string {
	r := a.Resource
	if a.Group != "" {
		r += "." + a.Group
	}
	if a.Subresource != "" {
		r += "/" + a.Subresource
	}
	s := a.Verb + " " + r
	switch {
	case a.Namespace != "" && a.Name != "":
		s += " " + a.Namespace + "/" + a.Name
	case a.Namespace != "":
		s += " in " + a.Namespace
	}
	return s
}

// CCMAccessChecks are the key verbs of deploy/ccm/rbac.yaml, checked by
// SubjectAccessReview as the CCM's ServiceAccount.
func CCMAccessChecks() []AccessCheck {
	return []AccessCheck{
		{Verb: "list", Resource: "nodes"},
		{Verb: "patch", Resource: "nodes"},
		{Verb: "patch", Resource: "nodes", Subresource: "status"},
		{Verb: "list", Resource: "services"},
		{Verb: "patch", Resource: "services", Subresource: "status"},
		{Verb: "create", Resource: "events", Namespace: "default"},
		{Verb: "create", Group: "coordination.k8s.io", Resource: "leases", Namespace: CCMNamespace},
		{Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Namespace: CCMNamespace, Name: "cloud-controller-manager"},
		{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: CCMNamespace, Name: "cloud-controller-manager"},
	}
}

// CCMAccess: the CCM's ServiceAccount must exist and be allowed every key verb.
func CCMAccess(saExists bool, checks []AccessCheck) *Finding {
	var missing []string
	if !saExists {
		missing = append(missing, "ServiceAccount "+CCMNamespace+"/"+CCMServiceAccount+" does not exist")
	}
	for _, c := range checks {
		switch {
		case c.Err != "":
			missing = append(missing, c.String()+" (not checked: "+c.Err+")")
		case !c.Allowed:
			missing = append(missing, c.String())
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return &Finding{
		ID: "ccm-rbac-missing", Area: AreaCCM, Severity: Blocking,
		Title:   "The CCM's ServiceAccount " + CCMNamespace + "/" + CCMServiceAccount + " lacks what it needs",
		Objects: missing,
		Fix:     "kubectl apply -f deploy/ccm/serviceaccount.yaml -f deploy/ccm/rbac.yaml (least-privilege ClusterRole, bindings and the leader-election Role).",
	}
}

// Lease names in kube-system.
const (
	LeaseKCM       = "kube-controller-manager"
	LeaseCCM       = "cloud-controller-manager"
	LeaseMigration = "cloud-provider-extraction-migration"
)

// fresh tells whether a lease's holder renewed it recently (twice its
// duration, at least 30s).
func fresh(l *coordinationv1.Lease, now time.Time) bool {
	if l == nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" || l.Spec.RenewTime == nil {
		return false
	}
	d := 15 * time.Second
	if l.Spec.LeaseDurationSeconds != nil {
		d = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return now.Sub(l.Spec.RenewTime.Time) <= max(2*d, 30*time.Second)
}

// ActiveCCM returns the holder of a fresh CCM or migration lease, "" when no
// cloud controllers run under leader election.
func ActiveCCM(leases map[string]*coordinationv1.Lease, now time.Time) string {
	for _, name := range []string{LeaseCCM, LeaseMigration} {
		if l := leases[name]; fresh(l, now) {
			return *l.Spec.HolderIdentity
		}
	}
	return ""
}

func describeLease(l *coordinationv1.Lease, now time.Time) string {
	holder := "no holder"
	if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
		holder = "held by " + *l.Spec.HolderIdentity
	}
	if l.Spec.RenewTime != nil {
		holder += fmt.Sprintf(", renewed %v ago", now.Sub(l.Spec.RenewTime.Time).Round(time.Second))
	}
	if !fresh(l, now) {
		holder += " (stale)"
	}
	return CCMNamespace + "/" + l.Name + ": " + holder
}

// CCMLeases reports the controller managers' leases (info).
func CCMLeases(leases map[string]*coordinationv1.Lease, now time.Time) []*Finding {
	var out []*Finding
	if l := leases[LeaseCCM]; l != nil {
		out = append(out, &Finding{ID: "ccm-lease", Area: AreaCCM, Severity: Info,
			Title: "A cloud controller manager has run with leader election", Objects: []string{describeLease(l, now)}})
	} else {
		out = append(out, &Finding{ID: "ccm-lease", Area: AreaCCM, Severity: Info,
			Title: "No Lease " + CCMNamespace + "/" + LeaseCCM + ": no cloud controller manager has run with leader election",
			Fix:   "Expected before the migration; after deploying the CCM (deploy/ccm/deployment.yaml) the lease appears with its holder."})
	}
	if l := leases[LeaseKCM]; l != nil {
		out = append(out, &Finding{ID: "kcm-lease", Area: AreaLeaderMigration, Severity: Info,
			Title: "kube-controller-manager's lease", Objects: []string{describeLease(l, now)}})
	}
	if l := leases[LeaseMigration]; l != nil {
		out = append(out, &Finding{ID: "migration-lease", Area: AreaLeaderMigration, Severity: Info,
			Title:   "Leader migration has started: the migration lease exists",
			Objects: []string{describeLease(l, now)},
			Fix:     "Finish the migration: once every kube-controller-manager runs without the cloud controllers, drop --enable-leader-migration from both components."})
	}
	return out
}
