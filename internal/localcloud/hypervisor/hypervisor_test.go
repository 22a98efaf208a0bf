package hypervisor

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/portside-io/portside/pkg/localcloud/api"
)

func TestIndexOf(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want int
		err  bool
	}{
		{"i-00000001", 1, false},
		{"i-0000002a", 42, false},
		{"i-zz", 0, true},
		{"00000001", 0, true},
		{"", 0, true},
	} {
		got, err := indexOf(tc.id)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("indexOf(%q) = %d, %v; want %d, error %v", tc.id, got, err, tc.want, tc.err)
		}
	}
}

func TestFirstIPv4(t *testing.T) {
	inst := api.Instance{ID: "i-1", Addresses: []api.Address{
		{Type: api.AddressHostname, Address: "node-1"},
		{Type: api.AddressInternalIP, Address: "fd01::2"},
		{Type: api.AddressInternalIP, Address: "198.18.0.2"},
	}}
	if a, err := firstIPv4(inst); err != nil || a.String() != "198.18.0.2" {
		t.Errorf("firstIPv4 = %v, %v", a, err)
	}
	if _, err := firstIPv4(api.Instance{ID: "i-2"}); err == nil {
		t.Error("an instance without IPv4 got an address")
	}
}

func TestCheckUserData(t *testing.T) {
	good := `{"bin":{"Kubelet":"/b/kubelet","KubeProxy":"/b/kube-proxy","Containerd":"/b/containerd","Shim":"/b/shim","Runc":"/usr/sbin/runc","CNIDir":"/b/cni"},` +
		`"apiServer":"https://198.18.0.1:6443","caFile":"/d/ca.crt","bootstrapToken":"abcdef.0123456789abcdef","clusterCIDR":"10.244.0.0/16","sandboxImage":"registry.k8s.io/pause:3.10.2"}`
	for _, tc := range []struct {
		name, ud, err string
	}{
		{"good", good, ""},
		{"not JSON", "#cloud-config", "user data is not a machine boot configuration"},
		{"unknown field", strings.Replace(good, `"caFile"`, `"caFil"`, 1), "unknown field"},
		{"no token", strings.Replace(good, `"bootstrapToken":"abcdef.0123456789abcdef",`, "", 1), "bootstrapToken is empty"},
		{"relative binary", strings.Replace(good, `"/b/kubelet"`, `"kubelet"`, 1), "want an absolute path"},
	} {
		_, err := CheckUserData(tc.ud)
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.err)
		}
	}
}

func TestMachineAddr6(t *testing.T) {
	subnet6 := netip.MustParsePrefix("fd12:3456:789a::/64")
	inst := func(addrs ...string) api.Instance {
		i := api.Instance{ID: "i-1", Addresses: []api.Address{{Type: api.AddressHostname, Address: "node-1"}}}
		for _, a := range addrs {
			i.Addresses = append(i.Addresses, api.Address{Type: api.AddressInternalIP, Address: a})
		}
		return i
	}
	for _, tc := range []struct {
		name    string
		inst    api.Instance
		subnet6 netip.Prefix
		want    string
		err     string
	}{
		{"IPv4 only, IPv4 VPC", inst("198.18.0.2"), netip.Prefix{}, "invalid IP", ""},
		{"IPv4 only, dual-stack VPC", inst("198.18.0.2"), subnet6, "invalid IP", ""},
		{"dual-stack", inst("198.18.0.2", "fd12:3456:789a::2"), subnet6, "fd12:3456:789a::2", ""},
		{"IPv6 address, IPv4 VPC", inst("198.18.0.2", "fd12:3456:789a::2"), netip.Prefix{}, "", "the cloud's VPC is IPv4 only (start it with --vpc-uplink6"},
		{"IPv6 address outside the subnet", inst("198.18.0.2", "fd00:1::2"), subnet6, "", "outside the VPC's IPv6 subnet fd12:3456:789a::/64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := machineAddr6(tc.inst, tc.subnet6)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || a.String() != tc.want {
				t.Errorf("= %v, %v; want %s", a, err, tc.want)
			}
		})
	}
}
