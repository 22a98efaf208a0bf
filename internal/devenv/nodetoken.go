package devenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/portside-io/portside/internal/localcloud/server"
)

// nodePullTokenFile holds the token nodes' credential plugin uses: a
// scoped token that may only ask for pull credentials, so a node (or
// whoever reads a node's files) cannot delete load balancers, mint push
// credentials or set faults with it, as it could with the admin token.
const nodePullTokenFile = "node-pull-token"

// clusterCCMTokenFile holds the token of a CCM that runs in the cluster
// (`up --install=chart`): its cloud config is a Secret any cluster admin
// can read, so it gets what a CCM does and no more (load balancers,
// routes, reading instances and volumes), not the admin token.
const clusterCCMTokenFile = "cluster-ccm-token"

// clusterCCMScopes are that token's scopes.
var clusterCCMScopes = []string{server.ScopeRead, server.ScopeLoadBalancers, server.ScopeRoutes}

// writeNodeToken makes sure the cloud directory holds the nodes' pull-only
// token (kept across runs, 0600) and a scoped-token file granting it only
// registry-pull-credentials, and returns both paths. `up` owns that
// scoped-token file: it is rewritten on every run.
func writeNodeToken(cloudDir string) (tokenFile, scopedFile string, err error) {
	tokenFile = filepath.Join(cloudDir, nodePullTokenFile)
	tok, err := server.EnsureToken(tokenFile)
	if err != nil {
		return "", "", fmt.Errorf("the nodes' pull-only token: %w", err)
	}
	ccmTok, err := server.EnsureToken(filepath.Join(cloudDir, clusterCCMTokenFile))
	if err != nil {
		return "", "", fmt.Errorf("the in-cluster CCM's token: %w", err)
	}
	scopedFile = filepath.Join(cloudDir, server.ScopedTokenFile)
	content := "# Written by `portside up` on every run: the nodes' credential plugin token (" + nodePullTokenFile + ")\n" +
		"# and the in-cluster CCM's (" + clusterCCMTokenFile + ", `up --install=chart`).\n" +
		tok + " " + server.ScopeRegistryPullCredentials + "\n" +
		ccmTok + " " + strings.Join(clusterCCMScopes, ",") + "\n"
	// Through a new 0600 file and a rename: writing over an existing file
	// would keep its mode, which the cloud refuses if others may read it.
	tmp, err := os.CreateTemp(cloudDir, server.ScopedTokenFile+".*")
	if err != nil {
		return "", "", err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.WriteString(content); err != nil {
		_ = tmp.Close()
		return "", "", err
	}
	if err := tmp.Close(); err != nil {
		return "", "", err
	}
	if err := os.Rename(tmp.Name(), scopedFile); err != nil {
		return "", "", err
	}
	return tokenFile, scopedFile, nil
}
