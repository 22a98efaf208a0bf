package nodeimages

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// systemLibDirs are the directories Debian's glibc loader searches after
// RPATH/RUNPATH (`ld.so --help`, "system search path"). The image has no
// /etc/ld.so.cache, so these are all it searches: a library is copied
// only where the image's loader will look for it.
var systemLibDirs = map[string][]string{
	"amd64": {"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib", "/usr/lib"},
	"arm64": {"/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib", "/usr/lib"},
}

// neededPath decides where the image's dynamic loader finds the DT_NEEDED
// name of an object in directory origin: a name with a slash is a path;
// otherwise RUNPATH, or RPATH when there is no RUNPATH, ($ORIGIN expanded)
// then the system directories, the first candidate loadable says the
// loader would take (it skips files of another ELF class or machine).
func neededPath(name, origin string, rpath, runpath, sysDirs []string, loadable func(string) bool) (string, error) {
	if strings.Contains(name, "/") {
		if loadable(name) {
			return name, nil
		}
		return "", fmt.Errorf("needed %s: not found", name)
	}
	dirs := runpath
	if len(dirs) == 0 {
		dirs = rpath
	}
	var search []string
	for _, d := range dirs {
		d = strings.NewReplacer("${ORIGIN}", origin, "$ORIGIN", origin).Replace(d)
		// $LIB and $PLATFORM would need the loader's own answer; an
		// entry with them is not searched here.
		if d == "" || strings.Contains(d, "$") || !path.IsAbs(d) {
			continue
		}
		search = append(search, d)
	}
	search = append(search, sysDirs...)
	for _, d := range search {
		if p := path.Join(d, name); loadable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("needed %s: in none of %s", name, strings.Join(search, ", "))
}

// linkReader is what resolving a path needs of a file tree.
type linkReader interface {
	Lstat(p string) (fs.FileMode, error)
	Readlink(p string) (string, error)
}

// step is one component a path crosses: a directory, or a symbolic link
// (link its target as written).
type step struct {
	path string
	link string
}

// resolvePath decides what a layer needs so that path p opens in the image
// as it does in the tree: every directory and symbolic link it crosses
// (steps, in order) and the path of what it names at last (final). Links
// are kept as written (relative or absolute), so the image resolves them
// the same way.
func resolvePath(p string, lr linkReader) (steps []step, final string, err error) {
	if !path.IsAbs(p) {
		return nil, "", fmt.Errorf("%s: not an absolute path", p)
	}
	comps := splitPath(p)
	cur := "/"
	for hops := 0; len(comps) > 0; {
		c := comps[0]
		comps = comps[1:]
		switch c {
		case ".":
			continue
		case "..":
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, c)
		mode, err := lr.Lstat(next)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", p, err)
		}
		switch {
		case mode&fs.ModeSymlink != 0:
			if hops++; hops > 40 {
				return nil, "", fmt.Errorf("%s: too many levels of symbolic links", p)
			}
			target, err := lr.Readlink(next)
			if err != nil {
				return nil, "", fmt.Errorf("%s: %w", p, err)
			}
			steps = append(steps, step{path: next, link: target})
			if path.IsAbs(target) {
				cur = "/"
			}
			comps = append(splitPath(target), comps...)
			continue
		case len(comps) > 0 && !mode.IsDir():
			return nil, "", fmt.Errorf("%s: %s is not a directory", p, next)
		case len(comps) > 0:
			steps = append(steps, step{path: next})
		}
		cur = next
	}
	return steps, cur, nil
}

func splitPath(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" {
			out = append(out, c)
		}
	}
	return out
}

// appletLinks decides which of busybox's applets (`busybox --list-full`:
// paths relative to /) become links to it: those under bin, sbin,
// usr/bin and usr/sbin, but not busybox itself nor a name a real tool of
// the image has (nc is netcat-openbsd's, ip iproute2's, nslookup bind's:
// upstream's Alpine image has those packages' programs, not the applets).
func appletLinks(applets []string, provided map[string]bool) []string {
	seen := map[string]bool{}
	var out []string
	for _, a := range applets {
		a = strings.TrimSpace(a)
		dir, base := path.Split(a)
		switch dir {
		case "bin/", "sbin/", "usr/bin/", "usr/sbin/":
		default:
			continue
		}
		if base == "" || base == "busybox" || base == "." || base == ".." || provided[base] || seen[a] {
			continue
		}
		seen[a] = true
		out = append(out, "/"+a)
	}
	sort.Strings(out)
	return out
}

// installedVersions reads dpkg's status file: the version of each of pkgs
// installed, and those that are not.
func installedVersions(status []byte, pkgs []string) (map[string]string, []string) {
	installed := map[string]string{}
	var name, st, version string
	flush := func() {
		if name != "" && st == "install ok installed" {
			installed[name] = version
		}
		name, st, version = "", "", ""
	}
	sc := bufio.NewScanner(bytes.NewReader(status))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			flush()
		case strings.HasPrefix(line, "Package: "):
			name = strings.TrimPrefix(line, "Package: ")
		case strings.HasPrefix(line, "Status: "):
			st = strings.TrimPrefix(line, "Status: ")
		case strings.HasPrefix(line, "Version: "):
			version = strings.TrimPrefix(line, "Version: ")
		}
	}
	flush()
	versions := map[string]string{}
	var missing []string
	for _, p := range pkgs {
		if v, ok := installed[p]; ok {
			versions[p] = v
		} else {
			missing = append(missing, p)
		}
	}
	return versions, missing
}
