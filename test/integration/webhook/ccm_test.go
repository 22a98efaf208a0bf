package webhook

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portside-io/portside/internal/localcloud/localcloudtest"
	"github.com/portside-io/portside/internal/proc"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/internal/tools"
)

var built struct {
	once sync.Once
	dir  string
	err  error
}

// portsideBinary builds cmd/portside once per test binary run.
func portsideBinary(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		root, err := tools.RepoRoot()
		if err != nil {
			built.err = err
			return
		}
		if built.dir, built.err = os.MkdirTemp("", "webhook-bin-"); built.err != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", filepath.Join(built.dir, "portside"), "./cmd/portside")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return filepath.Join(built.dir, "portside")
}

// freePort returns a loopback port nobody listens on (the webhook flags
// take a port; 0 means "serve no webhooks", as upstream).
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestCCMServesTheWebhook: `portside ccm` with upstream's webhook flags (as
// deploy/ccm/deployment.yaml runs it), and `portside webhook serve` with the
// same flags, serve persistent-volume-label to the real apiserver, and
// serve a rotated certificate without a restart.
func TestCCMServesTheWebhook(t *testing.T) {
	for _, command := range []string{"ccm", "webhook serve"} {
		t.Run(strings.ReplaceAll(command, " ", "-"), func(t *testing.T) { servesTheWebhook(t, command) })
	}
}

func servesTheWebhook(t *testing.T, command string) {
	ctx := context.Background()
	cs, _ := clientWithWarnings(t)
	c := localcloudtest.Start(t)
	vol := createVolume(t, c, "data", "zone-a")
	dir := t.TempDir()

	bin := portsideBinary(t)
	cloudConfig := filepath.Join(dir, "cloud.yaml")
	if err := os.WriteFile(cloudConfig, []byte(fmt.Sprintf("endpoint: %s\ntoken: %s\n", c.Endpoint, c.Token)), 0o600); err != nil {
		t.Fatal(err)
	}
	// The Secret portside-ccm-webhook-tls, as mounted.
	first := issue(t)
	tlsDir := filepath.Join(dir, "webhook-tls")
	writePair := func(certPEM, keyPEM []byte) {
		t.Helper()
		// As the kubelet updates a Secret volume: new files, renamed in place.
		for name, data := range map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM} {
			tmp := filepath.Join(tlsDir, "."+name)
			if err := os.WriteFile(tmp, data, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, filepath.Join(tlsDir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.MkdirAll(tlsDir, 0o700); err != nil {
		t.Fatal(err)
	}
	writePair(first.cert, first.key)

	port := freePort(t)
	logPath := filepath.Join(dir, "ccm.log")
	args := append(strings.Fields(command), "--cloud-provider=local", "--cloud-config="+cloudConfig,
		"--webhooks=persistent-volume-label", "--webhook-bind-address=127.0.0.1", "--webhook-secure-port="+strconv.Itoa(port),
		"--webhook-tls-cert-file="+filepath.Join(tlsDir, "tls.crt"), "--webhook-tls-private-key-file="+filepath.Join(tlsDir, "tls.key"))
	if command == "ccm" {
		args = append(args, "--kubeconfig="+testenv.Kubeconfig(t), "--leader-elect=false", "--secure-port=0",
			"--bind-address=127.0.0.1", "--controllers=cloud-node-controller")
	}
	p, err := proc.Start("portside", bin, args, nil, logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop(10 * time.Second)
		if t.Failed() {
			t.Logf("ccm log:\n%s", proc.TailFile(logPath, 40))
		}
	})

	url := fmt.Sprintf("https://127.0.0.1:%d/persistent-volume-label", port)
	mwc := sampleConfig(t, url, "Fail")
	install(t, cs, mwc, vol, labeled)
	pv, err := cs.CoreV1().PersistentVolumes().Create(ctx, cloudPV(mwc, "pv", vol), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil || pv.Labels[zoneKey] != "zone-a" || pv.Labels[regionKey] != "region-1" || pv.Spec.NodeAffinity == nil {
		t.Fatalf("through the CCM: %v %+v", err, pv)
	}

	// Rotated certificates are served to new connections within seconds
	// of the files changing, without a restart (the apiserver's open
	// connection keeps the pair it negotiated, as with any rotation), and
	// the apiserver's calls go on working.
	served := func() string {
		conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			return err.Error()
		}
		defer func() { _ = conn.Close() }()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	for _, pair := range []pemPair{selfSigned(t), issue(t)} {
		want := serialOf(t, pair.cert)
		writePair(pair.cert, pair.key)
		testenv.Eventually(t, 10*time.Second, "the rotated certificate served", func() (bool, string) {
			got := served()
			return got == want, got
		})
	}
	testenv.Eventually(t, 10*time.Second, "the apiserver calling the webhook after the rotations", func() (bool, string) {
		pv, err := cs.CoreV1().PersistentVolumes().Create(ctx, cloudPV(mwc, "pv", vol), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return labeled(pv, err), fmt.Sprint(err)
	})
	select {
	case <-p.Done():
		t.Fatalf("the CCM exited: %v", p.ExitErr())
	default:
	}
	if log := proc.TailFile(logPath, 200); !strings.Contains(log, "persistent-volume-label") {
		t.Errorf("the CCM's log does not name the webhook:\n%s", log)
	}
}
