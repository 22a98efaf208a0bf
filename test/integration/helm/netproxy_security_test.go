package helm

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestNetworkProxyServerExposesLittle: with a non-default pkiDir, the
// chart's proxy-server still mounts only the two files it reads from it
// (read-only, type File), never the directory, and listens for health and
// admin on loopback without declaring them as host ports.
func TestNetworkProxyServerExposesLittle(t *testing.T) {
	stream := mustRender(t, map[string]any{"networkProxy": map[string]any{"enabled": true,
		"server": map[string]any{"pkiDir": "/srv/pki"}}})
	ds := &appsv1.DaemonSet{}
	mustGet(t, objects(t, stream), "DaemonSet", "portside-proxy-server", ds)
	spec := ds.Spec.Template.Spec
	c := &spec.Containers[0]
	for _, a := range []string{"--cluster-cert=/srv/pki/apiserver.crt", "--cluster-key=/srv/pki/apiserver.key",
		"--health-bind-address=127.0.0.1", "--admin-bind-address=127.0.0.1"} {
		if !hasArg(c, a) {
			t.Errorf("proxy-server lacks %q: %q", a, c.Command)
		}
	}
	hostPaths := map[string]corev1.HostPathVolumeSource{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = *v.HostPath
		}
	}
	files := 0
	for _, m := range c.VolumeMounts {
		hp := hostPaths[m.Name]
		if hp.Path == "/srv/pki" || m.MountPath == "/srv/pki" {
			t.Errorf("the PKI directory is mounted: %+v", m)
		}
		if m.MountPath == "/srv/pki/apiserver.crt" || m.MountPath == "/srv/pki/apiserver.key" {
			if hp.Path != m.MountPath || hp.Type == nil || *hp.Type != corev1.HostPathFile || !m.ReadOnly {
				t.Errorf("mount %+v of %+v: want the node's file, type File, read-only", m, hp)
			}
			delete(hostPaths, m.Name)
			files++
		}
	}
	if files != 2 || len(hostPaths) != 2 { // the kubeconfig and the socket's directory remain
		t.Errorf("apiserver.crt and apiserver.key are not both mounted, or extra volumes: %+v", hostPaths)
	}
	for _, p := range c.Ports {
		if p.Name != "agentport" {
			t.Errorf("proxy-server declares port %+v; only the agent port is reachable off the node", p)
		}
	}
}
