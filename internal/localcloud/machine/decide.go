// Package machine is the local cloud's hypervisor for real machines: a
// machine is a sandbox of its own network namespace (plugged into the VPC),
// its own mount namespace, and a cgroup subtree nested under the cgroup the
// cloud itself runs in, in every hierarchy. Power off kills every process
// in the subtree (by cgroup membership, frozen first so nothing forks
// away); delete also removes the namespace and the cgroups, by the record
// of what was made.
package machine

import (
	"bufio"
	"fmt"
	"path"
	"strings"
)

// Hierarchy is one mounted cgroup hierarchy and where this process sits in
// it.
type Hierarchy struct {
	// Mount is the hierarchy's mount point, e.g. /sys/fs/cgroup/memory.
	Mount string
	// Own is this process's cgroup in it, e.g. /process_api/037f….
	Own string
	// V2 is the unified hierarchy.
	V2 bool
	// Controllers of a v1 hierarchy ("cpu", "name=systemd"...).
	Controllers string
}

// parseHierarchies joins /proc/self/cgroup with the cgroup mounts of
// /proc/self/mountinfo.
func parseHierarchies(procCgroup, mountinfo string) ([]Hierarchy, error) {
	mounts := map[string]string{} // controllers (sorted as the kernel prints) or "" for v2 -> mount point
	sc := bufio.NewScanner(strings.NewReader(mountinfo))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		sep := -1
		for i, x := range f {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || len(f) < sep+4 || len(f) < 5 {
			continue
		}
		fstype, super := f[sep+1], f[sep+3]
		switch fstype {
		case "cgroup2":
			mounts[""] = f[4]
		case "cgroup":
			var ctrls []string
			for _, o := range strings.Split(super, ",") {
				if o == "rw" || o == "ro" || strings.HasPrefix(o, "release_agent") || o == "clone_children" || o == "noprefix" || o == "xattr" || o == "cpuset_v2_mode" || o == "nsdelegate" {
					continue
				}
				ctrls = append(ctrls, o)
			}
			mounts[strings.Join(ctrls, ",")] = f[4]
		}
	}
	var out []Hierarchy
	sc = bufio.NewScanner(strings.NewReader(procCgroup))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		ctrls, own := parts[1], parts[2]
		mount, ok := mounts[ctrls]
		if !ok {
			if ctrls == "" {
				continue // no unified hierarchy mounted (pure v1)
			}
			return nil, fmt.Errorf("cgroup hierarchy %q (from /proc/self/cgroup) is not mounted: mount it, or run where it is", ctrls)
		}
		out = append(out, Hierarchy{Mount: mount, Own: own, V2: ctrls == "", Controllers: ctrls})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no cgroup hierarchy found in /proc/self/cgroup")
	}
	return out, nil
}

// machinePath chooses one cgroup path for a machine that lies under this
// process's own cgroup in every hierarchy (kubelet's cgroupRoot is one path
// for all of them): the deepest own path, which must contain all others.
func machinePath(hs []Hierarchy, name string) (string, error) {
	deepest := "/"
	for _, h := range hs {
		if len(h.Own) > len(deepest) {
			deepest = h.Own
		}
	}
	for _, h := range hs {
		if !under(deepest, h.Own) {
			return "", fmt.Errorf("this process's cgroups are not nested alike (%s is %s, another is %s): a machine's cgroup cannot sit under both; run from one cgroup path", h.Mount, h.Own, deepest)
		}
	}
	if name == "" || strings.ContainsAny(name, "/.") {
		return "", fmt.Errorf("machine cgroup name %q: want a plain name", name)
	}
	return path.Join(deepest, name), nil
}

// under reports whether p is at or below parent.
func under(p, parent string) bool {
	if parent == "/" || p == parent {
		return true
	}
	return strings.HasPrefix(p, parent+"/")
}

// toCreate lists the directories to make for p in a hierarchy where this
// process sits at own, outermost first: every level below own, so a path
// deeper than own in one hierarchy gets its missing parents too.
func toCreate(own, p string) []string {
	rel := strings.TrimPrefix(strings.TrimPrefix(p, own), "/")
	if own == "/" {
		rel = strings.TrimPrefix(p, "/")
	}
	var out []string
	cur := own
	for _, part := range strings.Split(rel, "/") {
		if part == "" {
			continue
		}
		cur = path.Join(cur, part)
		out = append(out, cur)
	}
	return out
}

// releasableParent decides whether a parent cgroup above a machine's, whose
// child cgroups are subdirs, may be removed: only one a machine made (it
// holds ParentMarker) and that holds no other cgroup (no machine of any
// cloud is under it). A parent without the marker was there before any
// machine and is never touched.
func releasableParent(subdirs []string) bool {
	marked := false
	for _, d := range subdirs {
		if d != ParentMarker {
			return false
		}
		marked = true
	}
	return marked
}
