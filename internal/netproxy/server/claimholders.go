package server

import (
	"slices"
	"sync"
)

// claimHolders tracks which Nodes list each claimable name or address
// (NodeFacts.ClaimKeys), to tell a contested one (listed by two or more)
// in O(1). A key's contest changes only when its holders go from one to
// two or from two to one, so only then is another Node's agent
// re-decided: a key shared by N Nodes (a NAT'd ExternalIP) costs each
// Node event O(its keys), not O(N), and a cold start O(N), not O(N²).
type claimHolders struct {
	mu      sync.Mutex
	holders map[string]map[string]struct{} // key → node names
	keys    map[string][]string            // node → its keys
}

func newClaimHolders() *claimHolders {
	return &claimHolders{holders: map[string]map[string]struct{}{}, keys: map[string][]string{}}
}

// set records node's keys (nil: the Node is gone) and returns the other
// Nodes whose contest changed: the one now sharing a key with node (it
// was alone), or the one left alone with a key node dropped. same is
// true when node's keys are those already recorded (a status heartbeat):
// nothing about it changed.
func (h *claimHolders) set(node string, keys []string) (affected []string, same bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	old, known := h.keys[node]
	if known && keys != nil && slices.Equal(old, keys) {
		return nil, true
	}
	add := func(name string) {
		if name != node && !slices.Contains(affected, name) {
			affected = append(affected, name)
		}
	}
	for _, k := range old {
		if slices.Contains(keys, k) {
			continue
		}
		set := h.holders[k]
		delete(set, node)
		switch len(set) {
		case 0:
			delete(h.holders, k)
		case 1:
			for other := range set {
				add(other) // no longer contested
			}
		}
	}
	for _, k := range keys {
		if slices.Contains(old, k) {
			continue
		}
		set := h.holders[k]
		if set == nil {
			set = map[string]struct{}{}
			h.holders[k] = set
		}
		set[node] = struct{}{}
		if len(set) == 2 {
			for other := range set {
				add(other) // contested from now on
			}
		}
	}
	if keys == nil {
		delete(h.keys, node)
	} else {
		h.keys[node] = keys
	}
	return affected, false
}

// contested reports whether a Node other than node lists key.
func (h *claimHolders) contested(node, key string) bool { return len(h.others(node, key)) > 0 }

// others are the Nodes other than node that list key, sorted (at most a
// few named: enough to find the culprit).
func (h *claimHolders) others(node, key string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for name := range h.holders[key] {
		if name != node {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	if len(out) > maxListedBy {
		out = out[:maxListedBy]
	}
	return out
}

// maxListedBy bounds the Nodes a denial names.
const maxListedBy = 5
