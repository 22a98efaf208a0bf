package nodeimages

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// Annotations of an OCI layout's index.json entry, as containerd's own
// export writes them: `ctr images import` names the image after the
// first, a full reference, where the OCI one holds only the tag.
const (
	containerdImageName = "io.containerd.image.name"
	ociRefName          = "org.opencontainers.image.ref.name"
	// portsideImageName is Image.Name as given (containerd's is the
	// reference normalised), for Cached to read back.
	portsideImageName = "io.portside.node-image.name"
)

// WriteOCILayout writes images into a new OCI image layout at dir (which
// must be empty or absent), each index.json entry named after its upstream
// name, so that `ctr images import` (of WriteArchive's tar of it) gives the
// images their upstream names and the digests Push gives them.
func WriteOCILayout(dir string, images []Image) error {
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	for _, img := range images {
		ref, err := img.Ref()
		if err != nil {
			return err
		}
		if err := p.AppendImage(img.Image, layout.WithAnnotations(map[string]string{
			containerdImageName: ref.Name(), ociRefName: ref.TagStr(), portsideImageName: img.Name,
		})); err != nil {
			return fmt.Errorf("OCI layout %s: %s: %w", dir, img.Name, err)
		}
	}
	return nil
}

// WriteArchive writes images as a tar of an OCI layout (what `ctr images
// import` reads) to path, through a temporary layout beside it.
func WriteArchive(path string, images []Image) (err error) {
	tmp, err := os.MkdirTemp(filepath.Dir(path), ".nodeimages-*")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	if err := WriteOCILayout(tmp, images); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	return tarDir(f, tmp)
}

// tarDir writes the files under dir to w, sorted, with paths relative to dir.
func tarDir(w io.Writer, dir string) error {
	var paths []string
	if err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			paths = append(paths, p)
		}
		return nil
	}); err != nil {
		return err
	}
	sort.Strings(paths)
	tw := tar.NewWriter(w)
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, ModTime: epoch, Format: tar.FormatPAX, Typeflag: tar.TypeReg, Size: st.Size()}
		if st.IsDir() {
			h.Name, h.Mode, h.Typeflag, h.Size = h.Name+"/", 0o755, tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !st.IsDir() {
			if err := copyFile(tw, p); err != nil {
				return err
			}
		}
	}
	return tw.Close()
}

func copyFile(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	_, err = io.Copy(w, f)
	return err
}
