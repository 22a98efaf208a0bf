// Package nodeimages builds the images a real node's pods need from the
// static binaries `make tools` builds (no public registry is reachable, and
// `portside up` must not need one): the sandbox image containerd runs for
// every pod, from our own pause program, agnhost, CoreDNS for the
// cluster's DNS, and the busybox and glibc-dns-testing images of the e2e
// specs (the tools layer agnhost has), under their upstream names. Push puts them in the local cloud's registry at the repository a
// containerd mirror of registry.k8s.io asks for, so upstream manifests work
// unchanged; WriteOCILayout and WriteArchive are for `ctr images import`.
package nodeimages

import (
	"archive/tar"
	"bytes"
	_ "embed"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/portside-io/portside/internal/tools"
)

// Upstream names of the images, at the tags hack/tools/versions.env pins
// (PAUSE_VERSION, AGNHOST_VERSION; build.sh checks them against the
// sources, TestNamesMatchVersions against versions.env).
const (
	// PauseImage is containerd v2.4.2's default sandbox image
	// (internal/cri/config DefaultSandboxImage); kubelet 1.37 has no
	// setting of its own and leaves it to the runtime.
	PauseImage = "registry.k8s.io/pause:3.10.2"
	// AgnhostImage is test/utils/image's Agnhost of k8s.io/kubernetes
	// v1.37.2, its tag test/images/agnhost/VERSION.
	AgnhostImage = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"
	// CoreDNSImage is the name kubeadm v1.37 deploys CoreDNS under, at
	// COREDNS_VERSION.
	CoreDNSImage = "registry.k8s.io/coredns/coredns:v1.14.6"
	// BusyBoxImage and GlibcDNSTestingImage are test/utils/image's BusyBox
	// and GlibcDnsTesting of k8s.io/kubernetes v1.37.2 (its manifest.go):
	// sig-network specs run shell loops in them (init containers,
	// clients; the DNS probes of every DNS spec, glibc's resolver beside
	// agnhost's).
	BusyBoxImage         = "registry.k8s.io/e2e-test-images/busybox:1.37.0-2"
	GlibcDNSTestingImage = "registry.k8s.io/e2e-test-images/glibc-dns-testing:2.1.1"
	// RegressionIssue74839Image is test/utils/image's RegressionIssue74839,
	// the Conntrack "invalid conntrack state bug" spec's server (its
	// VERSION, 1.5).
	RegressionIssue74839Image = "registry.k8s.io/e2e-test-images/regression-issue-74839:1.5"
)

// RegressionIssue74839 is the binary of RegressionIssue74839Image
// (k8s.io/kubernetes/test/images/regression-issue-74839, static) in the
// e2e tools directory (tools.E2EDir): the upstream e2e runner builds it
// there (test/upstreame2e), only for its runs.
const RegressionIssue74839 = "regression-issue-74839"

// porterCert and porterKey are agnhost's test/images/agnhost/porter
// localhost.crt and localhost.key of k8s.io/kubernetes v1.37.2 (a
// self-signed certificate for 127.0.0.1 and ::1, published with the
// source): upstream's Dockerfile ADDs them at /, and `agnhost porter`
// serves its TLS ports with them (without them the Proxy spec's https
// service and pod proxies got 503).
//
//go:embed porter/localhost.crt
var porterCert string

//go:embed porter/localhost.key
var porterKey string

// capNetBindService is a security.capability extended attribute (struct
// vfs_cap_data, revision 2, little endian) of cap_net_bind_service=+ep:
// what upstream's Dockerfile sets with setcap, so CoreDNS running as a
// non-root user binds port 53 with only NET_BIND_SERVICE in its bounding
// set, as kubeadm's Deployment gives it.
const capNetBindService = "\x01\x00\x00\x02" + "\x00\x04\x00\x00" + "\x00\x00\x00\x00" + "\x00\x00\x00\x00" + "\x00\x00\x00\x00"

// nonroot is distroless' non-root user, upstream CoreDNS's USER.
const nonroot = "65532"

// epoch is every timestamp in the images: the same binaries give the same
// digests, build after build.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Image is one built image under its upstream name.
type Image struct {
	// Name is the upstream reference, e.g. PauseImage.
	Name string
	// Image is the linux image (its architecture the binary's).
	Image v1.Image
}

// Ref parses Name.
func (i Image) Ref() (name.Tag, error) { return name.NewTag(i.Name, name.StrictValidation) }

// file is one entry of an image's layer besides the binary.
type file struct {
	path string // without the leading /
	mode int64
	dir  bool
	link string // a symbolic link's target
	data string
	caps string // security.capability, a PAX record (containerd sets it)
}

// spec says how one image is made from one binary of the tools directory.
type spec struct {
	name string
	// binary is in the tools bin directory, at path in the image; ""
	// for an image of the tools layer and files alone (its architecture
	// the tools layer's, toolsArchBinary's).
	binary string
	path   string
	// binCaps is the binary's security.capability attribute ("" none).
	binCaps string
	// extras are more binaries of the tools bin directory: path in the
	// image → binary.
	extras map[string]string
	files  []file
	config v1.Config
	// tools: a layer under the binary's with the shell and tools
	// upstream's image has from its base (tools.go).
	tools bool
	// e2e: the binary is in the e2e tools directory, built only for
	// Kubernetes' own e2e suite: without it the image is not built.
	e2e bool
}

// specs are the images Build makes: what upstream's Dockerfiles give them
// that a pod can notice (entrypoint, command, user, ports, the paths tests
// use), without upstream's base images (agnhost gets their shell and
// tools from Debian's packages instead: tools.go).
func specs() []spec {
	return []spec{
		{
			// kubernetes/build/pause's Dockerfile: FROM scratch, the
			// binary, USER 65535:65535.
			name: PauseImage, binary: tools.Pause, path: "/pause",
			config: v1.Config{Entrypoint: []string{"/pause"}, User: "65535:65535", WorkingDir: "/"},
		},
		{
			// test/images/agnhost/Dockerfile: ENTRYPOINT /agnhost, CMD
			// pause, the agnhost-2 link entrypoint tests run, /uploads of
			// netexec, and the user and group the SupplementalGroups test
			// expects in the image.
			name: AgnhostImage, binary: tools.Agnhost, path: "/agnhost", tools: true,
			files: []file{
				{path: "agnhost-2", link: "agnhost"},
				{path: "etc", mode: 0o755, dir: true},
				{path: "etc/group", mode: 0o644, data: "root:x:0:root\ngroup-defined-in-image:x:50000:user-defined-in-image\nuser-defined-in-image:x:1000:\n"},
				{path: "etc/passwd", mode: 0o644, data: "root:x:0:0:root:/root:/sbin/nologin\nuser-defined-in-image:x:1000:1000::/home/user-defined-in-image:/sbin/nologin\n"},
				{path: "tmp", mode: 0o1777, dir: true},
				{path: "uploads", mode: 0o755, dir: true},
				{path: "localhost.crt", mode: 0o644, data: porterCert},
				{path: "localhost.key", mode: 0o644, data: porterKey},
			},
			// The Dockerfile's /coredns (v1.6.2 there): the DNS specs
			// run it in agnhost pods as a test name server (`/coredns
			// -conf /etc/coredns/Corefile`); ours is the cluster's.
			extras: map[string]string{"/coredns": tools.CoreDNS},
			config: v1.Config{
				Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}, WorkingDir: "/",
				Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
				ExposedPorts: map[string]struct{}{
					"80/tcp": {}, "8080/tcp": {}, "8081/tcp": {}, "9376/tcp": {}, "5000/tcp": {},
				},
			},
		},
		{
			// coredns' Dockerfile: FROM distroless static nonroot, the
			// binary with cap_net_bind_service=+ep, USER nonroot,
			// EXPOSE 53 53/udp, ENTRYPOINT /coredns. Of distroless only
			// the users and /tmp: no CA certificates, since nothing
			// here forwards over TLS.
			name: CoreDNSImage, binary: tools.CoreDNS, path: "/coredns", binCaps: capNetBindService,
			files: []file{
				{path: "etc", mode: 0o755, dir: true},
				{path: "etc/group", mode: 0o644, data: "root:x:0:\nnonroot:x:" + nonroot + ":\n"},
				{path: "etc/passwd", mode: 0o644, data: "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:" + nonroot + ":" + nonroot + ":nonroot:/home/nonroot:/sbin/nologin\n"},
				{path: "tmp", mode: 0o1777, dir: true},
			},
			config: v1.Config{
				Entrypoint: []string{"/coredns"}, User: nonroot + ":" + nonroot, WorkingDir: "/",
				ExposedPorts: map[string]struct{}{"53/tcp": {}, "53/udp": {}},
			},
		},
		{
			// test/images/busybox: upstream's busybox image unchanged
			// (CMD sh). Here the tools layer agnhost has (busybox's
			// applets, dash as sh, ...): the specs run `sh -c` loops of
			// sleep, echo and nc.
			name: BusyBoxImage, tools: true, files: baseFiles(),
			config: v1.Config{Cmd: []string{"sh"}, WorkingDir: "/", Env: []string{debianPath}},
		},
		{
			// test/images/glibc-dns-testing: debian:bookworm-slim with
			// dnsutils (dig) and a coredns; the DNS specs run their
			// probe loop (dig, getent, test, seq, sleep) in it with
			// glibc's resolver. The tools layer is Debian's glibc
			// programs, dig and getent among them.
			name: GlibcDNSTestingImage, tools: true, files: baseFiles(),
			extras: map[string]string{"/coredns": tools.CoreDNS},
			config: v1.Config{Cmd: []string{"bash"}, WorkingDir: "/", Env: []string{debianPath}},
		},
		{
			// test/images/regression-issue-74839: the binary on
			// debian-base, ENTRYPOINT /regression-issue-74839; it
			// needs nothing of the base (a static Go program that
			// opens a raw socket).
			name: RegressionIssue74839Image, binary: RegressionIssue74839, path: "/" + RegressionIssue74839, e2e: true,
			files:  baseFiles(),
			config: v1.Config{Entrypoint: []string{"/" + RegressionIssue74839}, WorkingDir: "/", Env: []string{debianPath}},
		},
	}
}

// debianPath is the PATH of Debian's and busybox's images.
const debianPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// baseFiles are what a base image gives that a pod can notice: root's
// user and group and a /tmp.
func baseFiles() []file {
	return []file{
		{path: "etc", mode: 0o755, dir: true},
		{path: "etc/group", mode: 0o644, data: "root:x:0:\nnogroup:x:65534:\n"},
		{path: "etc/passwd", mode: 0o644, data: "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"},
		{path: "tmp", mode: 0o1777, dir: true},
	}
}

// toolsArchBinary gives an image without a binary of its own its
// architecture: the tools layer is copied from the host agnhost was
// built for.
const toolsArchBinary = tools.Agnhost

// Build makes every image from the binaries in binDir (tools.BinDir()).
// A binary that is missing or would not run in an image without a libc is
// refused, saying to run `make tools`. The images are also named by the
// aliases of binDir's AliasesFile.
func Build(binDir string) ([]Image, error) {
	aliases, err := readAliases(binDir)
	if err != nil {
		return nil, err
	}
	images, err := buildAll(binDir, hostToolsLayer)
	if err != nil {
		return nil, err
	}
	return withAliases(images, aliases)
}

func buildAll(binDir string, toolsLayer toolsLayerFunc) ([]Image, error) {
	var out []Image
	// One tools layer per architecture, shared by the images that have
	// it: built once, and one blob in the registry and on the nodes.
	toolsLayers := map[string][]mutate.Addendum{}
	for _, s := range specs() {
		binary, dir := s.binary, binDir
		if binary == "" {
			binary = toolsArchBinary
		}
		if s.e2e {
			dir = tools.E2EDir(binDir)
			if _, err := os.Stat(filepath.Join(dir, binary)); os.IsNotExist(err) {
				continue
			}
		}
		data, arch, err := readStatic(dir, binary)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", s.name, err)
		}
		if s.binary == "" {
			data = nil
		}
		extras := map[string][]byte{}
		for p, b := range s.extras {
			d, a, err := readStatic(binDir, b)
			if err != nil {
				return nil, fmt.Errorf("image %s: %w", s.name, err)
			}
			if a != arch {
				return nil, fmt.Errorf("image %s: %s is %s, the image %s", s.name, b, a, arch)
			}
			extras[p] = d
		}
		var base []mutate.Addendum
		if s.tools {
			if base = toolsLayers[arch]; base == nil {
				if base, err = toolsAddendum(toolsLayer, arch); err != nil {
					return nil, fmt.Errorf("image %s: %w", s.name, err)
				}
				toolsLayers[arch] = base
			}
		}
		img, err := build(s, data, extras, arch, base...)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", s.name, err)
		}
		out = append(out, Image{Name: s.name, Image: img})
	}
	return out, nil
}

// readStatic reads a binary of binDir that an image without a libc can
// run, and its architecture.
func readStatic(binDir, binary string) ([]byte, string, error) {
	bin := filepath.Join(binDir, binary)
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, "", fmt.Errorf("%w: run `make tools` to build %s", err, binary)
	}
	arch, err := staticELFArch(data)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", bin, err)
	}
	return data, arch, nil
}

// build packages one binary as s says: one OCI layer over base's, OCI
// media types.
func build(s spec, bin []byte, extras map[string][]byte, arch string, base ...mutate.Addendum) (v1.Image, error) {
	layerBytes, err := layerTar(s, bin, extras)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerBytes)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img, append(base, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "portside internal/nodeimages: " + createdBy(s)},
	})...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Created = v1.Time{Time: epoch}
	cf.Config = s.config
	return mutate.ConfigFile(img, cf)
}

// createdBy names what the image's own layer holds.
func createdBy(s spec) string {
	if s.path != "" {
		return s.path
	}
	return "files of " + s.name
}

// layerTar is the binary at s.path (if any), the extras at theirs, plus
// s.files: sorted, fixed times, owned by root.
func layerTar(s spec, bin []byte, extras map[string][]byte) ([]byte, error) {
	var entries []file
	if s.path != "" {
		entries = append(entries, file{path: s.path[1:], mode: 0o755, data: string(bin), caps: s.binCaps})
	}
	for p, d := range extras {
		entries = append(entries, file{path: p[1:], mode: 0o755, data: string(d)})
	}
	entries = append(entries, s.files...)
	sort.Slice(entries, func(i, j int) bool { return entries[i].path < entries[j].path })
	return tarFiles(entries)
}

// tarFiles writes entries, in their order, as a tar with fixed times.
func tarFiles(entries []file) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := tar.Header{Name: e.path, Mode: e.mode, ModTime: epoch, Format: tar.FormatUSTAR, Typeflag: tar.TypeReg, Size: int64(len(e.data))}
		switch {
		case e.dir:
			h.Typeflag, h.Name, h.Size = tar.TypeDir, e.path+"/", 0
		case e.link != "":
			h.Typeflag, h.Linkname, h.Mode, h.Size = tar.TypeSymlink, e.link, 0o777, 0
		}
		if e.caps != "" {
			h.Format, h.PAXRecords = tar.FormatPAX, map[string]string{"SCHILY.xattr.security.capability": e.caps}
		}
		if err := tw.WriteHeader(&h); err != nil {
			return nil, fmt.Errorf("tar %s: %w", e.path, err)
		}
		if _, err := io.WriteString(tw, e.data); err != nil {
			return nil, fmt.Errorf("tar %s: %w", e.path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
