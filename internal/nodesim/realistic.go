package nodesim

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// RealisticImages is how many container images a realistic node reports:
// real nodes list every image they have pulled (the kubelet reports up to
// 50), and those lists are most of a Node's size.
const RealisticImages = 45

// makeRealistic fills in what a real kubelet's Node carries besides what
// the controllers read: every pressure condition, capacity and allocatable
// of each resource, full nodeInfo, the images it has pulled, and the
// annotations the kubelet and CSI set. About 12 KB of JSON, as on real
// clusters, so that memory benchmarks measure caches of real size.
func makeRealistic(node *corev1.Node) {
	sum := sha256.Sum256([]byte(node.Name))
	id := hex.EncodeToString(sum[:])
	if node.Annotations == nil {
		node.Annotations = map[string]string{}
	}
	node.Annotations["volumes.kubernetes.io/controller-managed-attach-detach"] = "true"
	node.Annotations["node.alpha.kubernetes.io/ttl"] = "0"
	node.Annotations["csi.volume.kubernetes.io/nodeid"] = fmt.Sprintf(`{"ebs.csi.local":"i-%s","efs.csi.local":"i-%s"}`, id[:17], id[:17])
	node.Labels["kubernetes.io/os"] = "linux"
	node.Labels["node-role.kubernetes.io/worker"] = ""
	node.Labels["pool.portside.io/name"] = "general-purpose-" + id[:4]

	st := &node.Status
	st.Capacity = corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("65843244Ki"),
		corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceEphemeralStorage: resource.MustParse("203056560Ki"),
		"hugepages-1Gi": resource.MustParse("0"), "hugepages-2Mi": resource.MustParse("0"),
		"attachable-volumes-csi-ebs.csi.local": resource.MustParse("25"),
	}
	st.Allocatable = corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("15890m"), corev1.ResourceMemory: resource.MustParse("64692268Ki"),
		corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceEphemeralStorage: resource.MustParse("186060798213"),
		"hugepages-1Gi": resource.MustParse("0"), "hugepages-2Mi": resource.MustParse("0"),
		"attachable-volumes-csi-ebs.csi.local": resource.MustParse("25"),
	}
	now := metav1.Now()
	for _, c := range []struct {
		typ            corev1.NodeConditionType
		reason, detail string
	}{
		{corev1.NodeMemoryPressure, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"},
		{corev1.NodeDiskPressure, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"},
		{corev1.NodePIDPressure, "KubeletHasSufficientPID", "kubelet has sufficient PID available"},
	} {
		st.Conditions = append(st.Conditions, corev1.NodeCondition{Type: c.typ, Status: corev1.ConditionFalse,
			Reason: c.reason, Message: c.detail, LastHeartbeatTime: now, LastTransitionTime: now})
	}
	st.NodeInfo = corev1.NodeSystemInfo{
		MachineID: id[:32], SystemUUID: fmt.Sprintf("%s-%s-%s-%s-%s", id[32:40], id[40:44], id[44:48], id[48:52], id[52:64]),
		BootID:        fmt.Sprintf("%s-%s-%s-%s-%s", id[:8], id[8:12], id[12:16], id[16:20], id[20:32]),
		KernelVersion: "6.1.0-27-cloud-amd64", OSImage: "Debian GNU/Linux 12 (bookworm)",
		ContainerRuntimeVersion: "containerd://1.7.24", KubeletVersion: "v1.37.2",
		OperatingSystem: "linux", Architecture: "amd64",
	}
	st.RuntimeHandlers = []corev1.NodeRuntimeHandler{
		{Name: "runc", Features: &corev1.NodeRuntimeHandlerFeatures{RecursiveReadOnlyMounts: ptr.To(true), UserNamespaces: ptr.To(true)}},
		{Name: "", Features: &corev1.NodeRuntimeHandlerFeatures{RecursiveReadOnlyMounts: ptr.To(true), UserNamespaces: ptr.To(true)}},
	}
	st.Features = &corev1.NodeFeatures{SupplementalGroupsPolicy: ptr.To(true)}
	st.Images = make([]corev1.ContainerImage, RealisticImages)
	for i := range st.Images {
		repo := fmt.Sprintf("registry.example.com/team-%02d/service-%02d", i%7, i)
		digest := sha256.Sum256(fmt.Appendf(nil, "%s/%d", node.Name[:min(len(node.Name), 6)], i))
		st.Images[i] = corev1.ContainerImage{
			Names:     []string{repo + "@sha256:" + hex.EncodeToString(digest[:]), fmt.Sprintf("%s:v1.%d.%d", repo, i%13, i%5)},
			SizeBytes: int64(20_000_000 + i*3_145_728),
		}
	}
	st.VolumesInUse = []corev1.UniqueVolumeName{corev1.UniqueVolumeName("kubernetes.io/csi/ebs.csi.local^vol-" + id[:17])}
	st.VolumesAttached = []corev1.AttachedVolume{{Name: st.VolumesInUse[0], DevicePath: ""}}
}
