// Package conformance is Portside's provider conformance suite: real
// scenarios run against any cluster whose cloud controller manager is
// Portside's or upstream's, with any provider (`portside conformance`).
// Each test declares the capabilities it needs and is skipped, with the
// reason, when the provider lacks one.
package conformance

import (
	"context"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/portside-io/portside/pkg/localcloud/client"
)

// Capability is something a test needs from the provider or the cluster.
type Capability string

// The capabilities tests declare (--capabilities takes these names).
const (
	Instances        Capability = "instances"
	InstanceDeletion Capability = "instance-deletion" // a hook can delete an instance (--instance-hook or the local cloud)
	LoadBalancers    Capability = "load-balancers"
	LBUDP            Capability = "lb-udp"
	LBMixedProtocols Capability = "lb-mixed-protocols"
	LBSourceRanges   Capability = "lb-source-ranges"
	LBHealthChecks   Capability = "lb-etp-local" // health checks of healthCheckNodePort for externalTrafficPolicy=Local
	LBDualStack      Capability = "lb-dual-stack"
	LBIPMode         Capability = "lb-ip-mode"
	LBReachable      Capability = "lb-reachable" // the runner can connect to load-balancer ingress addresses
	// LBWithoutNodePorts: Services with allocateLoadBalancerNodePorts false
	// are served (the local cloud with real machines routes their VIPs).
	// Not discovered: a provider cannot tell it (--extra-capabilities).
	LBWithoutNodePorts Capability = "lb-without-node-ports"
	Routes             Capability = "routes"
	Volumes            Capability = "volumes" // PV labels (the persistent-volume-label webhook)
	RegistryCreds      Capability = "registry-credentials"
	NetworkProxy       Capability = "network-proxy"
)

// AllCapabilities lists every capability, in documentation order.
var AllCapabilities = []Capability{Instances, InstanceDeletion, LoadBalancers, LBUDP, LBMixedProtocols, LBSourceRanges,
	LBHealthChecks, LBDualStack, LBIPMode, LBReachable, LBWithoutNodePorts, Routes, Volumes, RegistryCreds, NetworkProxy}

// Env is what tests run against.
type Env struct {
	Client     kubernetes.Interface
	RESTConfig *rest.Config
	// Capabilities the run may use; a test needing another is skipped.
	Capabilities map[Capability]bool
	// Cloud is the local cloud's API when the run was given it
	// (--cloud-endpoint/--cloud-data-dir); nil otherwise.
	Cloud *client.Client
	// InstanceHook, when set, is a command run with a Node's providerID as
	// its last argument that deletes the instance behind it.
	InstanceHook []string
	// ProviderName is the providerID scheme expected ("local" for the local
	// cloud): a Node's spec.providerID must start with "<name>://".
	ProviderName string
	// CredentialProvider: the kubelet credential provider round trip, when
	// configured (the plugin config and bin dir, and an image to pull).
	CredentialProviderConfig, CredentialProviderBinDir, CredentialProviderImage string
	// MaxWait, when set, caps every wait of every test (T.Eventually).
	MaxWait time.Duration
	// RunID names this run's objects (label conformance.portside.io/run).
	RunID string
	// Namespace is created for the run and deleted at its end.
	Namespace string
}

// RunLabel marks every object a run creates, so an interrupted run's
// objects can be found and removed (`portside conformance --cleanup`).
const RunLabel = "conformance.portside.io/run"

// Test is one scenario.
type Test struct {
	// Name is unique; --focus and --skip match it (regular expressions).
	Name string
	// Needs are the capabilities the test uses.
	Needs []Capability
	// Timeout bounds the whole test, its waits included.
	Timeout time.Duration
	// Run runs the scenario; it fails with t.Fatalf/t.Errorf.
	Run func(ctx context.Context, t *T)
}
