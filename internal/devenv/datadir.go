package devenv

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/portside-io/portside/internal/version"
)

// markerName marks a data directory `portside up` created (or adopted
// empty): only such a directory is ever removed by --purge.
const markerName = ".portside-up"

// legacyEntries are all that Portside put in a data directory before the
// marker; legacyRequired are made by every such run.
var (
	legacyEntries  = []string{"logs", "cloud", "ccm", "controlplane", "credential-provider", "netproxy", "network.json", pidFileName}
	legacyRequired = []string{"logs", "cloud", "ccm"}
)

// prepareDataDir makes dir ready for `up`: it creates it, or adopts it when
// it is empty or holds only an older Portside's layout, and marks it. Any
// other non-empty directory is refused, as --purge would remove it.
func prepareDataDir(dir string) error {
	owned, why, err := dataDirOwned(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("data directory: %w", err)
		}
	case err != nil:
		return fmt.Errorf("data directory: %w", err)
	case owned && why == "":
		return nil // marked
	case !owned && why != whyEmpty:
		return fmt.Errorf("data directory %s is not empty and was not created by portside up (%s): not using it, since --purge would remove it; give --data-dir a new or empty directory", dir, why)
	}
	marker := fmt.Sprintf("# Created by `portside up`: `portside up --purge` and `portside down --purge` remove this whole directory.\nformat 1\nportside %s\n", version.Version)
	return os.WriteFile(filepath.Join(dir, markerName), []byte(marker), 0o644)
}

const whyEmpty = "no " + markerName + " marker; it is empty"

// dataDirOwned reports whether dir is one `portside up` made: it has the
// marker (why is ""), or holds only what older versions made there (why
// says so). When it is not, why says what is missing.
func dataDirOwned(dir string) (owned bool, why string, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, "", err
	}
	if fi, err := os.Lstat(filepath.Join(dir, markerName)); err == nil && fi.Mode().IsRegular() {
		return true, "", nil
	}
	if len(entries) == 0 {
		return false, whyEmpty, nil
	}
	names := map[string]fs.DirEntry{}
	for _, e := range entries {
		names[e.Name()] = e
	}
	for _, n := range legacyRequired {
		if e, ok := names[n]; !ok || !e.IsDir() {
			return false, "no " + markerName + " marker", nil
		}
	}
	for n := range names {
		if !slices.Contains(legacyEntries, n) {
			return false, fmt.Sprintf("no %s marker, and %s is not from an older portside up", markerName, n), nil
		}
	}
	return true, "the layout of an older portside up", nil
}

// removeDataDir removes dir, the --purge of `up` and `down`, only if
// `portside up` created it.
func removeDataDir(dir string) (string, error) {
	owned, why, err := dataDirOwned(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Sprintf("%s does not exist: nothing to remove", dir), nil
	}
	if err != nil {
		return "", fmt.Errorf("--purge: %w", err)
	}
	if !owned {
		return "", fmt.Errorf("%s was not created by portside up (%s): not removing it; remove it yourself if you are sure", dir, why)
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	return "removed " + dir, nil
}
