package cloud

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
)

// Factory creates a provider from its config file contents (nil when no
// --cloud-config was given).
type Factory func(ctx context.Context, config io.Reader) (Provider, error)

var (
	registryMu sync.RWMutex
	registry   = map[string]Factory{}
)

// Register makes a provider available by name. It returns an error when the
// name is empty or already taken.
func Register(name string, factory Factory) error {
	if name == "" || factory == nil {
		return fmt.Errorf("cloud: Register needs a name and a factory")
	}
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[name]; dup {
		return fmt.Errorf("cloud: provider %q is already registered", name)
	}
	registry[name] = factory
	return nil
}

// MustRegister is Register for init functions; it panics on error.
func MustRegister(name string, factory Factory) {
	if err := Register(name, factory); err != nil {
		panic(err)
	}
}

// Registered lists the registered provider names, sorted.
func Registered() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// New creates the named provider, reading its config from configPath when
// it is not empty. Errors say which provider or file is wrong and what exists.
func New(ctx context.Context, name, configPath string) (Provider, error) {
	registryMu.RLock()
	factory, ok := registry[name]
	registryMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("unknown cloud provider %q: registered providers are %v", name, Registered())
	}
	var config io.Reader
	if configPath != "" {
		f, err := os.Open(configPath)
		if err != nil {
			return nil, fmt.Errorf("cloud provider %q: cannot read --cloud-config: %w", name, err)
		}
		defer func() { _ = f.Close() }()
		config = f
	}
	p, err := factory(ctx, config)
	if err != nil {
		return nil, fmt.Errorf("cloud provider %q: %w", name, err)
	}
	return p, nil
}
