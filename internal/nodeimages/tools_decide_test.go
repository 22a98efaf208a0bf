package nodeimages

import (
	"errors"
	"io/fs"
	"reflect"
	"strings"
	"testing"
)

func TestNeededPath(t *testing.T) {
	sys := systemLibDirs["amd64"]
	has := func(paths ...string) func(string) bool {
		return func(p string) bool {
			for _, x := range paths {
				if x == p {
					return true
				}
			}
			return false
		}
	}
	for _, tc := range []struct {
		name, needed, origin string
		rpath, runpath       []string
		loadable             func(string) bool
		want, wantErr        string
	}{
		{"first system dir", "libc.so.6", "/usr/bin", nil, nil,
			has("/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6"), "/lib/x86_64-linux-gnu/libc.so.6", ""},
		{"later system dir", "libz.so.1", "/usr/bin", nil, nil, has("/usr/lib/libz.so.1"), "/usr/lib/libz.so.1", ""},
		{"RUNPATH before system dirs, $ORIGIN expanded", "libx.so", "/opt/app/bin", nil, []string{"$ORIGIN/../lib"},
			has("/opt/app/lib/libx.so", "/usr/lib/libx.so"), "/opt/app/lib/libx.so", ""},
		{"RPATH used without RUNPATH", "libx.so", "/opt/bin", []string{"/opt/lib"}, nil, has("/opt/lib/libx.so"), "/opt/lib/libx.so", ""},
		{"RPATH ignored with RUNPATH", "libx.so", "/opt/bin", []string{"/opt/lib"}, []string{"/other"},
			has("/opt/lib/libx.so"), "", "in none of /other, /lib/x86_64-linux-gnu"},
		{"${ORIGIN}", "libx.so", "/a", nil, []string{"${ORIGIN}/l"}, has("/a/l/libx.so"), "/a/l/libx.so", ""},
		{"$LIB not searched", "libx.so", "/a", nil, []string{"/a/$LIB"}, has("/a/$LIB/libx.so"), "", "in none of"},
		{"relative RUNPATH not searched", "libx.so", "/a", nil, []string{"lib"}, has("lib/libx.so"), "", "in none of"},
		{"a name with a slash is a path", "/opt/libx.so", "/a", nil, nil, has("/opt/libx.so"), "/opt/libx.so", ""},
		{"missing", "libnope.so", "/a", nil, nil, has(), "", "needed libnope.so"},
		{"wrong machine skipped (loadable false)", "libc.so.6", "/a", nil, nil,
			has("/usr/lib/x86_64-linux-gnu/libc.so.6"), "/usr/lib/x86_64-linux-gnu/libc.so.6", ""},
	} {
		got, err := neededPath(tc.needed, tc.origin, tc.rpath, tc.runpath, sys, tc.loadable)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: %q, %v; want an error containing %q", tc.name, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
}

// mapTree is a file tree for resolvePath: "dir", "file" or "->target".
type mapTree map[string]string

func (m mapTree) Lstat(p string) (fs.FileMode, error) {
	v, ok := m[p]
	switch {
	case !ok:
		return 0, fs.ErrNotExist
	case v == "dir":
		return fs.ModeDir | 0o755, nil
	case strings.HasPrefix(v, "->"):
		return fs.ModeSymlink | 0o777, nil
	}
	return 0o644, nil
}

func (m mapTree) Readlink(p string) (string, error) {
	if v := m[p]; strings.HasPrefix(v, "->") {
		return v[2:], nil
	}
	return "", errors.New("not a link")
}

func TestResolvePath(t *testing.T) {
	// Debian bookworm's merged /usr, its loader link and an alternatives link.
	tree := mapTree{
		"/bin": "->usr/bin", "/lib": "->usr/lib", "/lib64": "->usr/lib64", "/usr": "dir",
		"/usr/bin": "dir", "/usr/lib": "dir", "/usr/lib64": "dir", "/usr/lib/x86_64-linux-gnu": "dir",
		"/usr/lib64/ld-linux-x86-64.so.2":                "->/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
		"/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2": "file",
		"/usr/lib/x86_64-linux-gnu/libcurl.so.4":         "->libcurl.so.4.8.0",
		"/usr/lib/x86_64-linux-gnu/libcurl.so.4.8.0":     "file",
		"/usr/bin/nc": "->/etc/alternatives/nc", "/etc": "dir", "/etc/alternatives": "dir",
		"/etc/alternatives/nc": "->/bin/nc.openbsd", "/usr/bin/nc.openbsd": "file",
		"/loop": "->/loop", "/usr/bin/f": "file",
	}
	for _, tc := range []struct {
		p         string
		steps     []step
		final     string
		wantError string
	}{
		{"/usr/bin/f", []step{{"/usr", ""}, {"/usr/bin", ""}}, "/usr/bin/f", ""},
		{"/bin/f", []step{{"/bin", "usr/bin"}, {"/usr", ""}, {"/usr/bin", ""}}, "/usr/bin/f", ""},
		{"/lib64/ld-linux-x86-64.so.2", []step{{"/lib64", "usr/lib64"}, {"/usr", ""}, {"/usr/lib64", ""},
			{"/usr/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"},
			{"/lib", "usr/lib"}, {"/usr", ""}, {"/usr/lib", ""}, {"/usr/lib/x86_64-linux-gnu", ""}},
			"/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", ""},
		{"/lib/x86_64-linux-gnu/libcurl.so.4", []step{{"/lib", "usr/lib"}, {"/usr", ""}, {"/usr/lib", ""}, {"/usr/lib/x86_64-linux-gnu", ""},
			{"/usr/lib/x86_64-linux-gnu/libcurl.so.4", "libcurl.so.4.8.0"}}, "/usr/lib/x86_64-linux-gnu/libcurl.so.4.8.0", ""},
		{"/bin/nc", []step{{"/bin", "usr/bin"}, {"/usr", ""}, {"/usr/bin", ""}, {"/usr/bin/nc", "/etc/alternatives/nc"},
			{"/etc", ""}, {"/etc/alternatives", ""}, {"/etc/alternatives/nc", "/bin/nc.openbsd"}, {"/bin", "usr/bin"}, {"/usr", ""}, {"/usr/bin", ""}},
			"/usr/bin/nc.openbsd", ""},
		{"/usr/bin/../bin/./f", []step{{"/usr", ""}, {"/usr/bin", ""}, {"/usr/bin", ""}}, "/usr/bin/f", ""},
		{"/usr/bin/f/x", nil, "", "not a directory"},
		{"/nope", nil, "", "not exist"},
		{"/loop", nil, "", "too many levels"},
		{"rel", nil, "", "not an absolute path"},
	} {
		steps, final, err := resolvePath(tc.p, tree)
		if tc.wantError != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantError) {
				t.Errorf("%s: %v %q %v; want an error containing %q", tc.p, steps, final, err, tc.wantError)
			}
			continue
		}
		if err != nil || final != tc.final || !reflect.DeepEqual(steps, tc.steps) {
			t.Errorf("%s:\n got %v %q %v\nwant %v %q", tc.p, steps, final, err, tc.steps, tc.final)
		}
	}
}

func TestAppletLinks(t *testing.T) {
	for _, tc := range []struct {
		name     string
		applets  []string
		provided map[string]bool
		want     []string
	}{
		{"shell and wget", []string{"bin/sh", "usr/bin/wget"}, nil, []string{"/bin/sh", "/usr/bin/wget"}},
		{"a real tool wins over the applet", []string{"usr/bin/nc", "sbin/ip", "usr/bin/nslookup", "bin/cat"},
			map[string]bool{"nc": true, "ip": true, "nslookup": true}, []string{"/bin/cat"}},
		{"not busybox itself, not outside the bin directories", []string{"bin/busybox", "linuxrc", "etc/x", "usr/local/bin/y", ""}, nil, nil},
		{"sorted, once", []string{"usr/sbin/chroot", "bin/ash", "bin/ash"}, nil, []string{"/bin/ash", "/usr/sbin/chroot"}},
		{"[ and [[ are applets", []string{"usr/bin/[", "usr/bin/[["}, nil, []string{"/usr/bin/[", "/usr/bin/[["}},
	} {
		if got := appletLinks(tc.applets, tc.provided); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestInstalledVersions(t *testing.T) {
	status := "Package: curl\nStatus: install ok installed\nVersion: 7.88.1-10+deb12u14\nDescription: x\n more\n\n" +
		"Package: socat\nStatus: deinstall ok config-files\nVersion: 1.7.4.4-2\n\n" +
		"Package: bash\nVersion: 5.2.15-2+b8\nStatus: install ok installed\n"
	for _, tc := range []struct {
		name        string
		pkgs        []string
		want        map[string]string
		wantMissing []string
	}{
		{"installed", []string{"curl", "bash"}, map[string]string{"curl": "7.88.1-10+deb12u14", "bash": "5.2.15-2+b8"}, nil},
		{"removed but configured is missing", []string{"socat"}, map[string]string{}, []string{"socat"}},
		{"unknown is missing", []string{"curl", "busybox-static"}, map[string]string{"curl": "7.88.1-10+deb12u14"}, []string{"busybox-static"}},
	} {
		got, missing := installedVersions([]byte(status), tc.pkgs)
		if !reflect.DeepEqual(got, tc.want) || !reflect.DeepEqual(missing, tc.wantMissing) {
			t.Errorf("%s: %v %q, want %v %q", tc.name, got, missing, tc.want, tc.wantMissing)
		}
	}
}
