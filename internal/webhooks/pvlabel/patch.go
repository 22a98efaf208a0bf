package pvlabel

import (
	"bytes"
	"encoding/json"
)

// op is one RFC 6902 operation.
type op struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// patch is the JSON patch of d against raw, the PV as the apiserver sent
// it; nil when d changes nothing. Whole members are written with "add",
// which replaces a member that exists (RFC 6902 4.1): no need to know
// whether the PV had labels or an affinity, nor to escape label keys.
// A missing or null parent (never sent by an apiserver, which always
// serializes metadata and spec) is added whole, so the patch still applies.
func patch(d Decision, raw []byte) ([]byte, error) {
	if !d.Changed() {
		return nil, nil
	}
	var parents struct {
		Metadata json.RawMessage `json:"metadata"`
		Spec     json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal(raw, &parents); err != nil {
		return nil, err
	}
	var ops []op
	add := func(parent json.RawMessage, parentPath, member string, v any) {
		if len(parent) == 0 || bytes.Equal(parent, []byte("null")) {
			ops = append(ops, op{"add", parentPath, map[string]any{member: v}})
			return
		}
		ops = append(ops, op{"add", parentPath + "/" + member, v})
	}
	if d.Labels != nil {
		add(parents.Metadata, "/metadata", "labels", d.Labels)
	}
	if d.NodeAffinity != nil {
		add(parents.Spec, "/spec", "nodeAffinity", d.NodeAffinity)
	}
	return json.Marshal(ops)
}
