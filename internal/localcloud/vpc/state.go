package vpc

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// object is one kernel object the network made, recorded before it is
// made (so a kill -9 between the two leaves a record of something absent,
// which clean-up tolerates, never an object without a record).
type object struct {
	// Kind is "netns", "link" or "route".
	Kind string `json:"kind"`
	// Name is the netns or link name, or the route's destination.
	Name string `json:"name"`
	// Netns is where a link or route lives ("" for the host's namespace).
	Netns string `json:"netns,omitempty"`
	// Route is a route's spec as given to `ip route del`.
	Route []string `json:"route,omitempty"`
	// Ident identifies what was made, filled once it exists: a netns's
	// inode, a host link's ifindex. Clean-up removes an object only while
	// the name still names that identity.
	Ident uint64 `json:"ident,omitempty"`
}

type record struct {
	path    string
	Objects []object `json:"objects"`
}

func loadRecord(path string) (*record, error) {
	r := &record{path: path}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, r); err != nil {
		return nil, fmt.Errorf("%s: not a vpc record (%v): remove what it names by hand, then the file", path, err)
	}
	return r, nil
}

func (r *record) add(o object) error {
	r.Objects = append(r.Objects, o)
	return r.save()
}

// setIdent fills the identity of the last object of that kind and name.
func (r *record) setIdent(kind, name string, ident uint64) error {
	for i := len(r.Objects) - 1; i >= 0; i-- {
		if r.Objects[i].Kind == kind && r.Objects[i].Name == name {
			r.Objects[i].Ident = ident
			return r.save()
		}
	}
	return fmt.Errorf("no %s %s recorded", kind, name)
}

func (r *record) save() error {
	if err := os.MkdirAll(filepath.Dir(r.path), 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp := r.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, r.path)
}

func (r *record) remove() error {
	if err := os.Remove(r.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	r.Objects = nil
	return nil
}
