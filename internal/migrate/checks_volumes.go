package migrate

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
)

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
