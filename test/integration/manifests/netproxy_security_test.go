package manifests

import (
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/portside-io/portside/internal/netproxy/server"
)

// The proxy-server flags naming files it reads. A hostPath mount must be
// one of these files, or the socket's directory.
var proxyServerFileFlags = []string{"--cluster-cert", "--cluster-key", "--cluster-ca-cert",
	"--server-cert", "--server-key", "--server-ca-cert", "--kubeconfig"}

// TestNetworkProxyManifestsExposeLittle: deploy/network-proxy's proxy-server
// mounts only the files its flags name (not the PKI directory, which holds
// the cluster CA's and the service-account signing keys) and the socket's
// directory; its health and admin ports listen on loopback and are not
// declared as host ports; its command line passes the server's own
// security check. The chart's proxy-server is held to the same volumes and
// flags by test/integration/helm's TestNetworkProxy.
func TestNetworkProxyManifestsExposeLittle(t *testing.T) {
	pod := &corev1.Pod{}
	decodeOne(t, filepath.Join(netproxyDeployDir, "proxy-server.yaml"), pod)
	c := pod.Spec.Containers[0]
	if !pod.Spec.HostNetwork {
		t.Fatal("the proxy-server is not hostNetwork: probes to 127.0.0.1 would not reach it")
	}
	checkProxyServerMounts(t, pod.Spec.Volumes, c)
	for _, flag := range []string{"--health-bind-address", "--admin-bind-address"} {
		if v := flagValue(c.Command, flag); !isLoopback(v) {
			t.Errorf("proxy-server %s=%q, want a loopback address", flag, v)
		}
	}
	for _, p := range c.Ports {
		if s := "=" + strconv.Itoa(int(p.ContainerPort)); slices.Contains(c.Command, "--health-port"+s) || slices.Contains(c.Command, "--admin-port"+s) {
			t.Errorf("proxy-server declares its loopback-only port %d (%s)", p.ContainerPort, p.Name)
		}
	}
	for _, probe := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
		if probe == nil || probe.HTTPGet == nil || !isLoopback(probe.HTTPGet.Host) {
			t.Errorf("proxy-server probe %+v does not ask 127.0.0.1", probe)
		}
	}
	f := server.NewFlags()
	fs := pflag.NewFlagSet("proxy-server", pflag.ContinueOnError)
	f.AddFlags(fs)
	if err := fs.Parse(c.Command[2:]); err != nil {
		t.Fatal(err)
	}
	if err := f.CheckSecurity(); err != nil {
		t.Errorf("the shipped proxy-server would refuse to start: %v", err)
	}
	for _, flag := range []string{"--insecure-server-port", "--insecure-agent-port"} {
		if fs.Changed(strings.TrimPrefix(flag, "--")) {
			t.Errorf("the shipped proxy-server sets %s", flag)
		}
	}

	// The agent's admin port (pprof) is loopback; its health port too
	// (TestProxyAgentHealthOnLoopback, with the exec probe).
	ds := &appsv1.DaemonSet{}
	decodeOne(t, filepath.Join(netproxyDeployDir, "proxy-agent.yaml"), ds)
	if v := flagValue(ds.Spec.Template.Spec.Containers[0].Command, "--admin-bind-address"); !isLoopback(v) {
		t.Errorf("proxy-agent --admin-bind-address=%q, want a loopback address", v)
	}
}

func checkProxyServerMounts(t *testing.T, volumes []corev1.Volume, c corev1.Container) {
	t.Helper()
	files := map[string]bool{}
	for _, flag := range proxyServerFileFlags {
		if v := flagValue(c.Command, flag); v != "" {
			files[v] = true
		}
	}
	socketDir := filepath.Dir(flagValue(c.Command, "--uds-name"))
	byName := map[string]corev1.Volume{}
	for _, v := range volumes {
		byName[v.Name] = v
	}
	mounted := map[string]bool{}
	for _, m := range c.VolumeMounts {
		v, ok := byName[m.Name]
		if !ok || v.HostPath == nil {
			t.Errorf("mount %s: want a hostPath volume, got %+v", m.Name, v)
			continue
		}
		typ := corev1.HostPathUnset
		if v.HostPath.Type != nil {
			typ = *v.HostPath.Type
		}
		switch {
		case v.HostPath.Path != m.MountPath:
			t.Errorf("mount %s: host %s at %s; the flags name the node's paths", m.Name, v.HostPath.Path, m.MountPath)
		case files[m.MountPath]:
			if typ != corev1.HostPathFile && typ != corev1.HostPathFileOrCreate {
				t.Errorf("mount %s of %s has type %q, want File (a file, not what happens to be there)", m.Name, m.MountPath, typ)
			}
			if !m.ReadOnly {
				t.Errorf("mount %s of %s is writable", m.Name, m.MountPath)
			}
			mounted[m.MountPath] = true
		case m.MountPath == socketDir:
			if typ != corev1.HostPathDirectoryOrCreate {
				t.Errorf("socket directory %s has type %q", socketDir, typ)
			}
		default:
			t.Errorf("mount %s of %s: not a file the proxy-server's flags name (%v) nor the socket's directory %s", m.Name, m.MountPath, files, socketDir)
		}
	}
	for f := range files {
		if !mounted[f] {
			t.Errorf("%s is named by a flag but not mounted", f)
		}
	}
}

func decodeOne(t *testing.T, file string, into any) {
	t.Helper()
	for _, doc := range splitYAML(t, file) {
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		switch want := into.(type) {
		case *corev1.Pod:
			if o, ok := obj.(*corev1.Pod); ok {
				*want = *o
				return
			}
		case *appsv1.DaemonSet:
			if o, ok := obj.(*appsv1.DaemonSet); ok {
				*want = *o
				return
			}
		}
	}
	t.Fatalf("%s: no %T", file, into)
}

func isLoopback(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
