package machine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/portside-io/portside/internal/localcloud/vpc"
)

// Destroy removes what the machine record in dir says was made: every
// process in its cgroups (by membership), its namespace (only while the
// name still names the inode made), its cgroups and the parents machines made
// that no other machine uses any more.
// No record: nothing to do. The directory itself stays.
func Destroy(ctx context.Context, dir string) error {
	b, err := os.ReadFile(statePath(dir))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("%s: not a machine record (%v)", statePath(dir), err)
	}
	var errs []error
	if st.CgroupPath != "" {
		hs := make([]Hierarchy, 0, len(st.Mounts))
		for _, m := range st.Mounts {
			hs = append(hs, Hierarchy{Mount: m, Controllers: controllersOf(m)})
		}
		cg := &cgroups{hs: hs, path: st.CgroupPath}
		if err := cg.killAll(30 * time.Second); err != nil {
			errs = append(errs, err)
		}
		if err := removeTree(st.Mounts, st.CgroupPath); err != nil {
			errs = append(errs, err)
		}
	}
	if st.Netns != "" {
		var s syscall.Stat_t
		if err := syscall.Stat(vpc.NetnsPath(st.Netns), &s); err == nil {
			if st.NetnsInode != 0 && s.Ino != st.NetnsInode {
				errs = append(errs, fmt.Errorf("network namespace %s is not the one this machine made: left alone", st.Netns))
			} else if out, err := exec.Command("ip", "netns", "del", st.Netns).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("ip netns del %s: %v: %s", st.Netns, err, out))
			}
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	klog.FromContext(ctx).V(2).Info("Machine destroyed", "dir", dir, "netns", st.Netns, "cgroup", st.CgroupPath)
	return os.Remove(statePath(dir))
}

// controllersOf guesses a v1 hierarchy's controllers from its mount point
// (the record keeps mount points only); only the freezer matters here.
func controllersOf(mount string) string {
	if len(mount) >= 8 && mount[len(mount)-8:] == "/freezer" {
		return "freezer"
	}
	return ""
}

// PIDs lists the processes of the machine whose record is in dir, by
// cgroup membership (the machine's init, kubelet, containerd, kube-proxy,
// shims, pods): what measures a node's footprint counts.
func PIDs(dir string) ([]int, error) {
	b, err := os.ReadFile(statePath(dir))
	if err != nil {
		return nil, err
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%s: not a machine record (%v)", statePath(dir), err)
	}
	if st.CgroupPath == "" {
		return nil, fmt.Errorf("%s: the machine has no cgroup", statePath(dir))
	}
	hs := make([]Hierarchy, 0, len(st.Mounts))
	for _, m := range st.Mounts {
		hs = append(hs, Hierarchy{Mount: m, Controllers: controllersOf(m)})
	}
	return (&cgroups{hs: hs, path: st.CgroupPath}).pids(), nil
}
