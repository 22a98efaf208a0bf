package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/portside-io/portside/internal/devenv"
)

// maxBackendsShown keeps a 200-node load balancer on one readable line;
// -o json has them all.
const maxBackendsShown = 5

// printStatus writes the report as tables (nodes, then load balancers) or JSON.
func printStatus(w io.Writer, rep *devenv.Report, output string) error {
	switch output {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	case "", "table":
	default:
		return fmt.Errorf("--output %q is not supported: use table or json", output)
	}
	fmt.Fprintf(w, "portside up (pid %d), data in %s\nkube-apiserver %s, local cloud %s\n", rep.PID, rep.DataDir, rep.APIServer, rep.Cloud)
	if rep.CCMLeader != "" {
		fmt.Fprintf(w, "ccm leader: %s\n", rep.CCMLeader)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tZONE\tINTERNAL-IP\tPROVIDER-ID\tPOD-CIDR\tROUTE\tINITIALIZED")
	for _, n := range rep.Nodes {
		init := "yes"
		if !n.Initialized {
			init = "no: " + n.Reason
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, dash(n.Zone), dash(n.InternalIP), dash(n.ProviderID),
			dash(strings.Join(n.PodCIDRs, ",")), dash(n.Route), init)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if len(rep.LoadBalancers) == 0 {
		fmt.Fprintln(w, "no load balancers")
	} else {
		fmt.Fprintln(tw, "LOAD BALANCER\tSERVICE\tVIP\tPORTS\tSTATE\tBACKENDS")
		for _, lb := range rep.LoadBalancers {
			state := lb.State
			if lb.Path != "" {
				state += " (" + lb.Path + ")"
			}
			if lb.Message != "" {
				state += ": " + lb.Message
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", lb.Name, dash(lb.Service), dash(strings.Join(lb.VIPs, ",")), strings.Join(lb.Ports, ","), state, backends(lb))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(rep.NetworkProxy) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	fmt.Fprintln(tw, "NETWORK PROXY\tROLE\tSERVES\tADDRESS\tREADY")
	for _, p := range rep.NetworkProxy {
		serves, ready := "cluster egress", "yes"
		switch {
		case p.Role == "agent" && p.Nodes == 0:
			serves = p.Zone // a gateway agent: what it routes, no node
		case p.Role == "agent":
			serves = fmt.Sprintf("%s (%d node%s)", p.Zone, p.Nodes, map[bool]string{true: "", false: "s"}[p.Nodes == 1])
		}
		if !p.Ready {
			ready = "no: " + p.Reason
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.ID, p.Role, serves, dash(p.Address), ready)
	}
	return tw.Flush()
}

// backends summarizes backend health: "3/3 healthy (node-1, node-2, node-3)",
// naming the unhealthy ones and why when some are.
func backends(lb devenv.LBStatus) string {
	healthy, names, sick := 0, []string{}, []string{}
	for _, b := range lb.Backends {
		switch {
		case b.Healthy && !b.Draining:
			healthy++
			names = append(names, b.Name)
		case b.Draining:
			sick = append(sick, b.Name+" draining")
		default:
			why := b.LastError
			if why == "" {
				why = "not checked yet"
			}
			sick = append(sick, b.Name+" unhealthy: "+why)
		}
	}
	out := fmt.Sprintf("%d/%d healthy", healthy, len(lb.Backends))
	if len(sick) > 0 {
		return out + " (" + listSome(sick) + ")"
	}
	if len(names) > 0 {
		out += " (" + listSome(names) + ")"
	}
	return out
}

func listSome(items []string) string {
	if len(items) <= maxBackendsShown {
		return strings.Join(items, ", ")
	}
	return strings.Join(items[:maxBackendsShown], ", ") + fmt.Sprintf(", … %d more", len(items)-maxBackendsShown)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
