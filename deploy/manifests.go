package deploy

import (
	"embed"
	"io/fs"
	"path"
)

//go:embed ccm/*.yaml
var ccmFiles embed.FS

//go:embed network-proxy/proxy-agent.yaml
var proxyAgentManifest []byte

// ProxyAgentManifest returns deploy/network-proxy/proxy-agent.yaml: the
// agents' ServiceAccount and DaemonSet.
func ProxyAgentManifest() []byte { return proxyAgentManifest }

// CCMManifests returns deploy/ccm's manifests by file name, as
// `kubectl apply -f deploy/ccm` reads them.
func CCMManifests() (map[string][]byte, error) {
	entries, err := fs.ReadDir(ccmFiles, "ccm")
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, e := range entries {
		data, err := ccmFiles.ReadFile(path.Join("ccm", e.Name()))
		if err != nil {
			return nil, err
		}
		out[e.Name()] = data
	}
	return out, nil
}
