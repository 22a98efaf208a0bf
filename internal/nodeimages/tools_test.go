package nodeimages

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/testskip"
)

// hostLayer is the tools layer from this host's packages, or a skip
// saying to install them (a failure under CI).
func hostLayer(t *testing.T) ([]byte, string) {
	t.Helper()
	layer, by, err := hostToolsLayer(runtime.GOARCH)
	if err != nil {
		if strings.Contains(err.Error(), "not installed") || os.IsNotExist(err) {
			testskip.Unavailable(t, "%v", err)
		}
		t.Fatal(err)
	}
	return layer, by
}

// TestHostToolsLayer unpacks the tools layer alone into a directory and
// runs its programs chrooted there with a /proc of their own (busybox's
// standalone shell re-executes /proc/self/exe: with /proc, as in a pod,
// sh must still run the real nc and ip), as a pod of the image would (the
// agnhost binary needs nothing of it): each finds its loader and every
// library in the layer, and sh, nc, curl and wget reach a server on
// loopback. Two builds give the same bytes.
func TestHostToolsLayer(t *testing.T) {
	if os.Geteuid() != 0 {
		testskip.Unavailable(t, "chroot needs root")
	}
	layer, by := hostLayer(t)
	for _, p := range []string{"busybox-static=", "dash=", "wget=", "netcat-openbsd=", "curl=", "bind9-dnsutils=", "socat=", "iproute2=", "bash=", "libc-bin="} {
		if !strings.Contains(by, p) {
			t.Errorf("history %q does not name %s", by, p)
		}
	}
	again, _ := hostLayer(t)
	if !bytes.Equal(layer, again) {
		t.Error("two builds of the tools layer differ")
	}
	root := t.TempDir()
	unpack(t, layer, root)
	if err := os.Mkdir(filepath.Join(root, "proc"), 0o555); err != nil {
		t.Fatal(err)
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		testskip.Unavailable(t, "util-linux's unshare: %v", err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "pong") }), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := ln.Addr().(*net.TCPAddr)
	// A server that accepts and never answers: wget -T 1 must give up
	// after one try, as busybox's does.
	mute, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mute.Close() })
	go func() {
		for {
			c, err := mute.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() })
		}
	}()
	muteURL := fmt.Sprintf("http://%s/", mute.Addr())
	url := fmt.Sprintf("http://127.0.0.1:%d/", addr.Port)
	for _, tc := range []struct{ cmd, want string }{
		{"echo hi", "hi"},
		{"readlink /proc/$$/exe", "/usr/bin/dash"},
		{"nc -h 2>&1", "OpenBSD netcat"},
		{"curl -s " + url, "pong"},
		{"wget -T 30 -qO- " + url, "pong"},
		{fmt.Sprintf("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -v -t -w 2 127.0.0.1 %d", addr.Port), "pong"},
		{"bash -c 'echo $BASH_VERSION'", "5."},
		{"start=$(date +%s); timeout 15 wget -T 1 -qO- " + muteURL + "; rc=$?; [ $(( $(date +%s) - start )) -le 4 ] && echo quick rc=$rc", "quick rc=4"},
		{"dig -v 2>&1", "DiG 9."},
		{"nslookup -version 2>&1", "nslookup 9."},
		{"socat -V", "socat version"},
		{"ip -V", "iproute2"},
		{"ss -V", "iproute2"},
		{"ls /etc/nsswitch.conf && sleep 0.1 && seq 2 | xargs echo applets", "applets 1 2"},
		{"env timeout 5 nc -h 2>&1", "OpenBSD netcat"},
		// The DNS specs' /etc/hosts probe (the kubelet mounts the file).
		{"echo '192.0.2.7 probe-host' > /etc/hosts && getent hosts probe-host", "192.0.2.7"},
	} {
		// A mount and PID namespace of its own: the /proc mount goes
		// with it; the network is the host's (loopback only).
		cmd := exec.Command(unshare, "--mount", "--pid", "--fork", "--mount-proc="+filepath.Join(root, "proc"),
			"chroot", root, "/bin/sh", "-c", tc.cmd)
		cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("chroot %s: %s: %v: %q, want it to say %q", root, tc.cmd, err, out, tc.want)
		}
	}
}

// unpack writes a layer's directories, files and symbolic links into dir.
func unpack(t *testing.T, layer []byte, dir string) {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(layer))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, p)
		case tar.TypeReg:
			var data []byte
			if data, err = io.ReadAll(tr); err == nil {
				err = os.WriteFile(p, data, os.FileMode(h.Mode))
			}
		default:
			err = fmt.Errorf("unexpected entry type %c", h.Typeflag)
		}
		if err != nil {
			t.Fatalf("%s: %v", h.Name, err)
		}
	}
}
