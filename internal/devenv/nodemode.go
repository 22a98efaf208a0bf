package devenv

import "fmt"

// chooseNodeMode decides `up`'s node mode from --node-mode and --nodes
// and why this machine cannot run real nodes ("" when it can): the mode
// used, the line to print when auto fell back to simulated, or an error
// naming what is wrong and what to change.
func chooseNodeMode(mode string, nodes int, unavailable string) (string, string, error) {
	switch mode {
	case "", NodeModeSimulated:
		return NodeModeSimulated, "", nil
	case NodeModeAuto:
		if unavailable != "" {
			return NodeModeSimulated, "simulated nodes: " + unavailable, nil
		}
		if nodes > MaxRealNodes {
			return NodeModeSimulated, fmt.Sprintf("simulated nodes: --nodes %d is more than %d real machines (use --node-mode=real with fewer nodes for real ones)", nodes, MaxRealNodes), nil
		}
		return NodeModeReal, "", nil
	case NodeModeReal:
		if unavailable != "" {
			return "", "", fmt.Errorf("--node-mode=real: %s", unavailable)
		}
		if nodes > MaxRealNodes {
			return "", "", fmt.Errorf("--nodes %d: at most %d real nodes (each is a machine running containerd, kubelet and kube-proxy); use --node-mode=simulated for more", nodes, MaxRealNodes)
		}
		return NodeModeReal, "", nil
	}
	return "", "", fmt.Errorf("--node-mode %q: want %s, %s or %s", mode, NodeModeAuto, NodeModeReal, NodeModeSimulated)
}

// DefaultZones is how many of the local cloud's zones `up` spreads its
// nodes over unless --zones says otherwise: two show zone-aware behaviour
// (load balancers, volumes, the network proxy's agents) with few nodes.
const DefaultZones = 2

// chooseZones picks the first want zones of the cloud's region (0: the
// default), or says what is wrong: more zones than the region has, or
// than there are nodes to put in them (a zone without nodes would look
// like a zone to the cluster's topology-aware features while nothing in
// it could serve).
func chooseZones(region string, zones []string, want, nodes int) ([]string, error) {
	if want == 0 {
		want = max(1, min(DefaultZones, nodes, len(zones)))
	}
	switch {
	case len(zones) == 0:
		return nil, fmt.Errorf("the local cloud's region %s lists no zones", region)
	case want < 0:
		return nil, fmt.Errorf("--zones %d: give 1 to %d (the zones of region %s: %v)", want, len(zones), region, zones)
	case want > len(zones):
		return nil, fmt.Errorf("--zones %d: the local cloud's region %s has %d zones (%v); give at most %d", want, region, len(zones), zones, len(zones))
	case want > nodes:
		return nil, fmt.Errorf("--zones %d with --nodes %d would leave a zone without nodes: give --nodes %d or more, or fewer --zones", want, nodes, want)
	}
	return zones[:want], nil
}

// checkInstall says what is wrong with --install for the node mode chosen
// and --ccm-binary.
func checkInstall(install, mode, ccmBinary string) error {
	switch install {
	case "", InstallHost:
		return nil
	case InstallChart, InstallManifests, InstallPrepare:
		if mode != NodeModeReal {
			return fmt.Errorf("--install=%s is for the CCM as pods, which only real nodes can run: use --node-mode=real (or auto on a machine that allows real nodes), or --install=%s", install, InstallHost)
		}
		if ccmBinary != "" {
			return fmt.Errorf("--install=%s installs Portside's CCM from its image; --ccm-binary runs another CCM on the host: give one of them", install)
		}
		return nil
	}
	return fmt.Errorf("--install %q: want %s (the CCM as processes of up), %s (the Helm chart's pods on the nodes), %s (deploy/ccm's, with kubectl) or %s (no CCM: the chart's install prepared for yours)", install, InstallHost, InstallChart, InstallManifests, InstallPrepare)
}
