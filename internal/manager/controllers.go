package manager

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/portside-io/portside/pkg/cloud"
)

// ControllerContext is what a controller is started with.
type ControllerContext struct {
	Client    kubernetes.Interface
	Informers informers.SharedInformerFactory
	Cloud     cloud.Provider
	Options   *Options
	// Recorder returns an event recorder for a component name.
	Recorder func(component string) record.EventRecorder
	// Metrics is where controllers register their metrics.
	Metrics prometheus.Registerer
	// ClusterUID is the UID of namespace kube-system ("" when unreadable):
	// the cluster's identity on cloud tags.
	ClusterUID types.UID
}

// Controller is a plugin of the manager.
type Controller struct {
	// Name is the upstream name, e.g. cloud-node-controller.
	Name    string
	Aliases []string
	// ClientName is the ServiceAccount (kube-system) whose client the
	// controller writes with under --use-service-account-credentials:
	// upstream's names, so the apiserver's bootstrap roles apply.
	ClientName string
	// DisabledByDefault keeps the controller out of '*': it runs only when
	// --controllers names it, as kube-controller-manager's
	// ControllersDisabledByDefault (e.g. bootstrapsigner). For controllers
	// upstream's CCM does not have, so that '*' starts what upstream's does.
	DisabledByDefault bool
	// Start starts the controller in the background until ctx is done. It
	// returns skip (with the reason) when the provider lacks what the
	// controller needs.
	Start func(ctx context.Context, cc *ControllerContext) (skip string, err error)
}

func (c Controller) matches(name string) bool {
	return c.Name == name || slices.Contains(c.Aliases, name)
}

// EnabledControllers applies --controllers to the known controllers: '*'
// enables all but those DisabledByDefault, 'name' (or an alias) enables
// one, '-name' disables one (a disable wins).
func EnabledControllers(flags []string, known []Controller) ([]Controller, error) {
	find := func(name string) (Controller, bool) {
		for _, c := range known {
			if c.matches(name) {
				return c, true
			}
		}
		return Controller{}, false
	}
	star := false
	enabled, disabled := map[string]bool{}, map[string]bool{}
	for _, f := range flags {
		f = strings.TrimSpace(f)
		switch {
		case f == "*":
			star = true
		case strings.HasPrefix(f, "-"):
			c, ok := find(f[1:])
			if !ok {
				return nil, unknownController(f[1:], known)
			}
			disabled[c.Name] = true
		default:
			c, ok := find(f)
			if !ok {
				return nil, unknownController(f, known)
			}
			enabled[c.Name] = true
		}
	}
	var out []Controller
	for _, c := range known {
		if !disabled[c.Name] && (enabled[c.Name] || (star && !c.DisabledByDefault)) {
			out = append(out, c)
		}
	}
	return out, nil
}

func unknownController(name string, known []Controller) error {
	var names []string
	for _, c := range known {
		n := c.Name
		if c.DisabledByDefault {
			n += " (disabled by default)"
		}
		names = append(names, n)
		names = append(names, c.Aliases...)
	}
	sort.Strings(names)
	return fmt.Errorf("--controllers: unknown controller %q; known controllers and aliases: %s", name, strings.Join(names, ", "))
}
