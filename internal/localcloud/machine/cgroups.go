package machine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroups is a machine's cgroup subtree: the same path in every hierarchy.
type cgroups struct {
	hs   []Hierarchy
	path string
}

func discover(name string) (*cgroups, error) {
	pc, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	hs, err := parseHierarchies(string(pc), string(mi))
	if err != nil {
		return nil, err
	}
	p, err := machinePath(hs, name)
	if err != nil {
		return nil, err
	}
	return &cgroups{hs: hs, path: p}, nil
}

// ParentMarker is the empty child cgroup put in every parent directory a
// machine makes above its own cgroup (in a hierarchy where this process
// sits higher than in the deepest one, the machine's path needs them).
// Parents are shared by every machine under the same path, of this cloud
// and of any other on the host, so no machine's record can say it owns
// one; the marker proves a parent was made by a machine, and the last
// machine to leave removes it (see releasableParent).
const ParentMarker = "portside-made-parent"

// lockHierarchies serializes making and removing machine cgroups among all
// processes of the host: one takes a parent away only while no other is
// between making it and putting its machine inside.
func lockHierarchies(mounts []string) (unlock func(), err error) {
	if len(mounts) == 0 {
		return func() {}, nil
	}
	first := slices.Min(mounts)
	f, err := os.Open(first)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking cgroup hierarchy %s: %w", first, err)
	}
	return func() { f.Close() }, nil // closing the last descriptor unlocks
}

// create makes path/sub in every hierarchy; parents above path that do not
// exist get ParentMarker inside.
func (c *cgroups) create(sub string) error {
	mounts := make([]string, 0, len(c.hs))
	for _, h := range c.hs {
		mounts = append(mounts, h.Mount)
	}
	unlock, err := lockHierarchies(mounts)
	if err != nil {
		return err
	}
	defer unlock()
	target := filepath.Join(c.path, sub)
	for _, h := range c.hs {
		for _, d := range toCreate(h.Own, target) {
			dir := filepath.Join(h.Mount, d)
			if _, err := os.Stat(dir); err == nil {
				continue
			}
			if err := os.Mkdir(dir, 0o755); err != nil {
				return fmt.Errorf("creating cgroup %s: %w", dir, err)
			}
			if d != c.path && !under(d, c.path) {
				if err := os.Mkdir(filepath.Join(dir, ParentMarker), 0o755); err != nil {
					return fmt.Errorf("marking cgroup %s: %w", dir, err)
				}
			}
			if strings.HasSuffix(h.Mount, "/cpuset") || strings.Contains(h.Controllers, "cpuset") {
				// A v1 cpuset starts empty: tasks cannot join it until it
				// has the parent's CPUs and memory nodes.
				for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
					v, err := os.ReadFile(filepath.Join(filepath.Dir(dir), f))
					if err != nil {
						return err
					}
					if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
						return fmt.Errorf("%s/%s: %w", dir, f, err)
					}
				}
			}
		}
	}
	return nil
}

// procsFiles are the cgroup.procs files of path/sub in every hierarchy: a
// process writes its PID to each to join the machine.
func (c *cgroups) procsFiles(sub string) []string {
	var out []string
	for _, h := range c.hs {
		out = append(out, filepath.Join(h.Mount, c.path, sub, "cgroup.procs"))
	}
	return out
}

// pids lists every process in the subtree, in any hierarchy.
func (c *cgroups) pids() []int {
	seen := map[int]bool{}
	for _, h := range c.hs {
		_ = filepath.WalkDir(filepath.Join(h.Mount, c.path), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return nil
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
					seen[pid] = true
				}
			}
			return nil
		})
	}
	out := make([]int, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// killAll kills every process of the subtree: frozen first where a freezer
// hierarchy exists (nothing forks away between the listing and the kill),
// then SIGKILL, thawed, and waited for until none is left.
func (c *cgroups) killAll(timeout time.Duration) error {
	freezer := ""
	for _, h := range c.hs {
		if h.Controllers == "freezer" {
			freezer = filepath.Join(h.Mount, c.path, "freezer.state")
		}
	}
	deadline := time.Now().Add(timeout)
	for {
		pids := c.pids()
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v of machine cgroup %s did not end within %v", pids, c.path, timeout)
		}
		if freezer != "" {
			_ = os.WriteFile(freezer, []byte("FROZEN"), 0o644)
		}
		for _, p := range c.pids() {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		if freezer != "" {
			_ = os.WriteFile(freezer, []byte("THAWED"), 0o644)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// removeTree removes the subtree in every hierarchy, deepest first,
// including what kubelet and runc made inside it, then the parents above it
// that machines made and none uses any more.
func removeTree(mounts []string, path string) error {
	unlock, err := lockHierarchies(mounts)
	if err != nil {
		return err
	}
	defer unlock()
	var errs []error
	for _, m := range mounts {
		root := filepath.Join(m, path)
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := rmdirRetry(dirs[i]); err != nil {
				errs = append(errs, err)
			}
		}
		errs = append(errs, releaseParents(m, path))
	}
	return errors.Join(errs...)
}

// releaseParents removes, innermost first, the parents of path in the
// hierarchy at mount that a machine made (they hold ParentMarker) and that
// hold nothing else: the last machine under them is gone.
func releaseParents(mount, p string) error {
	for p = filepath.Dir(p); p != "/" && p != "."; p = filepath.Dir(p) {
		dir := filepath.Join(mount, p)
		ents, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		var subdirs []string
		for _, e := range ents {
			if e.IsDir() {
				subdirs = append(subdirs, e.Name())
			}
		}
		if !releasableParent(subdirs) {
			return nil
		}
		if err := syscall.Rmdir(filepath.Join(dir, ParentMarker)); err != nil {
			return fmt.Errorf("removing cgroup %s: %w", filepath.Join(dir, ParentMarker), err)
		}
		if err := syscall.Rmdir(dir); err != nil {
			return fmt.Errorf("removing cgroup %s: %w", dir, err)
		}
	}
	return nil
}

// rmdirRetry removes an empty cgroup; a cgroup whose last task just exited
// can refuse with EBUSY for a moment.
func rmdirRetry(dir string) error {
	var err error
	for i := 0; i < 40; i++ {
		err = syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("removing cgroup %s: %w", dir, err)
}

// StrayParents lists the parents of cgPath, in every hierarchy this
// process sees, that a machine made and that no machine uses: what
// Destroy should have removed. Taken under the same lock as Create and
// Destroy, so a machine half made by another process is not one.
func StrayParents(cgPath string) ([]string, error) {
	c, err := discover("probe")
	if err != nil {
		return nil, err
	}
	var mounts []string
	for _, h := range c.hs {
		mounts = append(mounts, h.Mount)
	}
	unlock, err := lockHierarchies(mounts)
	if err != nil {
		return nil, err
	}
	defer unlock()
	var out []string
	for _, m := range mounts {
		for p := filepath.Dir(cgPath); p != "/" && p != "."; p = filepath.Dir(p) {
			ents, err := os.ReadDir(filepath.Join(m, p))
			if err != nil {
				continue
			}
			var subdirs []string
			for _, e := range ents {
				if e.IsDir() {
					subdirs = append(subdirs, e.Name())
				}
			}
			if releasableParent(subdirs) {
				out = append(out, filepath.Join(m, p))
			}
		}
	}
	return out, nil
}
