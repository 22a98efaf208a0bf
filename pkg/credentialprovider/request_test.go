package credentialprovider

import (
	"strings"
	"testing"
)

func TestDecodeRequest(t *testing.T) {
	const token = "eyJhbGciOiJSUzI1NiJ9.secret-token-part.sig"
	for _, tc := range []struct {
		name, in  string
		image     string
		wantErr   string // substring; "" = success
		annotated bool
	}{
		{name: "kubelet request", in: `{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"127.0.0.1:5000/portside/hello:1.0"}`, image: "127.0.0.1:5000/portside/hello:1.0"},
		{name: "with token and annotations", in: `{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"r.example.com/a","serviceAccountToken":"` + token + `","serviceAccountAnnotations":{"a.example.com/role":"x"}}`, image: "r.example.com/a", annotated: true},
		{name: "unknown fields are ignored (newer kubelets)", in: `{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"r.example.com/a","future":1}`, image: "r.example.com/a"},
		{name: "trailing newline", in: "{\"kind\":\"CredentialProviderRequest\",\"apiVersion\":\"credentialprovider.kubelet.k8s.io/v1\",\"image\":\"r.example.com/a\"}\n", image: "r.example.com/a"},
		{name: "empty stdin", in: "", wantErr: "no request on stdin"},
		{name: "whitespace only", in: " \n", wantErr: "no request on stdin"},
		{name: "not JSON", in: "image: x", wantErr: "invalid JSON at byte"},
		{name: "cut short", in: `{"kind":"CredentialProviderRequest"`, wantErr: "cut short"},
		{name: "two objects", in: `{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"a.b/c"} {}`, wantErr: "data after the JSON object"},
		{name: "no apiVersion", in: `{"kind":"CredentialProviderRequest","image":"a.b/c"}`, wantErr: "no apiVersion"},
		{name: "v1beta1", in: `{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1beta1","image":"a.b/c"}`, wantErr: `apiVersion "credentialprovider.kubelet.k8s.io/v1beta1" is not supported: set apiVersion: credentialprovider.kubelet.k8s.io/v1`},
		{name: "wrong kind", in: `{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"a.b/c"}`, wantErr: `kind "CredentialProviderResponse"`},
		{name: "image missing", in: `{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1"}`, wantErr: "image is empty"},
		{name: "image wrong type", in: `{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":5}`, wantErr: `field "image" must be a string`},
		{name: "image with space", in: `{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"a.b/c d"}`, wantErr: "whitespace or control"},
		{name: "image with NUL", in: `{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"a.b/c\u0000"}`, wantErr: "whitespace or control"},
		{name: "image too long", in: `{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"a.b/` + strings.Repeat("x", 5000) + `"}`, wantErr: "bytes long"},
		{name: "absolute path", in: `{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"/etc/passwd"}`, wantErr: "not an image reference"},
		{name: "token of wrong type is not echoed", in: `{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"a.b/c","serviceAccountToken":["` + token + `"]}`, wantErr: `field "serviceAccountToken" must be a string`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := ReadRequest(strings.NewReader(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "secret-token-part") {
					t.Fatalf("error text contains the token: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if req.Image != tc.image || (len(req.ServiceAccountAnnotations) > 0) != tc.annotated {
				t.Fatalf("request = %+v", req)
			}
		})
	}
}

func TestReadRequestTooLarge(t *testing.T) {
	_, err := ReadRequest(strings.NewReader(strings.Repeat(" ", maxRequestBytes+1)))
	if err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("error = %v", err)
	}
}

// FuzzDecodeRequest: any input decodes or fails with an error; a decoded
// request is always valid.
func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(`{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"a.b/c"}`))
	f.Add([]byte(`{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"a.b/c","serviceAccountToken":"t","serviceAccountAnnotations":{"k":"v"}}`))
	f.Add([]byte(`{"image":"\u0000"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := DecodeRequest(data)
		if err != nil {
			return
		}
		if req.APIVersion != APIVersion || req.Kind != "CredentialProviderRequest" || validateImage(req.Image) != nil {
			t.Fatalf("accepted an invalid request: %+v", req)
		}
	})
}
