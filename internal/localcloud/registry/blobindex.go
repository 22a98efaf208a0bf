package registry

import (
	"encoding/json"
	"sync"
)

// blobIndex is which blobs each repository's manifests reference. Blobs
// are stored by digest for all repositories at once (go-containerregistry's
// disk handler), so without it a client allowed only some repositories (an
// anonymous pull of a public one, a credential narrowed to its namespace's)
// could fetch any other repository's layers and configs through an allowed
// repository's path, knowing their digests. Built from every manifest put,
// live and replayed from the journal. A delete leaves its digests indexed:
// the blobs were that repository's, and go-containerregistry keeps a
// manifest reachable by digest after its tag is deleted.
type blobIndex struct {
	mu     sync.RWMutex
	byRepo map[string]map[string]struct{}
}

func newBlobIndex() *blobIndex { return &blobIndex{byRepo: map[string]map[string]struct{}{}} }

// add indexes the blobs of a manifest put to repo.
func (x *blobIndex) add(repo string, body []byte) {
	digests := ManifestBlobs(body)
	if len(digests) == 0 {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	set := x.byRepo[repo]
	if set == nil {
		set = map[string]struct{}{}
		x.byRepo[repo] = set
	}
	for _, d := range digests {
		set[d] = struct{}{}
	}
}

// has reports whether a manifest of repo references blob digest.
func (x *blobIndex) has(repo, digest string) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	_, ok := x.byRepo[repo][digest]
	return ok
}

// ManifestBlobs is the blob digests a manifest body references: an image
// manifest's config and layers (OCI and Docker schema 2), an OCI artifact
// manifest's blobs, a Docker schema 1 manifest's layers. An index
// references manifests, not blobs: its children are put to the repository
// themselves. A body that is not JSON references nothing.
func ManifestBlobs(body []byte) []string {
	// Keys are matched exactly, and each field is decoded on its own:
	// encoding/json matches keys case-insensitively, and one extension
	// field of an unexpected shape (which the image spec says to ignore)
	// must not leave the whole manifest unindexed.
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return nil
	}
	type desc struct {
		Digest  string `json:"digest"`
		BlobSum string `json:"blobSum"`
	}
	var out []string
	take := func(d desc) {
		if d.Digest != "" {
			out = append(out, d.Digest)
		} else if d.BlobSum != "" {
			out = append(out, d.BlobSum)
		}
	}
	var cfg desc
	if raw, ok := fields["config"]; ok && json.Unmarshal(raw, &cfg) == nil {
		take(desc{Digest: cfg.Digest})
	}
	for _, key := range []string{"layers", "blobs", "fsLayers"} {
		var list []json.RawMessage
		if raw, ok := fields[key]; !ok || json.Unmarshal(raw, &list) != nil {
			continue
		}
		for _, item := range list {
			var d desc
			if json.Unmarshal(item, &d) != nil {
				continue
			}
			if key != "fsLayers" {
				d.BlobSum = ""
			} else {
				d.Digest = ""
			}
			take(d)
		}
	}
	return out
}

// blobOf splits /v2/<name>/blobs/<digest> into the repository and digest
// ("" otherwise; uploads are not blob reads).
func blobOf(path string) (repo, digest string) {
	repo, kind := repoOf(path)
	if kind != "blobs" {
		return "", ""
	}
	return repo, path[len("/v2/"+repo+"/blobs/"):]
}
