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
