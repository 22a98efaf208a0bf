package devenv

import (
	"testing"

	"github.com/portside-io/portside/pkg/localcloud/api"
)

func TestLBPath(t *testing.T) {
	proxied := []api.Listener{{Protocol: "TCP", Port: 80, BackendPort: 30080}}
	for _, tc := range []struct {
		name      string
		listeners []api.Listener
		health    []api.ListenerHealth
		want      string
	}{
		{"the proxy alone", proxied, []api.ListenerHealth{{Protocol: "TCP", Address: "127.100.0.2:80", Serving: true}}, ""},
		{"a listener on the kernel path", proxied, []api.ListenerHealth{{Protocol: "TCP", Serving: true}, {Protocol: "UDP", Kernel: true}}, LBPathKernel},
		{"no health read: said to be nothing", proxied, nil, ""},
		{"a listener without a backend port: routed", []api.Listener{{Protocol: "TCP", Port: 80}}, []api.ListenerHealth{{Protocol: "TCP", Serving: true}}, LBPathRouted},
	} {
		if got := lbPath(tc.listeners, tc.health); got != tc.want {
			t.Errorf("%s: lbPath = %q, want %q", tc.name, got, tc.want)
		}
	}
}
