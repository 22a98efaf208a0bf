package webhook

import (
	"strings"
	"testing"
)

func FuzzDecodeReview(f *testing.F) {
	for _, s := range []string{
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u1","operation":"CREATE","object":{"a":1}}}`,
		`{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"u1"}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`,
		`{"request":{"uid":"u","uid":"v"}}`,
		`{"request":{"object":{"kind":[1,2,{"x":null}]}}}`,
		`[]`, `null`, `{`, ``, "\xff",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		review, apiVersion, err := DecodeReview(body)
		if err != nil {
			if review != nil || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q with review %v", err, review)
			}
			return
		}
		if review.Request == nil || review.Request.UID == "" || (apiVersion != APIVersionV1 && apiVersion != APIVersionV1beta1) {
			t.Fatalf("accepted %q: %+v %s", body, review, apiVersion)
		}
		if _, err := encodeReview(apiVersion, nil); err != nil {
			t.Fatal(err)
		}
	})
}
