package nodeimages

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// hostTool is one program of a Debian package the agnhost image gets,
// copied from this host (hack/ensure-node-packages.sh installs the
// packages) with what it needs to run.
type hostTool struct {
	pkg   string
	path  string
	links []string // symbolic links to it, in its directory
}

// agnhostTools are what upstream's agnhost image has from Alpine's
// packages and Kubernetes' e2e specs exec in agnhost pods (sh -c, nc,
// curl, wget, dig; upstream's Dockerfile: bind-tools curl netcat-openbsd
// iproute2 socat bash on busybox), from Debian's equivalents. busybox's
// other applets (cat, sleep, seq, timeout, ...) become links to it.
var agnhostTools = []hostTool{
	{pkg: "busybox-static", path: "/bin/busybox"},
	// Debian's static busybox is built with a standalone shell: its sh
	// runs its own applet for any applet name (its nc without -v or
	// -t, its ip) in place of the program on PATH, and its wget
	// crashes on -T (1.35.0-4). So sh is dash, as on Debian, and wget
	// GNU's: both take the options the e2e specs pass.
	{pkg: "dash", path: "/bin/dash", links: []string{"sh"}},
	{pkg: "wget", path: "/usr/bin/wget"},
	{pkg: "netcat-openbsd", path: "/bin/nc.openbsd", links: []string{"nc"}},
	{pkg: "curl", path: "/usr/bin/curl"},
	{pkg: "bind9-dnsutils", path: "/usr/bin/dig"},
	{pkg: "bind9-dnsutils", path: "/usr/bin/nslookup"},
	{pkg: "bind9-dnsutils", path: "/usr/bin/host"},
	{pkg: "socat", path: "/usr/bin/socat"},
	{pkg: "iproute2", path: "/bin/ip"},
	{pkg: "iproute2", path: "/bin/ss"},
	{pkg: "bash", path: "/bin/bash"},
	// busybox's applets that run a command run its own applet of that
	// name before the program on PATH (FEATURE_PREFER_APPLETS: `timeout
	// 5 wget` ran its crashing wget); these are the real ones.
	{pkg: "coreutils", path: "/usr/bin/timeout"},
	{pkg: "coreutils", path: "/usr/bin/env"},
	{pkg: "coreutils", path: "/usr/bin/nice"},
	{pkg: "coreutils", path: "/usr/bin/nohup"},
	{pkg: "coreutils", path: "/usr/sbin/chroot"},
	{pkg: "findutils", path: "/usr/bin/xargs"},
	{pkg: "util-linux", path: "/usr/bin/setsid"},
	{pkg: "util-linux", path: "/usr/bin/taskset"},
	{pkg: "util-linux", path: "/usr/bin/ionice"},
	{pkg: "util-linux", path: "/usr/bin/unshare"},
	{pkg: "util-linux", path: "/usr/bin/nsenter"},
	{pkg: "util-linux", path: "/usr/bin/setpriv"},
	// The DNS specs' /etc/hosts probes (`getent hosts <name>`); musl's
	// in upstream's Alpine, glibc's here.
	{pkg: "libc-bin", path: "/usr/bin/getent"},
}

// nsswitch makes glibc's programs read /etc/hosts (which the kubelet
// mounts) before DNS, as musl does in upstream's image; without the file
// glibc asks DNS first and a NOTFOUND there ends the lookup.
const nsswitch = "hosts: files dns\n"

// wgetrc makes GNU wget try once, as busybox's wget in upstream's image
// does: by default it tries 20 times, so the e2e specs' `wget -T 5` to an
// address that drops the traffic (a check that it is NOT reachable) took
// minutes instead of 5 seconds.
const wgetrc = "tries = 1\n"

// toolsLayerFunc makes the tools layer of an image of arch: the layer's
// tar and what its history says it holds.
type toolsLayerFunc func(arch string) (layer []byte, createdBy string, err error)

// hostToolsLayer is the tools layer from this host's packages.
func hostToolsLayer(arch string) ([]byte, string, error) {
	return toolsLayer(hostRoot{"/"}, arch, busyboxApplets)
}

// busyboxApplets asks the host's busybox its applets' paths.
func busyboxApplets(bin string) ([]string, error) {
	out, err := exec.Command(bin, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list-full: %w", bin, err)
	}
	return strings.Fields(string(out)), nil
}

// toolsLayer copies agnhostTools out of root into a layer at the same
// paths, with every directory and symbolic link on the way, the dynamic
// loader and the shared libraries (DT_NEEDED, transitively) where the
// image's loader looks for them: sorted, fixed times, owned by root, so
// the same package versions give the same digest.
func toolsLayer(root hostRoot, arch string, applets func(bin string) ([]string, error)) ([]byte, string, error) {
	status, err := root.ReadFile("/var/lib/dpkg/status")
	if err != nil {
		return nil, "", fmt.Errorf("agnhost's tools are Debian packages: %w", err)
	}
	var pkgs []string
	for _, t := range agnhostTools {
		pkgs = append(pkgs, t.pkg)
	}
	pkgs = uniqueSorted(pkgs)
	versions, missing := installedVersions(status, pkgs)
	if len(missing) > 0 {
		return nil, "", fmt.Errorf("agnhost's tools: Debian packages %s not installed: run `make node-packages` (hack/ensure-node-packages.sh)", strings.Join(missing, ", "))
	}
	b := &layerBuilder{root: root, arch: arch, entries: map[string]file{}, sysDirs: systemLibDirs[arch]}
	if b.sysDirs == nil {
		return nil, "", fmt.Errorf("agnhost's tools: no library search path known for %s", arch)
	}
	provided := map[string]bool{}
	for _, t := range agnhostTools {
		if _, err := b.add(t.path); err != nil {
			return nil, "", fmt.Errorf("agnhost's tools (%s): %w", t.pkg, err)
		}
		provided[path.Base(t.path)] = true
		for _, l := range t.links {
			provided[l] = true
			if err := b.link(path.Join(path.Dir(t.path), l), path.Base(t.path)); err != nil {
				return nil, "", err
			}
		}
	}
	list, err := applets(root.host("/bin/busybox"))
	if err != nil {
		return nil, "", err
	}
	for _, a := range appletLinks(list, provided) {
		if err := b.link(a, "/bin/busybox"); err != nil {
			return nil, "", err
		}
	}
	b.entries["etc"] = file{path: "etc", mode: 0o755, dir: true}
	b.entries["etc/nsswitch.conf"] = file{path: "etc/nsswitch.conf", mode: 0o644, data: nsswitch}
	b.entries["etc/wgetrc"] = file{path: "etc/wgetrc", mode: 0o644, data: wgetrc}
	entries := make([]file, 0, len(b.entries))
	for _, e := range b.entries {
		entries = append(entries, e)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].path < entries[j].path })
	layer, err := tarFiles(entries)
	if err != nil {
		return nil, "", err
	}
	var by []string
	for _, p := range pkgs {
		by = append(by, p+"="+versions[p])
	}
	return layer, "portside internal/nodeimages: tools from Debian " + strings.Join(by, " "), nil
}

// hostRoot is a file tree at root, read by absolute paths inside it.
type hostRoot struct{ root string }

func (h hostRoot) host(p string) string { return filepath.Join(h.root, filepath.FromSlash(p)) }

func (h hostRoot) Lstat(p string) (fs.FileMode, error) {
	fi, err := os.Lstat(h.host(p))
	if err != nil {
		return 0, err
	}
	return fi.Mode(), nil
}

func (h hostRoot) Readlink(p string) (string, error) { return os.Readlink(h.host(p)) }

func (h hostRoot) ReadFile(p string) ([]byte, error) { return os.ReadFile(h.host(p)) }

// layerBuilder collects a layer's entries by path (no leading /).
type layerBuilder struct {
	root    hostRoot
	arch    string
	sysDirs []string
	entries map[string]file
	elfOK   map[string]bool // loadable libraries, by path
}

// add puts the file p names into the layer with the directories and links
// on its way and, for a dynamically linked ELF file, its loader and
// libraries. It returns the file's final path.
func (b *layerBuilder) add(p string) (string, error) {
	steps, final, err := resolvePath(p, b.root)
	if err != nil {
		return "", err
	}
	b.addSteps(steps)
	key := final[1:]
	if _, done := b.entries[key]; done {
		return final, nil
	}
	fi, err := os.Stat(b.root.host(final))
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s: not a regular file", final)
	}
	data, err := b.root.ReadFile(final)
	if err != nil {
		return "", err
	}
	b.entries[key] = file{path: key, mode: int64(fi.Mode().Perm()), data: string(data)}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return final, nil // not ELF: a script or data
	}
	if arch := elfArch[f.Machine]; arch != b.arch {
		return "", fmt.Errorf("%s: ELF machine %v, the image is %s", final, f.Machine, b.arch)
	}
	for _, prog := range f.Progs {
		if prog.Type != elf.PT_INTERP {
			continue
		}
		interp, err := readInterp(prog)
		if err != nil {
			return "", fmt.Errorf("%s: %w", final, err)
		}
		if _, err := b.add(interp); err != nil {
			return "", fmt.Errorf("%s: its loader: %w", final, err)
		}
	}
	needed, _ := f.ImportedLibraries()
	rpath, _ := f.DynString(elf.DT_RPATH)
	runpath, _ := f.DynString(elf.DT_RUNPATH)
	for _, n := range needed {
		lib, err := neededPath(n, path.Dir(final), splitDirs(rpath), splitDirs(runpath), b.sysDirs, b.loadable)
		if err != nil {
			return "", fmt.Errorf("%s: %w", final, err)
		}
		if _, err := b.add(lib); err != nil {
			return "", fmt.Errorf("%s: %w", final, err)
		}
	}
	return final, nil
}

func (b *layerBuilder) addSteps(steps []step) {
	for _, s := range steps {
		key := s.path[1:]
		if s.link != "" {
			b.entries[key] = file{path: key, link: s.link}
		} else if _, ok := b.entries[key]; !ok {
			b.entries[key] = file{path: key, mode: 0o755, dir: true}
		}
	}
}

// link puts a symbolic link at p (to target as given) into the layer, in
// the directory p's parent resolves to in the tree.
func (b *layerBuilder) link(p, target string) error {
	steps, dir, err := resolvePath(path.Dir(p)+"/.", b.root)
	if err != nil {
		return fmt.Errorf("link %s: %w", p, err)
	}
	b.addSteps(append(steps, step{path: dir}))
	key := path.Join(dir, path.Base(p))[1:]
	if _, ok := b.entries[key]; !ok {
		b.entries[key] = file{path: key, link: target}
	}
	return nil
}

// loadable says whether the loader would take p: an ELF file of the
// image's machine.
func (b *layerBuilder) loadable(p string) bool {
	if ok, seen := b.elfOK[p]; seen {
		return ok
	}
	ok := false
	if f, err := elf.Open(b.root.host(p)); err == nil {
		ok = elfArch[f.Machine] == b.arch && f.Class == elfClass(b.arch)
		_ = f.Close()
	}
	if b.elfOK == nil {
		b.elfOK = map[string]bool{}
	}
	b.elfOK[p] = ok
	return ok
}

func elfClass(arch string) elf.Class {
	if arch == "amd64" || arch == "arm64" {
		return elf.ELFCLASS64
	}
	return elf.ELFCLASS32
}

func readInterp(prog *elf.Prog) (string, error) {
	buf := make([]byte, prog.Filesz)
	if _, err := prog.ReadAt(buf, 0); err != nil {
		return "", fmt.Errorf("reading PT_INTERP: %w", err)
	}
	return string(bytes.TrimRight(buf, "\x00")), nil
}

func splitDirs(s []string) []string {
	var out []string
	for _, x := range s {
		out = append(out, strings.Split(x, ":")...)
	}
	return out
}

func uniqueSorted(s []string) []string {
	sort.Strings(s)
	out := s[:0]
	for i, x := range s {
		if i == 0 || x != s[i-1] {
			out = append(out, x)
		}
	}
	return out
}

// toolsAddendum is the tools layer of an image of arch, as a layer to
// append.
func toolsAddendum(toolsLayer toolsLayerFunc, arch string) ([]mutate.Addendum, error) {
	data, createdBy, err := toolsLayer(arch)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, err
	}
	return []mutate.Addendum{{Layer: layer, History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: createdBy}}}, nil
}
