package cloud_test

import (
	"context"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"

	"github.com/portside-io/portside/pkg/cloud"
)

// staticCloud is the smallest useful provider: a fixed inventory of
// machines. It has instances and nothing else; Portside discovers that and
// runs only the controllers that need instances.
type staticCloud struct {
	machines map[string]cloud.InstanceMetadata // by node name
}

func (s *staticCloud) ProviderName() string                                   { return "static" }
func (s *staticCloud) Instances() (cloud.Instances, bool)                     { return s, true }
func (s *staticCloud) LoadBalancers() (cloud.LoadBalancers, bool)             { return nil, false }
func (s *staticCloud) Routes() (cloud.Routes, bool)                           { return nil, false }
func (s *staticCloud) Volumes() (cloud.Volumes, bool)                         { return nil, false }
func (s *staticCloud) RegistryCredentials() (cloud.RegistryCredentials, bool) { return nil, false }

func (s *staticCloud) lookup(n cloud.Node) (cloud.InstanceMetadata, error) {
	for name, md := range s.machines {
		if name == n.Name || (n.ProviderID != "" && md.ProviderID == n.ProviderID) {
			return md, nil
		}
	}
	return cloud.InstanceMetadata{}, fmt.Errorf("machine for node %q: %w", n.Name, cloud.ErrNotFound)
}

func (s *staticCloud) InstanceMetadata(_ context.Context, n cloud.Node) (*cloud.InstanceMetadata, error) {
	md, err := s.lookup(n)
	if err != nil {
		return nil, err
	}
	return &md, nil
}

func (s *staticCloud) InstanceExists(_ context.Context, n cloud.Node) (bool, error) {
	_, err := s.lookup(n)
	if cloud.IsNotFound(err) {
		return false, nil // only a positive "gone" may delete a Node
	}
	return err == nil, err
}

func (s *staticCloud) InstanceShutdown(context.Context, cloud.Node) (bool, error) { return false, nil }

// Example_minimalProvider registers a provider and creates it the way
// `portside ccm --cloud-provider=static` does.
func Example_minimalProvider() {
	cloud.MustRegister("static", func(_ context.Context, _ io.Reader) (cloud.Provider, error) {
		return &staticCloud{machines: map[string]cloud.InstanceMetadata{
			"rack1-node1": {
				ProviderID: cloud.ProviderID("static", "rack1-node1"), InstanceType: "r640", Zone: "rack1", Region: "dc1",
				Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.1.11"}},
			},
		}}, nil
	})

	p, err := cloud.New(context.Background(), "static", "")
	if err != nil {
		panic(err)
	}
	caps := cloud.Discover(p)
	fmt.Println("instances:", caps.Instances, "load balancers:", caps.LoadBalancers)

	inst, _ := p.Instances()
	md, _ := inst.InstanceMetadata(context.Background(), cloud.Node{Name: "rack1-node1"})
	fmt.Println(md.ProviderID, md.Zone, md.Addresses[0].Address)
	exists, _ := inst.InstanceExists(context.Background(), cloud.Node{Name: "decommissioned"})
	fmt.Println("decommissioned exists:", exists)
	// Output:
	// instances: true load balancers: false
	// static://rack1-node1 rack1 10.0.1.11
	// decommissioned exists: false
}
