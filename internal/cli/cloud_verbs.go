package cli

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/portside-io/portside/pkg/localcloud/api"
)

// verb builds a subcommand that calls the API with a client.
func verb(f *cloudFlags, use, short string, args cobra.PositionalArgs, run func(cmd *cobra.Command, c cloudCall, args []string) error) *cobra.Command {
	return &cobra.Command{
		Use: use, Short: short, Args: args,
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			return run(cmd, cloudCall{f: f, c: c, w: cmd.OutOrStdout()}, a)
		},
	}
}

func addresses(as []api.Address) string {
	var out []string
	for _, a := range as {
		if a.Type == api.AddressInternalIP || a.Type == api.AddressExternalIP {
			out = append(out, a.Address)
		}
	}
	return strings.Join(out, ",")
}

func newCloudInstancesCommand(f *cloudFlags) *cobra.Command {
	cmd := &cobra.Command{Use: "instances", Aliases: []string{"instance", "i"}, Short: "Instances (virtual machines)"}
	list := verb(f, "list", "List instances", cobra.NoArgs, func(cmd *cobra.Command, c cloudCall, _ []string) error {
		list, err := c.c.ListInstances(cmd.Context(), "")
		if err != nil {
			return err
		}
		return f.print(c.w, list, "ID\tNAME\tZONE\tTYPE\tSTATE\tADDRESSES", func(tw io.Writer) {
			for _, i := range list {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", i.ID, i.Name, i.Zone, i.Type, i.State, addresses(i.Addresses))
			}
		})
	})
	var req api.CreateInstanceRequest
	var userDataFile string
	create := verb(f, "create NAME", "Create an instance", cobra.ExactArgs(1), func(cmd *cobra.Command, c cloudCall, args []string) error {
		req.Name = args[0]
		if userDataFile != "" {
			data, err := os.ReadFile(userDataFile)
			if err != nil {
				return fmt.Errorf("--user-data-file: %w", err)
			}
			req.UserData = string(data)
		}
		inst, err := c.c.CreateInstance(cmd.Context(), req)
		if err != nil {
			return err
		}
		return c.one(inst, fmt.Sprintf("created instance %s (%s) in %s: %s", inst.ID, inst.Name, inst.Zone, addresses(inst.Addresses)))
	})
	create.Flags().StringVar(&req.Zone, "zone", "zone-a", "zone")
	create.Flags().StringVar(&req.Type, "type", "", "instance type (default: the first)")
	create.Flags().StringSliceVar(&req.PodCIDRs, "pod-cidr", nil, "pod CIDRs the cloud assigns to the instance (one per family), for --cidr-allocator-type=CloudAllocator")
	create.Flags().BoolVar(&req.IPv6, "ipv6", false, "also give an IPv6 address")
	create.Flags().StringToStringVar(&req.Labels, "label", nil, "labels of the instance (key=value; repeatable)")
	create.Flags().StringVar(&userDataFile, "user-data-file", "", "boot the instance as a real machine with this user data (a cloud run with --machines=real; `up` writes its nodes' as <data dir>/nodes/user-data.json)")
	byID := func(use, short string, call func(cmd *cobra.Command, c cloudCall, id string) error) *cobra.Command {
		return verb(f, use+" ID", short, cobra.ExactArgs(1), func(cmd *cobra.Command, c cloudCall, args []string) error {
			return call(cmd, c, args[0])
		})
	}
	del := byID("delete", "Delete an instance", func(cmd *cobra.Command, c cloudCall, id string) error {
		if err := c.c.DeleteInstance(cmd.Context(), id); err != nil {
			return err
		}
		return c.one(map[string]string{"deleted": id}, "deleted instance "+id)
	})
	stop := byID("stop", "Stop an instance", func(cmd *cobra.Command, c cloudCall, id string) error {
		inst, err := c.c.StopInstance(cmd.Context(), id)
		if err != nil {
			return err
		}
		return c.one(inst, "stopped instance "+id)
	})
	start := byID("start", "Start a stopped instance", func(cmd *cobra.Command, c cloudCall, id string) error {
		inst, err := c.c.StartInstance(cmd.Context(), id)
		if err != nil {
			return err
		}
		return c.one(inst, "started instance "+id)
	})
	types := verb(f, "types", "List instance types", cobra.NoArgs, func(cmd *cobra.Command, c cloudCall, _ []string) error {
		list, err := c.c.InstanceTypes(cmd.Context())
		if err != nil {
			return err
		}
		return f.print(c.w, list, "NAME\tCPUS\tMEMORY", func(tw io.Writer) {
			for _, t := range list {
				fmt.Fprintf(tw, "%s\t%d\t%dMi\n", t.Name, t.CPUs, t.MemoryMB)
			}
		})
	})
	cmd.AddCommand(list, create, del, stop, start, types)
	return cmd
}

func newCloudLBsCommand(f *cloudFlags) *cobra.Command {
	cmd := &cobra.Command{Use: "lbs", Aliases: []string{"lb", "load-balancers"}, Short: "Load balancers"}
	var cluster string
	list := verb(f, "list", "List load balancers", cobra.NoArgs, func(cmd *cobra.Command, c cloudCall, _ []string) error {
		list, err := c.c.ListLoadBalancers(cmd.Context(), cluster)
		if err != nil {
			return err
		}
		return f.print(c.w, list, "NAME\tCLUSTER\tSERVICE\tVIPS\tPORTS\tBACKENDS\tSTATE", func(tw io.Writer) {
			for _, lb := range list {
				var ports []string
				for _, l := range lb.Listeners {
					ports = append(ports, fmt.Sprintf("%d/%s->%d", l.Port, l.Protocol, l.BackendPort))
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", lb.Name, lb.Cluster, lb.Tags["kubernetes.io/service-name"],
					strings.Join(lb.VIPs, ","), strings.Join(ports, ","), len(lb.Backends), lb.State)
			}
		})
	})
	list.Flags().StringVar(&cluster, "cluster", "", "only load balancers of this cluster")
	health := verb(f, "health NAME", "Show backend health as the data plane sees it", cobra.ExactArgs(1), func(cmd *cobra.Command, c cloudCall, args []string) error {
		h, err := c.c.LoadBalancerHealth(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		return f.print(c.w, h, "BACKEND\tADDRESS\tHEALTHY\tDRAINING\tCONNS\tLAST ERROR", func(tw io.Writer) {
			for _, b := range h.Backends {
				fmt.Fprintf(tw, "%s\t%s\t%v\t%v\t%d\t%s\n", b.Name, b.Address, b.Healthy, b.Draining, b.ActiveConns, b.LastError)
			}
		})
	})
	get := verb(f, "get NAME", "Show a load balancer", cobra.ExactArgs(1), func(cmd *cobra.Command, c cloudCall, args []string) error {
		lb, err := c.c.GetLoadBalancer(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		f.output = "json"
		return c.one(lb, "")
	})
	del := verb(f, "delete NAME", "Delete a load balancer", cobra.ExactArgs(1), func(cmd *cobra.Command, c cloudCall, args []string) error {
		if err := c.c.DeleteLoadBalancer(cmd.Context(), args[0]); err != nil {
			return err
		}
		return c.one(map[string]string{"deleted": args[0]}, "deleted load balancer "+args[0])
	})
	cmd.AddCommand(list, get, health, del)
	return cmd
}

func newCloudRoutesCommand(f *cloudFlags) *cobra.Command {
	cmd := &cobra.Command{Use: "routes", Aliases: []string{"route"}, Short: "Pod-network routes"}
	var cluster string
	list := verb(f, "list", "List routes", cobra.NoArgs, func(cmd *cobra.Command, c cloudCall, _ []string) error {
		list, err := c.c.ListRoutes(cmd.Context(), cluster)
		if err != nil {
			return err
		}
		return f.print(c.w, list, "NAME\tCLUSTER\tDESTINATION\tTARGET NODE\tINSTANCE\tBLACKHOLE", func(tw io.Writer) {
			for _, r := range list {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%v\n", r.Name, r.Cluster, r.DestinationCIDR, r.TargetNode, r.TargetInstance, r.Blackhole)
			}
		})
	})
	list.Flags().StringVar(&cluster, "cluster", "", "only routes of this cluster")
	cmd.AddCommand(list)
	return cmd
}

func newCloudVolumesCommand(f *cloudFlags) *cobra.Command {
	cmd := &cobra.Command{Use: "volumes", Aliases: []string{"volume"}, Short: "Volumes"}
	list := verb(f, "list", "List volumes", cobra.NoArgs, func(cmd *cobra.Command, c cloudCall, _ []string) error {
		list, err := c.c.ListVolumes(cmd.Context())
		if err != nil {
			return err
		}
		return f.print(c.w, list, "ID\tNAME\tZONES\tREGION\tSIZE", func(tw io.Writer) {
			for _, v := range list {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%dGi\n", v.ID, v.Name, strings.Join(v.Zones, ","), v.Region, v.SizeGiB)
			}
		})
	})
	var req api.CreateVolumeRequest
	create := verb(f, "create NAME", "Create a volume", cobra.ExactArgs(1), func(cmd *cobra.Command, c cloudCall, args []string) error {
		req.Name = args[0]
		v, err := c.c.CreateVolume(cmd.Context(), req)
		if err != nil {
			return err
		}
		return c.one(v, fmt.Sprintf("created volume %s (%s) in %s", v.ID, v.Name, strings.Join(v.Zones, ",")))
	})
	create.Flags().StringSliceVar(&req.Zones, "zones", []string{"zone-a"}, "zones of the volume")
	create.Flags().IntVar(&req.SizeGiB, "size", 10, "size in GiB")
	del := verb(f, "delete ID", "Delete a volume", cobra.ExactArgs(1), func(cmd *cobra.Command, c cloudCall, args []string) error {
		if err := c.c.DeleteVolume(cmd.Context(), args[0]); err != nil {
			return err
		}
		return c.one(map[string]string{"deleted": args[0]}, "deleted volume "+args[0])
	})
	cmd.AddCommand(list, create, del)
	return cmd
}

func newCloudZonesCommand(f *cloudFlags) *cobra.Command {
	return verb(f, "zones", "List regions and zones", cobra.NoArgs, func(cmd *cobra.Command, c cloudCall, _ []string) error {
		list, err := c.c.Regions(cmd.Context())
		if err != nil {
			return err
		}
		return f.print(c.w, list, "REGION\tZONES", func(tw io.Writer) {
			for _, r := range list {
				fmt.Fprintf(tw, "%s\t%s\n", r.Name, strings.Join(r.Zones, ","))
			}
		})
	})
}

func newCloudFaultsCommand(f *cloudFlags) *cobra.Command {
	cmd := &cobra.Command{Use: "faults", Short: "Inject faults into the cloud's API (error rate, latency, 429s)"}
	get := verb(f, "get", "Show the fault rules in force", cobra.NoArgs, func(cmd *cobra.Command, c cloudCall, _ []string) error {
		fs, err := c.c.Faults(cmd.Context())
		if err != nil {
			return err
		}
		return f.print(c.w, fs, "METHOD\tPATH PREFIX\tERROR RATE\tTHROTTLE RATE\tRETRY AFTER\tLATENCY", func(tw io.Writer) {
			for _, r := range fs.Rules {
				fmt.Fprintf(tw, "%s\t%s\t%v\t%v\t%ds\t%dms\n", r.Method, r.PathPrefix, r.ErrorRate, r.ThrottleRate, r.RetryAfterSeconds, r.LatencyMillis)
			}
		})
	})
	var rule api.FaultRule
	set := verb(f, "set", "Replace the fault rules with one rule", cobra.NoArgs, func(cmd *cobra.Command, c cloudCall, _ []string) error {
		if err := c.c.SetFaults(cmd.Context(), api.Faults{Rules: []api.FaultRule{rule}}); err != nil {
			return err
		}
		return c.one(rule, fmt.Sprintf("faults set: %s %s*", rule.Method, rule.PathPrefix))
	})
	set.Flags().StringVar(&rule.Method, "method", "*", "HTTP method, or * for all")
	set.Flags().StringVar(&rule.PathPrefix, "path", "", "path prefix, e.g. /v1/load-balancers (default: all)")
	set.Flags().Float64Var(&rule.ErrorRate, "error-rate", 0, "fraction of requests answered 500")
	set.Flags().Float64Var(&rule.ThrottleRate, "throttle-rate", 0, "fraction of requests answered 429")
	set.Flags().IntVar(&rule.RetryAfterSeconds, "retry-after", 1, "Retry-After seconds of 429 answers")
	set.Flags().IntVar(&rule.LatencyMillis, "latency", 0, "added latency in milliseconds")
	clear := verb(f, "clear", "Remove all fault rules", cobra.NoArgs, func(cmd *cobra.Command, c cloudCall, _ []string) error {
		if err := c.c.SetFaults(cmd.Context(), api.Faults{}); err != nil {
			return err
		}
		return c.one(api.Faults{}, "faults cleared")
	})
	cmd.AddCommand(get, set, clear)
	return cmd
}
