package registry

import (
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"slices"
	"strings"
	"testing"
)

func TestCheckManifestWrite(t *testing.T) {
	body := []byte(`{"schemaVersion":2}`)
	s256 := sha256.Sum256(body)
	s512 := sha512.Sum512(body)
	d256 := "sha256:" + hex.EncodeToString(s256[:])
	d512 := "sha512:" + hex.EncodeToString(s512[:])
	other := "sha256:" + strings.Repeat("a", 64)
	for _, tc := range []struct {
		name      string
		put       bool
		repo, ref string
		want      string // error code, "" for allowed
	}{
		{"tag", true, "portside/hello", "1.0", ""},
		{"nested name with separators", true, "a.b/c_d/e__f/g--h/i-j", "latest", ""},
		{"one-letter name and tag", true, "a", "_", ""},
		{"tag of 128", true, "a", strings.Repeat("t", 128), ""},
		{"by its sha256", true, "a", d256, ""},
		{"by its sha512", true, "a", d512, ""},
		{"delete by any well-formed digest", false, "a", other, ""},
		{"delete by tag", false, "a", "v1", ""},

		{"query in name (evil%3Fx)", true, "evil?x", "1", "NAME_INVALID"},
		{"fragment in name", true, "a#b", "1", "NAME_INVALID"},
		{"uppercase name", true, "Portside/hello", "1", "NAME_INVALID"},
		{"empty name", true, "", "1", "NAME_INVALID"},
		{"empty component", true, "a//b", "1", "NAME_INVALID"},
		{"trailing slash", true, "a/", "1", "NAME_INVALID"},
		{"dot-dot component", true, "a/../b", "1", "NAME_INVALID"},
		{"leading separator", true, "-a", "1", "NAME_INVALID"},
		{"trailing separator", true, "a-", "1", "NAME_INVALID"},
		{"three underscores", true, "a___b", "1", "NAME_INVALID"},
		{"two dots", true, "a..b", "1", "NAME_INVALID"},
		{"space", true, "a b", "1", "NAME_INVALID"},
		{"name too long", true, strings.Repeat("a", 256), "1", "NAME_INVALID"},
		{"bad name on delete too", false, "evil?x", "1", "NAME_INVALID"},

		{"empty tag", true, "a", "", "TAG_INVALID"},
		{"tag starting with dot", true, "a", ".x", "TAG_INVALID"},
		{"tag starting with dash", true, "a", "-x", "TAG_INVALID"},
		{"tag of 129", true, "a", strings.Repeat("t", 129), "TAG_INVALID"},
		{"tag with query", true, "a", "1?x", "TAG_INVALID"},
		{"tag with slash-free percent", true, "a", "1%20", "TAG_INVALID"},

		{"digest without hex", true, "a", "sha256:", "DIGEST_INVALID"},
		{"digest without algorithm", true, "a", ":abc", "DIGEST_INVALID"},
		{"uppercase sha256", true, "a", "sha256:" + strings.ToUpper(d256[7:]), "DIGEST_INVALID"},
		{"short sha256", true, "a", d256[:70], "DIGEST_INVALID"},
		{"unsupported algorithm", true, "a", "md5:" + strings.Repeat("a", 32), "DIGEST_INVALID"},
		{"two colons", true, "a", "sha256:a:b", "DIGEST_INVALID"},
		{"body of another digest", true, "a", other, "DIGEST_INVALID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := CheckManifestWrite(tc.put, tc.repo, tc.ref, body)
			got := ""
			if r != nil {
				got = r.Code
				if r.Status != 400 || r.Message == "" {
					t.Errorf("refusal %+v: want status 400 and a message", r)
				}
			}
			if got != tc.want {
				t.Errorf("CheckManifestWrite(%v, %q, %q) = %v, want code %q", tc.put, tc.repo, tc.ref, r, tc.want)
			}
		})
	}
}

func TestPublicRead(t *testing.T) {
	public := []string{"pause", "e2e-test-images/"}
	for _, tc := range []struct {
		method, path string
		want         bool
	}{
		{"GET", "/v2/pause/manifests/3.10.2", true},
		{"HEAD", "/v2/pause/manifests/3.10.2", true},
		{"GET", "/v2/pause/blobs/sha256:abc", true},
		{"GET", "/v2/e2e-test-images/agnhost/manifests/2.66.1", true},
		{"GET", "/v2/e2e-test-images/manifests/x", false}, // the prefix names repositories below it
		{"GET", "/v2/pause2/manifests/1", false},
		{"GET", "/v2/portside/hello/manifests/1.0", false}, // private
		{"PUT", "/v2/pause/manifests/3.10.2", false},       // pushing needs a credential
		{"POST", "/v2/pause/blobs/uploads/", false},
		{"DELETE", "/v2/pause/manifests/3.10.2", false},
		{"GET", "/v2/", false},         // the ping stays authenticated
		{"GET", "/v2/_catalog", false}, // and the catalog
		{"GET", "/v2/pause/tags/list", false},
		{"GET", "/v2/pause/manifests/", false},
		{"GET", "/v2/PAUSE/manifests/1", false}, // outside the grammar
		{"GET", "/v2/../pause/manifests/1", false},
	} {
		if got := publicRead(tc.method, tc.path, public); got != tc.want {
			t.Errorf("publicRead(%s %s) = %v, want %v", tc.method, tc.path, got, tc.want)
		}
	}
	if publicRead("GET", "/v2/pause/manifests/1", nil) {
		t.Error("no public prefixes: a pull without a credential was allowed")
	}
}

func TestReadAllowed(t *testing.T) {
	repos := []string{"team-a/", "shared/base"}
	for _, tc := range []struct {
		path string
		want bool
	}{
		{"/v2/", true}, // the ping: clients send it before every pull
		{"/v2/team-a/app/manifests/1.0", true},
		{"/v2/team-a/app/blobs/sha256:abc", true},
		{"/v2/team-a/app/tags/list", true},
		{"/v2/team-a/deep/er/app/manifests/1.0", true},
		{"/v2/shared/base/manifests/1.0", true},
		{"/v2/shared/base2/manifests/1.0", false}, // a name, not a prefix
		{"/v2/shared/base/x/manifests/1.0", false},
		{"/v2/team-a/manifests/1.0", false}, // the prefix names repositories below it
		{"/v2/team-ab/app/manifests/1.0", false},
		{"/v2/team-b/app/manifests/1.0", false},
		{"/v2/_catalog", false}, // names every repository
		{"/v2/team-a/app/tags/other", false},
		{"/v2/team-a/app/blobs/uploads/x", false}, // uploads are writes, and not by digest
		{"/v2/team-a/app/referrers/sha256:abc", false},
		{"/v2/team-a/app/manifests/", false},
		{"/v2/TEAM-A/app/manifests/1", false},
		{"/v2/team-a/../team-b/manifests/1", false},
		{"/other", false},
	} {
		if got := ReadAllowed(tc.path, repos); got != tc.want {
			t.Errorf("ReadAllowed(%s) = %v, want %v", tc.path, got, tc.want)
		}
	}
	if !ReadAllowed("/v2/_catalog", nil) || !ReadAllowed("/v2/anything/manifests/1", nil) {
		t.Error("a credential not narrowed was refused a read")
	}
}

func TestManifestBlobs(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"OCI image", `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"digest":"sha256:c"},"layers":[{"digest":"sha256:l1"},{"digest":"sha256:l2"}]}`,
			[]string{"sha256:c", "sha256:l1", "sha256:l2"}},
		{"Docker schema 2", `{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json","config":{"digest":"sha256:c"},"layers":[{"digest":"sha256:l"}]}`,
			[]string{"sha256:c", "sha256:l"}},
		{"OCI artifact", `{"mediaType":"application/vnd.oci.artifact.manifest.v1+json","blobs":[{"digest":"sha256:b"}],"subject":{"digest":"sha256:m"}}`,
			[]string{"sha256:b"}}, // subject is a manifest, not a blob
		{"Docker schema 1", `{"schemaVersion":1,"fsLayers":[{"blobSum":"sha256:a"}]}`, []string{"sha256:a"}},
		{"index: manifests, not blobs", `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"digest":"sha256:m"}]}`, nil},
		{"not JSON", `not a manifest`, nil},
		{"empty digests skipped", `{"config":{"digest":""},"layers":[{}]}`, nil},
		// An extension field of an odd shape, or a key of another case
		// (encoding/json would match it), leaves the rest indexed.
		{"extension field of an odd shape", `{"schemaVersion":2,"config":{"digest":"sha256:c"},"layers":[{"digest":"sha256:l"}],"blobs":"x"}`,
			[]string{"sha256:c", "sha256:l"}},
		{"a key of another case", `{"schemaVersion":2,"config":{"digest":"sha256:c"},"layers":[{"digest":"sha256:l"}],"Layers":{"note":"x"}}`,
			[]string{"sha256:c", "sha256:l"}},
		{"an odd layer entry", `{"config":{"digest":"sha256:c"},"layers":[7,{"digest":"sha256:l"}]}`, []string{"sha256:c", "sha256:l"}},
	} {
		if got := ManifestBlobs([]byte(tc.body)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: ManifestBlobs = %v, want %v", tc.name, got, tc.want)
		}
	}
}
