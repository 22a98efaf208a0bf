package e2e

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/portside-io/portside/internal/localcloud/server"
	"github.com/portside-io/portside/internal/localcloud/vpc"
	"github.com/portside-io/portside/internal/localcloud/vpc/vpctest"
	"github.com/portside-io/portside/internal/nodeimages"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/internal/tools"
	"github.com/portside-io/portside/pkg/cloud"
	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/providers/local"
)

// credentialPlugin is the plugin's name in the kubelet's config, which
// labels the kubelet's credential provider metrics.
const credentialPlugin = "portside-credential-provider"

// TestUpRealPrivateImage: on `portside up --node-mode=real`, a user pushes
// an image of their own to a private repository of the cloud's registry
// with a push credential from `portside cloud registries credential
// --push` (go-containerregistry, as crane would), and runs it as a pod on a
// real node. The registry refuses the machine an anonymous pull (401), so
// the pod starts only because the real kubelet exec'd
// portside-credential-provider, which asked the cloud's API at the VPC
// gateway for a pull credential: the kubelet's own metric
// (kubelet_credential_provider_plugin_duration, scraped through
// kube-apiserver's node proxy) counts the exec, with no plugin errors. The
// same image named by the registry's VPC address (the gateway's port 5000)
// runs too, with a credential of its own (one more exec).
func TestUpRealPrivateImage(t *testing.T) {
	vpctest.RequireRoot(t)
	bin, root := testenv.BuildPortside(t)
	data := filepath.Join(t.TempDir(), "up")
	t.Cleanup(func() {
		if out, err := exec.Command(bin, "down", "--data-dir", data).CombinedOutput(); err != nil {
			t.Errorf("portside down: %v\n%s", err, out)
		}
	})
	up, out, done := testenv.StartUp(t, bin, root, "--node-mode=real", "--nodes=1", "--data-dir", data)
	defer func() {
		if t.Failed() {
			t.Logf("portside up output:\n%s", out.String())
			logTail(t, data)
		}
		_, _ = exec.Command(bin, "down", "--data-dir", data).CombinedOutput()
		select {
		case <-done:
		case <-time.After(2 * time.Minute):
			_ = up.Process.Kill()
		}
	}()
	cloudDir := filepath.Join(data, "cloud")
	regHost := strings.TrimSpace(string(mustRead(t, filepath.Join(cloudDir, server.RegistryEndpointFile))))
	regVPC := strings.TrimSpace(string(mustRead(t, filepath.Join(cloudDir, server.RegistryVPCEndpointFile))))
	var nonce [4]byte
	_, _ = rand.Read(nonce[:])
	repo := "e2e/private-" + hex.EncodeToString(nonce[:])
	image := regHost + "/" + repo + ":1"

	// The user's push credential, as docs/quickstart.md says to get it.
	credOut, err := exec.Command(bin, "cloud", "registries", "credential", "--push", image, "--data-dir", cloudDir).Output()
	if err != nil {
		t.Fatalf("portside cloud registries credential --push: %v", err)
	}
	var cred api.Credential
	if err := json.Unmarshal(credOut, &cred); err != nil || !cred.Push || cred.Registry != regHost {
		t.Fatalf("push credential %s: %v", credOut, err)
	}
	digest := pushOwnImage(t, image, hex.EncodeToString(nonce[:]), &authn.Basic{Username: cred.Username, Password: cred.Password})

	kube := upClient(t, data)
	node := "node-1"
	netns := machineNetns(t, cloudDir, kube, node)
	manifest := "/v2/" + repo + "/manifests/1"
	if code := getFromMachine(t, netns, regVPC, manifest, nil); code != http.StatusUnauthorized {
		t.Fatalf("an anonymous GET %s at %s from %s's network = %d, want 401", manifest, regVPC, node, code)
	}
	// With a pull credential it is there: the 401 was the credential's.
	pull, err := exec.Command(bin, "cloud", "registries", "credential", image, "--data-dir", cloudDir).Output()
	if err != nil || json.Unmarshal(pull, &cred) != nil {
		t.Fatalf("pull credential: %v %s", err, pull)
	}
	if code := getFromMachine(t, netns, regVPC, manifest, &cred); code != http.StatusOK {
		t.Fatalf("GET %s with a pull credential from %s's network = %d, want 200", manifest, node, code)
	}

	before := pluginMetrics(t, kube, node)
	pod := runPrivatePod(t, kube, node, image)
	if got := pod.Status.ContainerStatuses[0].ImageID; !strings.HasSuffix(got, digest) {
		t.Errorf("the pod runs image %s, want the pushed %s", got, digest)
	}
	after := pluginMetrics(t, kube, node)
	t.Logf("kubelet %s: credential provider plugin execs %v → %v, errors %v → %v", node,
		before.execs, after.execs, before.errors, after.errors)
	if after.execs < before.execs+1 {
		t.Errorf("kubelet_credential_provider_plugin_duration_count{plugin_name=%q} went %v → %v: the kubelet did not exec the plugin for %s",
			credentialPlugin, before.execs, after.execs, image)
	}
	// The same image by the registry's name in the VPC (the gateway's): its
	// own credential, so one more exec.
	vpcImage := regVPC + "/" + repo + ":1"
	pod = runPrivatePod(t, kube, node, vpcImage)
	if got := pod.Status.ContainerStatuses[0].ImageID; !strings.HasSuffix(got, digest) {
		t.Errorf("the pod runs image %s, want the pushed %s", got, digest)
	}
	byVPC := pluginMetrics(t, kube, node)
	t.Logf("kubelet %s: after %s, plugin execs %v, errors %v", node, vpcImage, byVPC.execs, byVPC.errors)
	if byVPC.execs < after.execs+1 {
		t.Errorf("no plugin exec for %s: execs %v → %v", vpcImage, after.execs, byVPC.execs)
	}
	if byVPC.errors != before.errors {
		t.Errorf("kubelet_credential_provider_plugin_errors_total{plugin_name=%q} went %v → %v", credentialPlugin, before.errors, byVPC.errors)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// pushOwnImage pushes agnhost (the tools' build, as a user's base image)
// with a layer of the user's own, /owner.txt, and returns its digest.
func pushOwnImage(t *testing.T, image, owner string, auth authn.Authenticator) string {
	t.Helper()
	binDir, err := tools.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	imgs, _, err := nodeimages.Cached(binDir)
	if err != nil {
		t.Fatal(err)
	}
	var base *nodeimages.Image
	for i := range imgs {
		if imgs[i].Name == nodeimages.AgnhostImage {
			base = &imgs[i]
		}
	}
	if base == nil {
		t.Fatalf("no %s among the built images", nodeimages.AgnhostImage)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	body := []byte(owner + "\n")
	_ = tw.WriteHeader(&tar.Header{Name: "owner.txt", Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg})
	_, _ = tw.Write(body)
	_ = tw.Close()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(base.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(image, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithAuth(auth)); err != nil {
		t.Fatalf("push %s: %v", image, err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// machineNetns is the network namespace of node's machine (the cloud's
// record of its instance names the machine's directory).
func machineNetns(t *testing.T, cloudDir string, kube kubernetes.Interface, node string) string {
	t.Helper()
	n, err := kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	id, err := cloud.ParseProviderID(local.ProviderName, n.Spec.ProviderID)
	if err != nil {
		t.Fatal(err)
	}
	var st struct{ Netns string }
	if err := json.Unmarshal(mustRead(t, filepath.Join(cloudDir, "machines", id, "machine.json")), &st); err != nil || st.Netns == "" {
		t.Fatalf("machine %s: netns %q: %v", id, st.Netns, err)
	}
	return vpc.NetnsPath(st.Netns)
}

// getFromMachine GETs path at addr over a connection made inside the
// machine's network namespace (as its containerd would connect), with cred
// as HTTP Basic if set, and returns the status.
func getFromMachine(t *testing.T, netns, addr, path string, cred *api.Credential) int {
	t.Helper()
	var conn net.Conn
	if err := vpc.InNetns(netns, func() (err error) {
		conn, err = net.DialTimeout("tcp", addr, 5*time.Second)
		return err
	}); err != nil {
		t.Fatalf("connect to %s from the machine: %v", addr, err)
	}
	defer func() { _ = conn.Close() }()
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json")
	if cred != nil {
		req.SetBasicAuth(cred.Username, cred.Password)
	}
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

type pluginCounts struct{ execs, errors float64 }

// pluginMetrics scrapes the kubelet's /metrics through kube-apiserver's
// node proxy: the credential provider plugin's exec count (its duration
// histogram's count) and errors.
func pluginMetrics(t *testing.T, kube kubernetes.Interface, node string) pluginCounts {
	t.Helper()
	raw, err := kube.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", node, "proxy", "metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("kubelet metrics of %s through the node proxy: %v", node, err)
	}
	var c pluginCounts
	label := `{plugin_name="` + credentialPlugin + `"} `
	for _, line := range strings.Split(string(raw), "\n") {
		for prefix, dst := range map[string]*float64{
			"kubelet_credential_provider_plugin_duration_count" + label: &c.execs,
			"kubelet_credential_provider_plugin_errors_total" + label:   &c.errors,
		} {
			if v, ok := strings.CutPrefix(line, prefix); ok {
				if *dst, err = strconv.ParseFloat(strings.TrimSpace(v), 64); err != nil {
					t.Fatalf("%s: %v", line, err)
				}
			}
		}
	}
	return c
}

// runPrivatePod runs image on node (pulled always) and waits until it
// answers its readiness probe; a pull refused fails at once, with why.
func runPrivatePod(t *testing.T, kube kubernetes.Interface, node, image string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "private-", Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{
			Name: "app", Image: image, ImagePullPolicy: corev1.PullAlways,
			Args: []string{"netexec", "--http-port=8080"},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/hostname", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1},
		}}},
	}
	pod, err := kube.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		p, err := kube.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err == nil {
			for _, cs := range p.Status.ContainerStatuses {
				if w := cs.State.Waiting; w != nil && (w.Reason == "ErrImagePull" || w.Reason == "ImagePullBackOff") {
					t.Fatalf("pod %s on %s: %s: %s", p.Name, node, w.Reason, w.Message)
				}
				if cs.Ready {
					return p
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s not ready on %s within 2 minutes: %+v %v", pod.Name, node, p.Status, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// logTail shows the machines' kubelet and containerd logs' ends.
func logTail(t *testing.T, data string) {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(data, "cloud", "machines", "*", "log", "*.log"))
	for _, l := range logs {
		if !strings.HasSuffix(l, "kubelet.log") && !strings.HasSuffix(l, "containerd.log") {
			continue
		}
		b, _ := os.ReadFile(l)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		t.Logf("%s (last 15 lines):\n%s", l, strings.Join(lines[max(0, len(lines)-15):], "\n"))
	}
}
