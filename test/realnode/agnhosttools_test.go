package realnode_test

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/portside-io/portside/internal/tools"
)

// TestAgnhostTools runs two agnhost pods on a real node and, in one, the
// commands Kubernetes' e2e specs exec in agnhost pods, through the image's
// /bin/sh, against the other (netexec: HTTP on 8080, UDP on 8081): nc over
// TCP and UDP (the LoadBalancer specs' reachability checks), curl, wget
// with a timeout (the source ranges spec), dig. Each must find its shared
// libraries and loader in the image's tools layer.
func TestAgnhostTools(t *testing.T) {
	c := startCluster(t)
	n := c.bootNode(t, 1)
	c.waitNode(t, n, 2*time.Minute, "registered", func(*corev1.Node) bool { return true })
	cidr := netip.PrefixFrom(c.ranges.Pods.Addr(), 24)
	setPodCIDR(t, c, n.name, cidr)
	if err := c.nw.SetRoute(cidr, n.addr); err != nil {
		t.Fatal(err)
	}
	c.importImages(t, n)
	c.waitNode(t, n, 2*time.Minute, "Ready", nodeReady)
	server, client := c.runAgnhost(t, "tools-server", n), c.runAgnhost(t, "tools-client", n)
	ip := server.Status.PodIP
	for _, tc := range []struct{ cmd, want string }{
		{fmt.Sprintf("echo hi | nc -v -t -w 2 %s 8080", ip), "succeeded"},
		{fmt.Sprintf("echo hostName | nc -v -u -w 2 %s 8081", ip), server.Name},
		{fmt.Sprintf("curl -s http://%s:8080/hostname", ip), server.Name},
		{fmt.Sprintf("wget -T 30 -qO- http://%s:8080/hostname", ip), server.Name},
		{"dig -v 2>&1; nslookup -version 2>&1", "DiG 9."},
		{"bash -c 'echo $BASH_VERSION'; socat -V | head -2; ip -V; ss -V", "socat version"},
	} {
		out, err := execIn(c, client.Name, "/bin/sh", "-c", tc.cmd)
		t.Logf("%s: %v\n%s", tc.cmd, err, out)
		if err != nil || !strings.Contains(out, tc.want) {
			t.Errorf("kubectl exec %s -- /bin/sh -c %q: %v\n%s\nwant it to say %q", client.Name, tc.cmd, err, out, tc.want)
		}
	}
}

// execIn runs a command in a pod's container with kubectl exec and returns
// its output (stdout and stderr).
func execIn(c *cluster, pod string, cmd ...string) (string, error) {
	dir, err := tools.BinDir()
	if err != nil {
		return "", err
	}
	bin, err := tools.Path(dir, tools.Kubectl)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args := append([]string{"--kubeconfig", c.cp.KubeconfigPath, "-n", "default", "exec", pod, "--"}, cmd...)
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	return string(bytes.TrimSpace(out)), err
}
