package dataplane

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The benchmarks run nginx's stream proxy (one worker, no master, no
// daemon) in front of the same backend as Portside's data plane, as the
// yardstick a reader knows. nginx is optional: without it they say why and
// measure direct and Portside only.

// nginxStreamModules are where Debian's libnginx-mod-stream puts the module.
var nginxStreamModules = []string{
	"/usr/lib/nginx/modules/ngx_stream_module.so",
	"/usr/share/nginx/modules/ngx_stream_module.so",
}

// nginxBinary is nginx and the load_module line its stream module needs
// ("" when built in), or why there is none.
type nginxBinary struct {
	path, loadModule, missing string
}

var (
	nginxOnce  sync.Once
	nginxFound nginxBinary
)

// findNginx looks for nginx with the stream module; with install it runs
// hack/ensure-nginx.sh first if they are missing (benchmarks do, the smoke
// test does not: `make test` installs nothing).
func findNginx(install bool) nginxBinary {
	if nb := lookNginx(); nb.missing == "" || !install {
		return nb
	}
	nginxOnce.Do(func() {
		script := filepath.Join(repoRoot(), "hack", "ensure-nginx.sh")
		out, err := exec.Command("bash", script).CombinedOutput()
		nginxFound = lookNginx()
		if nginxFound.missing != "" {
			nginxFound.missing += fmt.Sprintf(" (after %s: %v %s)", script, err, strings.TrimSpace(string(out)))
		}
	})
	return nginxFound
}

func lookNginx() nginxBinary {
	path, err := exec.LookPath("nginx")
	if err != nil {
		return nginxBinary{missing: "no nginx in PATH"}
	}
	for _, m := range nginxStreamModules {
		if _, err := os.Stat(m); err == nil {
			return nginxBinary{path: path, loadModule: "load_module " + m + ";"}
		}
	}
	if v, _ := exec.Command(path, "-V").CombinedOutput(); strings.Contains(string(v), "--with-stream ") {
		return nginxBinary{path: path} // built in
	}
	return nginxBinary{missing: "nginx has no stream module"}
}

// repoRoot is the directory holding go.mod above the package.
func repoRoot() string {
	dir, _ := os.Getwd()
	for d := dir; d != filepath.Dir(d); d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
	}
	return dir
}

// startNginx runs nginx's stream proxy from a free loopback address to
// backend and returns that address; tb.Cleanup stops it by its PID.
func startNginx(tb testing.TB, nb nginxBinary, backend string) (string, error) {
	dir := tb.TempDir()
	addr := freeLoopbackPort(tb)
	conf := fmt.Sprintf(`%s
worker_processes 1;
daemon off;
master_process off;
pid %s/nginx.pid;
error_log %s/error.log warn;
events { worker_connections 4096; }
stream {
	server {
		listen %s;
		proxy_pass %s;
		proxy_half_close on; # the throughput client half-closes
	}
}
`, nb.loadModule, dir, dir, addr, backend)
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return "", err
	}
	// -e: the compiled-in error log (/var/log/nginx) is opened before the
	// config is read; -p: no paths under the system prefix.
	cmd := exec.Command(nb.path, "-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", confPath)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // no orphan if the test binary dies
	if err := cmd.Start(); err != nil {
		return "", err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			return "", fmt.Errorf("nginx exited: %s", strings.TrimSpace(string(log)))
		default:
		}
		if c, err := net.Dial("tcp", addr); err == nil {
			_ = c.Close()
			return addr, nil
		}
	}
	return "", fmt.Errorf("nginx not accepting on %s after 5s", addr)
}

// freeLoopbackPort is a random loopback address with a port that was free
// a moment ago (bound, then closed).
func freeLoopbackPort(tb testing.TB) string {
	ip := randomLoopback()
	l, err := net.Listen("tcp", netip.AddrPortFrom(ip, 0).String())
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}
