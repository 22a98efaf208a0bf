// Package hostsnap takes a snapshot of the host state real nodes could
// change (network links, addresses, routes of every table, rules, network
// namespaces, mounts, cgroups, the sysctls kubelet and kube-proxy care
// about, the firewall rulesets), so a test can prove that `up` then `down`
// left the machine as it found it.
package hostsnap

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Snapshot is the host state as sorted lines per part.
type Snapshot map[string][]string

// Sysctls are host-wide settings that kubelet, kube-proxy or a VPC could
// write, read from the host's own namespaces.
var Sysctls = []string{
	"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding", "net/ipv4/conf/all/route_localnet",
	"net/bridge/bridge-nf-call-iptables", "net/netfilter/nf_conntrack_max",
	"net/netfilter/nf_conntrack_tcp_timeout_established", "net/netfilter/nf_conntrack_tcp_timeout_close_wait",
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes", "fs/inotify/max_user_instances", "fs/inotify/max_user_watches",
}

// Take reads the snapshot. Parts whose tool is absent (nft, iptables-save)
// are recorded as absent, which is itself compared.
func Take() (Snapshot, error) {
	s := Snapshot{}
	for name, args := range map[string][]string{
		"links":    {"-o", "link", "show"},
		"addrs":    {"-o", "addr", "show"},
		"routes4":  {"-4", "route", "show", "table", "all"},
		"routes6":  {"-6", "route", "show", "table", "all"},
		"rules4":   {"-4", "rule", "show"},
		"rules6":   {"-6", "rule", "show"},
		"netns":    {"netns", "list"},
		"neighbor": nil, // not compared: the kernel changes it on its own
	} {
		if args == nil {
			continue
		}
		out, err := exec.Command("ip", args...).Output()
		if err != nil {
			return nil, fmt.Errorf("ip %s: %w", strings.Join(args, " "), err)
		}
		s[name] = lines(out, name == "links")
	}
	for _, fw := range [][]string{{"nft", "list", "ruleset"}, {"iptables-save"}, {"ip6tables-save"}} {
		if _, err := exec.LookPath(fw[0]); err != nil {
			s[fw[0]] = []string{"(absent)"}
			continue
		}
		out, err := exec.Command(fw[0], fw[1:]...).Output()
		if err != nil {
			s[fw[0]] = []string{"(error: " + err.Error() + ")"}
			continue
		}
		s[fw[0]] = stripComments(lines(out, false))
	}
	for _, k := range Sysctls {
		b, err := os.ReadFile(filepath.Join("/proc/sys", k))
		if err != nil {
			s["sysctl"] = append(s["sysctl"], k+" (absent)")
			continue
		}
		s["sysctl"] = append(s["sysctl"], k+"="+strings.TrimSpace(string(b)))
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	for _, l := range lines(mounts, false) {
		// mount ID and parent ID change on remounts of the same thing; the
		// mount point, source and options are what matter.
		f := strings.Fields(l)
		if len(f) > 4 {
			s["mounts"] = append(s["mounts"], strings.Join(f[3:], " "))
		}
	}
	slices.Sort(s["mounts"])
	cg, err := cgroupDirs("/sys/fs/cgroup")
	if err != nil {
		return nil, err
	}
	s["cgroups"] = cg
	return s, nil
}

// lines splits output into sorted, non-empty lines; for links, the
// counters and the operational state that the kernel changes alone are cut.
func lines(out []byte, links bool) []string {
	var ls []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" {
			continue
		}
		if links {
			if i := strings.Index(l, "\\"); i > 0 {
				l = l[:i]
			}
		}
		ls = append(ls, l)
	}
	slices.Sort(ls)
	return ls
}

// stripComments drops iptables-save's "# Generated/Completed" lines and
// counters, which change with time, not with state.
func stripComments(ls []string) []string {
	out := ls[:0]
	for _, l := range ls {
		if strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasPrefix(l, ":") {
			if i := strings.Index(l, " ["); i > 0 {
				l = l[:i]
			}
		}
		out = append(out, l)
	}
	return out
}

// cgroupDirs lists every cgroup directory under root, in every hierarchy.
func cgroupDirs(root string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) || os.IsPermission(err) {
				return nil // a cgroup removed while walking
			}
			return err
		}
		if d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	slices.Sort(out)
	return out, err
}

// Diff describes what differs between two snapshots ("" when equal).
func Diff(before, after Snapshot) string {
	var b strings.Builder
	var parts []string
	for k := range before {
		parts = append(parts, k)
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			parts = append(parts, k)
		}
	}
	slices.Sort(parts)
	for _, k := range parts {
		gone, added := setDiff(before[k], after[k]), setDiff(after[k], before[k])
		if len(gone) == 0 && len(added) == 0 {
			continue
		}
		fmt.Fprintf(&b, "%s:\n", k)
		for _, l := range gone {
			fmt.Fprintf(&b, "  - %s\n", l)
		}
		for _, l := range added {
			fmt.Fprintf(&b, "  + %s\n", l)
		}
	}
	return b.String()
}

func setDiff(a, b []string) []string {
	in := make(map[string]int, len(b))
	for _, x := range b {
		in[x]++
	}
	var out []string
	for _, x := range a {
		if in[x] > 0 {
			in[x]--
			continue
		}
		out = append(out, x)
	}
	return out
}

// Mentioning keeps only the lines that contain one of subs: what one
// environment (its ID, its ranges) could have made, so two test packages
// running real nodes at once do not see each other's objects as leftovers.
func (s Snapshot) Mentioning(subs ...string) Snapshot {
	out := Snapshot{}
	for k, ls := range s {
		for _, l := range ls {
			for _, sub := range subs {
				if strings.Contains(l, sub) {
					out[k] = append(out[k], l)
					break
				}
			}
		}
	}
	return out
}
