// Package nginxtest runs nginx's stream proxy (one worker, no master, no
// daemon) in front of a backend, as the yardstick a reader knows beside
// Portside's data plane in benchmarks. nginx is optional: without it a
// benchmark says why and measures the other contenders only.
package nginxtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// streamModules are where Debian's libnginx-mod-stream puts the module.
var streamModules = []string{
	"/usr/lib/nginx/modules/ngx_stream_module.so",
	"/usr/share/nginx/modules/ngx_stream_module.so",
}

// Binary is nginx and the load_module line its stream module needs ("" when
// built in), or why there is none (Missing).
type Binary struct {
	Path, LoadModule, Missing string
}

var (
	installOnce sync.Once
	installed   Binary
)

// Find looks for nginx with the stream module; with install it runs
// hack/ensure-nginx.sh (from the repository holding the working
// directory) first if they are missing: benchmarks do, smoke tests do not
// (`make test` installs nothing).
func Find(install bool) Binary {
	if nb := look(); nb.Missing == "" || !install {
		return nb
	}
	installOnce.Do(func() {
		script := filepath.Join(repoRoot(), "hack", "ensure-nginx.sh")
		out, err := exec.Command("bash", script).CombinedOutput()
		installed = look()
		if installed.Missing != "" {
			installed.Missing += fmt.Sprintf(" (after %s: %v %s)", script, err, strings.TrimSpace(string(out)))
		}
	})
	return installed
}

func look() Binary {
	path, err := exec.LookPath("nginx")
	if err != nil {
		return Binary{Missing: "no nginx in PATH"}
	}
	for _, m := range streamModules {
		if _, err := os.Stat(m); err == nil {
			return Binary{Path: path, LoadModule: "load_module " + m + ";"}
		}
	}
	if v, _ := exec.Command(path, "-V").CombinedOutput(); strings.Contains(string(v), "--with-stream ") {
		return Binary{Path: path} // built in
	}
	return Binary{Missing: "nginx has no stream module"}
}

// repoRoot is the directory holding go.mod above the working directory.
func repoRoot() string {
	dir, _ := os.Getwd()
	for d := dir; d != filepath.Dir(d); d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
	}
	return dir
}

// Start runs nginx's stream proxy from listen (a free address) to backend
// and returns once it accepts; tb.Cleanup stops it by its PID.
func Start(tb testing.TB, nb Binary, listen, backend string) error {
	dir := tb.TempDir()
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
		proxy_half_close on; # a throughput client half-closes
	}
}
`, nb.LoadModule, dir, dir, listen, backend)
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return err
	}
	// -e: the compiled-in error log (/var/log/nginx) is opened before the
	// config is read; -p: no paths under the system prefix.
	cmd := exec.Command(nb.Path, "-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", confPath)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // no orphan if the test binary dies
	if err := cmd.Start(); err != nil {
		return err
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
			return fmt.Errorf("nginx exited: %s", strings.TrimSpace(string(log)))
		default:
		}
		if c, err := net.Dial("tcp", listen); err == nil {
			_ = c.Close()
			return nil
		}
	}
	return fmt.Errorf("nginx not accepting on %s after 5s", listen)
}
