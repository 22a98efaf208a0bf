package machine

import (
	"slices"
	"strings"
	"testing"
)

const mountinfoHybrid = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate
`

const procHybrid = `9:name=systemd:/
4:memory:/process_api/037f
2:cpuacct:/
1:cpu:/
0::/
`

func TestParseHierarchies(t *testing.T) {
	for _, tc := range []struct {
		name, proc, mounts string
		want               []Hierarchy
		err                string
	}{
		{"hybrid (this machine)", procHybrid, mountinfoHybrid, []Hierarchy{
			{Mount: "/sys/fs/cgroup/systemd", Own: "/", Controllers: "name=systemd"},
			{Mount: "/sys/fs/cgroup/memory", Own: "/process_api/037f", Controllers: "memory"},
			{Mount: "/sys/fs/cgroup/cpuacct", Own: "/", Controllers: "cpuacct"},
			{Mount: "/sys/fs/cgroup/cpu", Own: "/", Controllers: "cpu"},
			{Mount: "/sys/fs/cgroup/unified", Own: "/", V2: true},
		}, ""},
		{"pure v2", "0::/user.slice/session-1.scope\n", "25 22 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n",
			[]Hierarchy{{Mount: "/sys/fs/cgroup", Own: "/user.slice/session-1.scope", V2: true}}, ""},
		{"co-mounted v1", "3:cpu,cpuacct:/a\n", "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n",
			[]Hierarchy{{Mount: "/sys/fs/cgroup/cpu,cpuacct", Own: "/a", Controllers: "cpu,cpuacct"}}, ""},
		{"a hierarchy not mounted", "4:memory:/\n", "", nil, `cgroup hierarchy "memory" (from /proc/self/cgroup) is not mounted`},
		{"nothing", "", "", nil, "no cgroup hierarchy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseHierarchies(tc.proc, tc.mounts)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("got %+v, %v\nwant %+v", got, err, tc.want)
			}
		})
	}
}

func TestMachinePath(t *testing.T) {
	h := func(owns ...string) []Hierarchy {
		var out []Hierarchy
		for _, o := range owns {
			out = append(out, Hierarchy{Mount: "/sys/fs/cgroup/x", Own: o})
		}
		return out
	}
	for _, tc := range []struct {
		name string
		hs   []Hierarchy
		m    string
		want string
		err  string
	}{
		{"memory deeper than the rest", h("/", "/process_api/037f", "/"), "node-1", "/process_api/037f/node-1", ""},
		{"all at the root", h("/", "/"), "node-1", "/node-1", ""},
		{"nested alike", h("/a", "/a/b"), "m", "/a/b/m", ""},
		{"diverging", h("/a", "/b/c"), "m", "", "not nested alike"},
		{"prefix is not a parent", h("/ab", "/a"), "m", "", "not nested alike"},
		{"bad name", h("/"), "../x", "", "want a plain name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := machinePath(tc.hs, tc.m)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestToCreate(t *testing.T) {
	for _, tc := range []struct {
		own, p string
		want   []string
	}{
		{"/", "/process_api/037f/node-1", []string{"/process_api", "/process_api/037f", "/process_api/037f/node-1"}},
		{"/process_api/037f", "/process_api/037f/node-1", []string{"/process_api/037f/node-1"}},
		{"/process_api/037f", "/process_api/037f/node-1/system", []string{"/process_api/037f/node-1", "/process_api/037f/node-1/system"}},
	} {
		if got := toCreate(tc.own, tc.p); !slices.Equal(got, tc.want) {
			t.Errorf("toCreate(%q, %q) = %q, want %q", tc.own, tc.p, got, tc.want)
		}
	}
}

func TestReleasableParent(t *testing.T) {
	for _, tc := range []struct {
		name    string
		subdirs []string
		want    bool
	}{
		{"made by a machine, the last one gone", []string{ParentMarker}, true},
		{"made by a machine, another still under it", []string{ParentMarker, "ps-i-2"}, false},
		{"another cloud's parent under it", []string{"037f", ParentMarker}, false},
		{"there before any machine, now empty", nil, false},
		{"there before any machine, in use", []string{"user.slice"}, false},
	} {
		if got := releasableParent(tc.subdirs); got != tc.want {
			t.Errorf("%s: releasableParent(%q) = %v, want %v", tc.name, tc.subdirs, got, tc.want)
		}
	}
}
