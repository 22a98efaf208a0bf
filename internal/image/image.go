// Package image builds the OCI image of portside without a container engine:
// one image per platform, each a single layer holding the static portside
// binary and the few files a non-root process needs, under an OCI image
// index; it writes the index into an OCI layout and pushes it to a registry.
//
// The images have no base: there is no shell, no libc and no package
// manager, only /portside, /etc/passwd and /etc/group naming the non-root
// user portside (65532:65532), its home directory and a world-writable
// /tmp (like distroless "static"). There are no CA certificates either:
// portside talks TLS to kube-apiserver with the cluster CA of its
// kubeconfig or service account (and to the local cloud over loopback), so
// the system trust store is never consulted.
//
// The build is reproducible: the same binaries, version, commit and build
// date give the same digests (fixed file times and owners, sorted tar
// entries, no host-dependent metadata).
package image

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The non-root user the image runs as (the "nonroot" id of distroless).
const (
	UID      = 65532
	GID      = 65532
	UserName = "portside"
	// User is the config's User field.
	User = "65532:65532"
)

// Paths in the image.
const (
	// BinaryPath is the binary and the entrypoint.
	BinaryPath = "/portside"
	// HomeDir is the user's home directory (owned by the user, 0700).
	HomeDir = "/home/portside"
)

// Defaults of Options.
const (
	DefaultTitle       = "portside"
	DefaultDescription = "Portside: the Kubernetes cloud provider of the Portside cloud (cloud-controller-manager, webhooks, credential provider)"
	DefaultSource      = "https://github.com/portside-io/portside"
	DefaultLicenses    = "Apache-2.0"
	// DefaultRepository is the repository (under a registry host) the image
	// is pushed to by convention: <registry>/portside/portside:<Tag(version)>.
	DefaultRepository = "portside/portside"
)

// Platform is an OS/architecture pair an image is built for.
type Platform struct {
	OS           string
	Architecture string
}

// The platforms `make image` builds.
var (
	LinuxAMD64 = Platform{OS: "linux", Architecture: "amd64"}
	LinuxARM64 = Platform{OS: "linux", Architecture: "arm64"}
	Platforms  = []Platform{LinuxAMD64, LinuxARM64}
)

// String is "os/arch".
func (p Platform) String() string { return p.OS + "/" + p.Architecture }

// ParsePlatform parses "os/arch".
func ParsePlatform(s string) (Platform, error) {
	o, a, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok || o == "" || a == "" || strings.Contains(a, "/") {
		return Platform{}, fmt.Errorf("platform %q: want os/arch, e.g. linux/amd64", s)
	}
	return Platform{OS: o, Architecture: a}, nil
}

// Options describe the image.
type Options struct {
	// Version, Commit and BuildDate are what the binaries were stamped with;
	// they go into the labels, and BuildDate is also the image's creation
	// time and every file's modification time. Version and Commit are
	// required; a zero BuildDate means the Unix epoch.
	Version   string
	Commit    string
	BuildDate time.Time
	// Binaries maps each platform to the path of the static portside binary
	// cross-compiled for it. At least one.
	Binaries map[Platform]string
	// Title, Description, Source and Licenses override the defaults of the
	// org.opencontainers.image labels.
	Title, Description, Source, Licenses string
}

// Build builds the image index: one image per platform of o.Binaries, in a
// fixed order (sorted by "os/arch").
func Build(ctx context.Context, o Options) (v1.ImageIndex, error) {
	if o.Version == "" || o.Commit == "" {
		return nil, errors.New("image: Version and Commit are required")
	}
	if len(o.Binaries) == 0 {
		return nil, errors.New("image: no binaries")
	}
	o = o.withDefaults()
	platforms := make([]Platform, 0, len(o.Binaries))
	for p := range o.Binaries {
		platforms = append(platforms, p)
	}
	sort.Slice(platforms, func(i, j int) bool { return platforms[i].String() < platforms[j].String() })

	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	adds := make([]mutate.IndexAddendum, 0, len(platforms))
	for _, p := range platforms {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		img, err := buildImage(o, p, o.Binaries[p])
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", p, err)
		}
		adds = append(adds, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: p.OS, Architecture: p.Architecture}},
		})
	}
	idx = mutate.AppendManifests(idx, adds...)
	annotated, ok := mutate.Annotations(idx, o.annotations()).(v1.ImageIndex)
	if !ok {
		return nil, errors.New("image: annotating the index did not give an index")
	}
	return annotated, nil
}

func (o Options) withDefaults() Options {
	if o.Title == "" {
		o.Title = DefaultTitle
	}
	if o.Description == "" {
		o.Description = DefaultDescription
	}
	if o.Source == "" {
		o.Source = DefaultSource
	}
	if o.Licenses == "" {
		o.Licenses = DefaultLicenses
	}
	if o.BuildDate.IsZero() {
		o.BuildDate = time.Unix(0, 0)
	}
	// Seconds: the tar headers stay plain ustar (no PAX records for
	// sub-second times) and the labels match the config's created field.
	o.BuildDate = o.BuildDate.UTC().Truncate(time.Second)
	return o
}

// annotations are the org.opencontainers.image labels (and the index's
// annotations).
func (o Options) annotations() map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       o.Title,
		"org.opencontainers.image.description": o.Description,
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.revision":    o.Commit,
		"org.opencontainers.image.created":     o.BuildDate.Format(time.RFC3339),
		"org.opencontainers.image.source":      o.Source,
		"org.opencontainers.image.licenses":    o.Licenses,
	}
}

func buildImage(o Options, p Platform, binary string) (v1.Image, error) {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return nil, fmt.Errorf("binary: %w", err)
	}
	tarBytes, err := layerTar(bin, o.BuildDate)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(tarBytes)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, err
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: o.BuildDate},
			CreatedBy: "portside internal/image: " + BinaryPath + ", /etc/passwd, /etc/group, " + HomeDir + ", /tmp",
			Comment:   "portside " + o.Version,
		},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = p.OS, p.Architecture
	cf.Created = v1.Time{Time: o.BuildDate}
	cf.Author = ""
	cf.Config = v1.Config{
		User:       User,
		Entrypoint: []string{BinaryPath},
		WorkingDir: "/",
		Env:        []string{"PATH=/"},
		Labels:     o.annotations(),
	}
	return mutate.ConfigFile(img, cf)
}

// Files of the layer besides the binary.
const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"portside:x:65532:65532:portside:" + HomeDir + ":/sbin/nologin\n"
	group = "root:x:0:\n" +
		"portside:x:65532:\n"
)

// layerTar is the layer: sorted entries, fixed times and owners.
func layerTar(bin []byte, mtime time.Time) ([]byte, error) {
	type entry struct {
		hdr  tar.Header
		data []byte
	}
	dir := func(name string, mode int64, uid, gid int) entry {
		return entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode, Uid: uid, Gid: gid}}
	}
	file := func(name string, mode int64, data []byte) entry {
		return entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data))}, data: data}
	}
	entries := []entry{
		dir("etc/", 0o755, 0, 0),
		file("etc/group", 0o644, []byte(group)),
		file("etc/passwd", 0o644, []byte(passwd)),
		dir("home/", 0o755, 0, 0),
		dir(strings.TrimPrefix(HomeDir, "/")+"/", 0o700, UID, GID),
		file(strings.TrimPrefix(BinaryPath, "/"), 0o755, bin),
		// Root-owned with the sticky bit, as on any Linux system.
		dir("tmp/", 0o1777, 0, 0),
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].hdr.Name < entries[j].hdr.Name })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.hdr
		h.ModTime = mtime
		h.Format = tar.FormatUSTAR
		if err := tw.WriteHeader(&h); err != nil {
			return nil, fmt.Errorf("tar %s: %w", h.Name, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, fmt.Errorf("tar %s: %w", h.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// RefNameAnnotation names an image in an OCI layout's index.json.
const RefNameAnnotation = "org.opencontainers.image.ref.name"

var tagUnsafe = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// Tag turns a version into an image tag: characters a tag may not hold
// (e.g. "+" of semver build metadata) become "-", and it is cut to the
// 128 characters a tag may have. "" gives "latest".
func Tag(version string) string {
	t := tagUnsafe.ReplaceAllString(version, "-")
	if t == "" {
		return "latest"
	}
	if t[0] == '.' || t[0] == '-' {
		t = "v" + t
	}
	if len(t) > 128 {
		t = t[:128]
	}
	return t
}

// WriteLayout writes idx into a new OCI image layout at dir (which must not
// hold anything else): its blobs, and index.json pointing at idx with the
// ref name tag (e.g. Tag(version)), so that tools address it as
// "oci:<dir>:<tag>". It returns idx's digest.
func WriteLayout(dir string, idx v1.ImageIndex, tag string) (v1.Hash, error) {
	d, err := idx.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	var opts []layout.Option
	if tag != "" {
		opts = append(opts, layout.WithAnnotations(map[string]string{RefNameAnnotation: tag}))
	}
	if err := p.AppendIndex(idx, opts...); err != nil {
		return v1.Hash{}, fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	return d, nil
}

// ReadLayout reads back the index WriteLayout wrote at dir.
func ReadLayout(dir string) (v1.ImageIndex, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, err
	}
	top, err := p.ImageIndex()
	if err != nil {
		return nil, err
	}
	m, err := top.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(m.Manifests) != 1 || !m.Manifests[0].MediaType.IsIndex() {
		return nil, fmt.Errorf("OCI layout %s: want index.json to point at one image index, it has %d entries", dir, len(m.Manifests))
	}
	return top.ImageIndex(m.Manifests[0].Digest)
}

// Push pushes idx (and its images and layers) to ref, e.g.
// "127.0.0.1:5000/portside/portside:v1.2.3", with auth (authn.Anonymous for
// none). A registry on loopback is spoken to over plain HTTP; parse ref with
// name.Insecure for any other such registry.
func Push(ctx context.Context, idx v1.ImageIndex, ref name.Reference, auth authn.Authenticator) error {
	if auth == nil {
		auth = authn.Anonymous
	}
	if err := remote.WriteIndex(ref, idx, remote.WithContext(ctx), remote.WithAuth(auth), remote.WithUserAgent("portside-image")); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	return nil
}

// Manifests lists idx's images: platform and manifest digest, in order.
func Manifests(idx v1.ImageIndex) ([]v1.Descriptor, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	return m.Manifests, nil
}
