// Package nodeimages builds the images a real node's pods need from the
// static binaries `make tools` builds (no public registry is reachable, and
// `portside up` must not need one): the sandbox image containerd runs for
// every pod, from our own pause program, agnhost, and CoreDNS for the
// cluster's DNS, under their upstream names. Push puts them in the local cloud's registry at the repository a
// containerd mirror of registry.k8s.io asks for, so upstream manifests work
// unchanged; WriteOCILayout and WriteArchive are for `ctr images import`.
package nodeimages

import (
	"archive/tar"
	"bytes"
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
)

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
	name   string
	binary string // in the tools bin directory
	path   string // of the binary in the image
	// binCaps is the binary's security.capability attribute ("" none).
	binCaps string
	files   []file
	config  v1.Config
	// tools: a layer under the binary's with the shell and tools
	// upstream's image has from its base (tools.go).
	tools bool
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
			},
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
	}
}

// Build makes every image from the binaries in binDir (tools.BinDir()).
// A binary that is missing or would not run in an image without a libc is
// refused, saying to run `make tools`.
func Build(binDir string) ([]Image, error) { return buildAll(binDir, hostToolsLayer) }

func buildAll(binDir string, toolsLayer toolsLayerFunc) ([]Image, error) {
	var out []Image
	for _, s := range specs() {
		bin := filepath.Join(binDir, s.binary)
		data, err := os.ReadFile(bin)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w: run `make tools` to build %s", s.name, err, s.binary)
		}
		arch, err := staticELFArch(data)
		if err != nil {
			return nil, fmt.Errorf("image %s: %s: %w", s.name, bin, err)
		}
		var base []mutate.Addendum
		if s.tools {
			if base, err = toolsAddendum(toolsLayer, arch); err != nil {
				return nil, fmt.Errorf("image %s: %w", s.name, err)
			}
		}
		img, err := build(s, data, arch, base...)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", s.name, err)
		}
		out = append(out, Image{Name: s.name, Image: img})
	}
	return out, nil
}

// build packages one binary as s says: one OCI layer over base's, OCI
// media types.
func build(s spec, bin []byte, arch string, base ...mutate.Addendum) (v1.Image, error) {
	layerBytes, err := layerTar(s, bin)
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
		History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "portside internal/nodeimages: " + s.path},
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

// layerTar is the binary at s.path plus s.files: sorted, fixed times,
// owned by root.
func layerTar(s spec, bin []byte) ([]byte, error) {
	entries := append([]file{{path: s.path[1:], mode: 0o755, data: string(bin), caps: s.binCaps}}, s.files...)
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
