package nodeimages

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// AliasesFile, in a tools bin directory, names the images Build makes under
// more tags: each line "<name> <alias>" (# starts a comment). A Kubernetes
// release other than the pinned one names other tags for the same images
// (agnhost 2.59 in v1.35, pause 3.10.1): hack/lkg-tools.sh writes the
// release's, so its e2e.test finds them in the local cloud's registry.
const AliasesFile = "image-aliases"

// Alias is one line of AliasesFile.
type Alias struct{ Name, Alias string }

// readAliases reads binDir's AliasesFile; none is no aliases.
func readAliases(binDir string) ([]Alias, error) {
	path := filepath.Join(binDir, AliasesFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	aliases, err := ParseAliases(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return aliases, nil
}

// ParseAliases parses AliasesFile's content. Both names must be image
// references with a tag.
func ParseAliases(data []byte) ([]Alias, error) {
	var out []Alias
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("line %d: %q: want \"<image> <alias>\", two image references", n, line)
		}
		for _, ref := range f {
			if _, err := name.NewTag(ref, name.StrictValidation); err != nil {
				return nil, fmt.Errorf("line %d: %q is no image reference with a tag: %w", n, ref, err)
			}
		}
		out = append(out, Alias{Name: f[0], Alias: f[1]})
	}
	return out, sc.Err()
}

// withAliases adds to images one entry per alias, the same image under the
// alias's name. An alias of an image not built is an error (a release
// whose tags this checkout cannot serve should fail at up, not in a pod
// that cannot pull); an alias that is already a name, or repeated, adds
// nothing.
func withAliases(images []Image, aliases []Alias) ([]Image, error) {
	byName := map[string]Image{}
	for _, i := range images {
		byName[i.Name] = i
	}
	out := append([]Image(nil), images...)
	for _, a := range aliases {
		img, ok := byName[a.Name]
		if !ok {
			return nil, fmt.Errorf("alias %s names %s, which is not an image portside builds", a.Alias, a.Name)
		}
		if _, dup := byName[a.Alias]; dup {
			continue
		}
		byName[a.Alias] = Image{Name: a.Alias, Image: img.Image}
		out = append(out, byName[a.Alias])
	}
	return out, nil
}
