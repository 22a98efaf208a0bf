package conformance

import "testing"

// The table of docs/credential-provider.md ("Which images a provider gets").
func TestMatchImage(t *testing.T) {
	for _, c := range []struct {
		pattern, image string
		want           bool
	}{
		{"127.0.0.1:5000", "127.0.0.1:5000/portside/hello:1.0", true},
		{"127.0.0.1:5000", "127.0.0.1:5001/portside/hello:1.0", false},
		{"127.0.0.1:5000", "127.0.0.1/portside/hello:1.0", false},
		{"127.0.0.1", "127.0.0.1:5000/portside/hello:1.0", false},
		{"127.*.*.*:5000", "127.10.0.1:5000/portside/hello:1.0", true},
		{"*.io", "registry.k8s.io/pause:3.10", false},
		{"*.k8s.io", "registry.k8s.io/pause:3.10", true},
		{"*.*.io", "registry.k8s.io/pause:3.10", true},
		{"reg*.k8s.io", "registry.k8s.io/pause:3.10", true},
		{"registry.example.com/team", "registry.example.com/team/app:1", true},
		{"registry.example.com/team", "registry.example.com/teamx/app:1", true},
		{"registry.example.com/team", "registry.example.com/other/app:1", false},
		{"docker.io", "nginx", false},
		{"docker.io", "docker.io/library/nginx:1.27", true},
	} {
		got, err := MatchImage(c.pattern, c.image)
		if err != nil || got != c.want {
			t.Errorf("MatchImage(%q, %q) = %v, %v; want %v", c.pattern, c.image, got, err, c.want)
		}
	}
	if _, err := MatchImage("[.io", "x.io"); err == nil {
		t.Errorf("a malformed glob is not an error")
	}
}
