package machine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/hostsnap"
	"github.com/portside-io/portside/internal/localcloud/machine"
	"github.com/portside-io/portside/internal/localcloud/vpc"
	"github.com/portside-io/portside/internal/localcloud/vpc/vpctest"
)

// TestMachinePower makes a machine, boots a stand-in init that joins the
// machine's cgroups and forks a child that escapes its process group, and
// shows: the init runs in the machine's network namespace and cgroups; a
// power-off kills every process of the machine (the escaped child too);
// the machine starts again; Destroy after a simulated crash of the cloud
// (the Machine value forgotten) removes everything from the record alone.
func TestMachinePower(t *testing.T) {
	vpctest.RequireRoot(t)
	before, err := hostsnap.Take()
	if err != nil {
		t.Fatal(err)
	}
	nw, r := vpctest.Start(t)
	dir := t.TempDir()
	id := fmt.Sprintf("t%d", time.Now().UnixNano()%1e9)
	mdir := filepath.Join(dir, "m1")
	m, err := machine.Create(context.Background(), nw, machine.Config{Name: "m1", ID: id, Index: 1, Addr: r.Subnet.Addr().Next().Next(), Dir: mdir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = machine.Destroy(context.Background(), mdir) })
	boot := func() string {
		pidFile := filepath.Join(dir, fmt.Sprintf("child-%d", time.Now().UnixNano()))
		var join []string
		for _, f := range m.SystemProcsFiles() {
			join = append(join, "echo $$ > "+f)
		}
		// The child detaches (setsid) as a daemon would: only the cgroup
		// still knows it is the machine's.
		script := strings.Join(join, "; ") + "; setsid sleep 1000 & echo $! > " + pidFile + "; readlink /proc/self/ns/net > " + pidFile + ".ns; sleep 1000"
		if err := m.Start([]string{"/bin/sh", "-c", script}, nil, filepath.Join(dir, "init.log")); err != nil {
			t.Fatal(err)
		}
		waitFile(t, pidFile+".ns")
		return pidFile
	}
	cgPath := m.CgroupPath()
	pidFile := boot()
	ns, _ := os.ReadFile(pidFile + ".ns")
	hostNS, _ := os.Readlink("/proc/self/ns/net")
	if strings.TrimSpace(string(ns)) == hostNS {
		t.Errorf("the init runs in the host's network namespace %s", hostNS)
	}
	child := readPID(t, pidFile)
	cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", child))
	if !strings.Contains(string(cg), m.CgroupPath()+"/"+machine.SystemCgroup) {
		t.Errorf("the child is not in the machine's cgroup %s:\n%s", m.CgroupPath(), cg)
	}
	if err := m.Stop(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	if alive(child) {
		t.Errorf("power-off left the detached child %d running", child)
	}
	// Powered on again.
	pidFile = boot()
	child = readPID(t, pidFile)
	if !alive(child) {
		t.Fatal("the restarted machine's child is not running")
	}
	// A second machine shares the parents made above the first one's
	// cgroup (as would one of another cloud on the host).
	m2dir := filepath.Join(dir, "m2")
	if _, err := machine.Create(context.Background(), nw, machine.Config{Name: "m2", ID: id + "b", Index: 2, Addr: r.Subnet.Addr().Next().Next().Next(), Dir: m2dir}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = machine.Destroy(context.Background(), m2dir) })
	// The cloud "crashes": only the record is left. Destroy ends the
	// machine's processes and removes its namespace and cgroups, and
	// leaves the parents the second machine still uses without an error.
	if err := machine.Destroy(context.Background(), mdir); err != nil {
		t.Fatal(err)
	}
	for _, f := range m.SystemProcsFiles() {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("Destroy left the machine's cgroup %s", filepath.Dir(f))
		}
		parent := filepath.Dir(filepath.Dir(filepath.Dir(f)))
		if _, err := os.Stat(parent); err != nil {
			t.Errorf("Destroy of one machine removed the parent %s the other still uses: %v", parent, err)
		}
	}
	if err := machine.Destroy(context.Background(), m2dir); err != nil {
		t.Fatal(err)
	}
	if stray, err := machine.StrayParents(cgPath); err != nil || len(stray) > 0 {
		t.Errorf("parents made for the machines and used by none are left: %q (%v)", stray, err)
	}
	if alive(child) {
		t.Errorf("Destroy left the machine's child %d running", child)
	}
	if _, err := os.Stat(vpc.NetnsPath("ps-" + id)); err == nil {
		t.Error("Destroy left the machine's network namespace")
	}
	if err := vpc.Down(context.Background(), nw.StateFile()); err != nil {
		t.Fatal(err)
	}
	after, err := hostsnap.Take()
	if err != nil {
		t.Fatal(err)
	}
	// Parents are checked above (StrayParents): other packages' machines
	// may share them while this runs.
	mine := []string{id, r.Subnet.Addr().String()}
	if d := hostsnap.Diff(before.Mentioning(mine...), after.Mentioning(mine...)); d != "" {
		t.Errorf("the host differs after Destroy:\n%s", d)
	}
}

func waitFile(t *testing.T, p string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if b, err := os.ReadFile(p); err == nil && len(b) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not written within 10s", p)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readPID(t *testing.T, p string) int {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	if _, err := fmt.Sscan(string(b), &pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	return len(f) > 2 && f[2] != "Z"
}
