package server

import (
	"slices"
	"testing"
)

// TestClaimHolders: a key is contested while two or more Nodes list it;
// set returns exactly the other Nodes whose contest began or ended (a
// third holder, or one of three leaving, changes nobody else's).
func TestClaimHolders(t *testing.T) {
	h := newClaimHolders()
	steps := []struct {
		name     string
		node     string
		keys     []string
		affected []string
		// contested after the step, per node and key
		contested map[string]bool
	}{
		{"a alone", "a", []string{"addr/10.0.0.1", "host/a"}, nil, map[string]bool{"a addr/10.0.0.1": false, "a host/a": false}},
		{"b alone", "b", []string{"addr/10.0.0.2", "host/b"}, nil, map[string]bool{"b addr/10.0.0.2": false}},
		{"b lists a's address: a's contest begins", "b", []string{"addr/10.0.0.2", "host/b", "addr/10.0.0.1"}, []string{"a"},
			map[string]bool{"a addr/10.0.0.1": true, "b addr/10.0.0.1": true, "a host/a": false}},
		{"c lists it too: nobody else's contest changes", "c", []string{"addr/10.0.0.1"}, nil, map[string]bool{"c addr/10.0.0.1": true}},
		{"c drops it: still two, nobody else changes", "c", []string{"addr/10.0.0.3"}, nil, map[string]bool{"a addr/10.0.0.1": true}},
		{"b gone: a alone again", "b", nil, []string{"a"}, map[string]bool{"a addr/10.0.0.1": false, "b addr/10.0.0.1": true}},
		{"unchanged keys: nothing", "a", []string{"addr/10.0.0.1", "host/a"}, nil, map[string]bool{"a addr/10.0.0.1": false}},
		{"a gone: nobody else changes; c alone with its key", "a", nil, nil, map[string]bool{"c addr/10.0.0.3": false}},
	}
	for _, st := range steps {
		got, same := h.set(st.node, st.keys)
		if wantSame := st.name == "unchanged keys: nothing"; same != wantSame {
			t.Errorf("%s: same = %v, want %v", st.name, same, wantSame)
		}
		slices.Sort(got)
		if !slices.Equal(got, st.affected) {
			t.Errorf("%s: affected %v, want %v", st.name, got, st.affected)
		}
		for nk, want := range st.contested {
			var node, key string
			for i := range nk {
				if nk[i] == ' ' {
					node, key = nk[:i], nk[i+1:]
					break
				}
			}
			if c := h.contested(node, key); c != want {
				t.Errorf("%s: contested(%s, %s) = %v, want %v", st.name, node, key, c, want)
			}
		}
	}
	// A key only another Node lists is contested for this one (it lists
	// it in a Node object the tracker has not seen yet).
	_, _ = h.set("x", []string{"addr/10.9.9.9"})
	if !h.contested("y", "addr/10.9.9.9") {
		t.Error("a key only another Node lists is not contested")
	}
}

func TestClaimHoldersOthers(t *testing.T) {
	h := newClaimHolders()
	for _, n := range []string{"n7", "n3", "n1", "n9", "n2", "n5", "n4"} {
		_, _ = h.set(n, []string{"addr/10.0.0.1"})
	}
	if got, want := h.others("n3", "addr/10.0.0.1"), []string{"n1", "n2", "n4", "n5", "n7"}; !slices.Equal(got, want) {
		t.Errorf("others = %v, want %v (sorted, without n3, at most %d)", got, want, maxListedBy)
	}
	if got := h.others("n1", "addr/10.9.9.9"); got != nil {
		t.Errorf("others of an unlisted key = %v", got)
	}
}
