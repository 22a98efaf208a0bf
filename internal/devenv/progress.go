package devenv

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// progress prints `[  1.2s] part  message` lines, so a user sees which part
// is starting and how long each took.
type progress struct {
	w     io.Writer
	start time.Time
	mu    sync.Mutex
}

func (p *progress) step(part, format string, args ...any) {
	if p == nil || p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "[%6.1fs] %-14s %s\n", time.Since(p.start).Seconds(), part, fmt.Sprintf(format, args...))
}

func kubectlName(path string) string {
	if path == "" {
		return "kubectl"
	}
	return path
}

// selfName is how the user should call this binary again: the relative
// path they are likely to have used (make demo builds _output/bin/portside).
func selfName() string {
	exe, err := os.Executable()
	if err != nil {
		return "portside"
	}
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, exe); err == nil && !strings.HasPrefix(rel, "..") {
			return rel
		}
	}
	return exe
}
