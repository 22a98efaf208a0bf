package devenv

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// layout names the files of an environment's data directory. Each part
// keeps its state in its own subdirectory, so a second `portside up` with
// the same directory finds the cluster, the cloud and its machines again.
type layout struct{ dir string }

func newLayout(dataDir string) (layout, error) {
	if dataDir == "" {
		return layout{}, errors.New("--data-dir must not be empty")
	}
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return layout{}, err
	}
	l := layout{dir: abs}
	if err := prepareDataDir(l.dir); err != nil {
		return layout{}, err
	}
	for _, d := range []string{l.logs(), l.cloud(), l.ccm()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return layout{}, fmt.Errorf("data directory: %w", err)
		}
	}
	return l, nil
}

func (l layout) pidFile() string      { return filepath.Join(l.dir, pidFileName) }
func (l layout) logs() string         { return filepath.Join(l.dir, "logs") }
func (l layout) controlPlane() string { return filepath.Join(l.dir, "controlplane") }
func (l layout) kubeconfig() string   { return filepath.Join(l.controlPlane(), "kubeconfig") }
func (l layout) cloud() string        { return filepath.Join(l.dir, "cloud") }
func (l layout) network() string      { return filepath.Join(l.dir, "network.json") }
func (l layout) ccm() string          { return filepath.Join(l.dir, "ccm") }
func (l layout) cloudConfig() string  { return filepath.Join(l.ccm(), "cloud.yaml") }
func (l layout) netproxy() string     { return filepath.Join(l.dir, "netproxy") }

// credentialProvider holds the kubelet's credential provider config, plugin
// directory and the plugin's cloud config.
func (l layout) credentialProvider() string { return filepath.Join(l.dir, "credential-provider") }

// netproxySocket is the proxy server's unix socket: in the data directory,
// or, when that path would be longer than a socket path may be (107
// bytes), in the temporary directory under a name derived from it.
func (l layout) netproxySocket() string {
	if p := filepath.Join(l.netproxy(), "s.sock"); len(p) <= maxSocketPath {
		return p
	}
	sum := sha256.Sum256([]byte(l.dir))
	return filepath.Join(os.TempDir(), fmt.Sprintf("portside-proxy-%x.sock", sum[:6]))
}
func (l layout) netproxyStateFile() string { return filepath.Join(l.netproxy(), "state.json") }
