package credentialprovider

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

// execPlugin runs a plugin command as the kubelet does, with req on stdin.
func execPlugin(t *testing.T, argv []string, req string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin = strings.NewReader(req)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

func req(image, extra string) string {
	return `{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"` + image + `"` + extra + `}`
}

// TestPluginRefusesBadInputAndCloudFailures: every failure is one clear
// line on stderr and a non-zero exit, nothing on stdout, and no secret in
// the text; the same for the lean binary and `portside credential-provider`.
func TestPluginRefusesBadInputAndCloudFailures(t *testing.T) {
	testenv.ControlPlane(t)
	c := startCloud(t, 3600e9)
	const token = "eyJhbGciOiJSUzI1NiIsImtpZCI6IngifQ.eyJpc3MiOiJodHRwczovL2V2aWwifQ.c2VjcmV0LXNpZ25hdHVyZQ"
	image := c.registry + "/portside/hello:1.0"
	flags := []string{"--cloud-provider=local", "--cloud-config=" + c.config}
	for _, argv := range [][]string{
		{filepath.Join(binaries(t), "portside-credential-provider")},
		{filepath.Join(binaries(t), "portside"), "credential-provider"},
	} {
		argv = append(argv, flags...)
		t.Run(filepath.Base(argv[0]), func(t *testing.T) {
			out, errOut, code := execPlugin(t, argv, req(image, ""))
			if code != 0 || !strings.Contains(out, `"cacheKeyType":"Registry"`) || !(strings.Contains(out, `"cacheDuration":"54m5`) || strings.Contains(out, `"cacheDuration":"55m0s"`)) {
				t.Fatalf("a good request: exit %d, stdout %q, stderr %q", code, out, errOut)
			}
			for _, tc := range []struct{ name, req, want string }{
				{"empty stdin", "", "no request on stdin"},
				{"not JSON", "hello", "not a JSON CredentialProviderRequest"},
				{"wrong apiVersion", `{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1alpha1","image":"` + image + `"}`,
					`apiVersion "credentialprovider.kubelet.k8s.io/v1alpha1" is not supported`},
				{"image of no registry of the cloud", req("registry.example.com/app:1", ""), "no registry of this provider serves image registry.example.com/app:1"},
				{"token from an untrusted issuer", req(image, `,"serviceAccountToken":"`+token+`"`), "not trusted"},
			} {
				out, errOut, code := execPlugin(t, argv, tc.req)
				if code == 0 || out != "" || !strings.Contains(errOut, tc.want) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
					t.Errorf("%s: exit %d, stdout %q, stderr %q; want one line containing %q", tc.name, code, out, errOut, tc.want)
				}
				if strings.Contains(errOut, "c2VjcmV0LXNpZ25hdHVyZQ") {
					t.Errorf("%s: the token is in stderr: %q", tc.name, errOut)
				}
			}
			if _, errOut, code := execPlugin(t, append(argv[:len(argv):len(argv)], "--cloud-config=/nonexistent/cloud.yaml"), req(image, "")); code == 0 || !strings.Contains(errOut, "/nonexistent/cloud.yaml") {
				t.Errorf("a missing cloud config: exit %d, stderr %q", code, errOut)
			}
		})
	}

	// The cloud failing every credential call: retried, then a clear error.
	ctx := context.Background()
	if err := c.client.SetFaults(ctx, api.Faults{Rules: []api.FaultRule{{Method: "POST", PathPrefix: "/v1/credentials", ErrorRate: 1}}}); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := execPlugin(t, append([]string{filepath.Join(binaries(t), "portside-credential-provider")}, flags...), req(image, ""))
	if code == 0 || out != "" || !strings.Contains(errOut, "after 3 attempts") {
		t.Fatalf("cloud failing: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if err := c.client.SetFaults(ctx, api.Faults{}); err != nil {
		t.Fatal(err)
	}
}
