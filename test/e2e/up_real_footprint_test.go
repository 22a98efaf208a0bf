package e2e

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/localcloud/machine"
	"github.com/portside-io/portside/internal/proc"
)

// nodeFootprint is one real node's idle cost over a window: RSS at its
// end and CPU over it, for the node agents (kubelet, containerd,
// kube-proxy: issue 32's per-node target) and for every process of the
// machine (its init, shims, pods too).
type nodeFootprint struct {
	machine           string
	agentsRSS, allRSS int64 // bytes
	// agentsPSS is the agents' proportional set size: pages shared with
	// other processes (the same binaries' pages on every node) counted in
	// shares, so it is what one more node costs the machine.
	agentsPSS              int64
	agentsCPU, allCPU      float64 // share of one core over the window
	agents                 map[string]int64
	processes, agentsFound int
}

// nodeAgents are what the per-node target counts.
var nodeAgents = []string{"kubelet", "containerd", "kube-proxy"}

// measureNodeFootprints samples every machine of the environment at data
// (their records, machine.json, under its cloud's directory) over window.
func measureNodeFootprints(tb testing.TB, data string, window time.Duration) []nodeFootprint {
	var dirs []string
	_ = filepath.WalkDir(data, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "machine.json" {
			dirs = append(dirs, filepath.Dir(p))
		}
		return nil
	})
	if len(dirs) == 0 {
		tb.Fatalf("no machine records (machine.json) under %s", data)
	}
	slices.Sort(dirs)
	type sample struct{ cpu map[int]float64 }
	take := func() []sample {
		var out []sample
		for _, d := range dirs {
			pids, err := machine.PIDs(d)
			if err != nil {
				tb.Fatal(err)
			}
			s := sample{cpu: map[int]float64{}}
			for _, pid := range pids {
				s.cpu[pid] = proc.CPUSeconds(pid)
			}
			out = append(out, s)
		}
		return out
	}
	before := take()
	time.Sleep(window)
	var out []nodeFootprint
	for i, d := range dirs {
		pids, err := machine.PIDs(d)
		if err != nil {
			tb.Fatal(err)
		}
		f := nodeFootprint{machine: filepath.Base(d), agents: map[string]int64{}, processes: len(pids)}
		for _, pid := range pids {
			rss, name := proc.RSS(pid), procComm(pid)
			// A process that started within the window counts from zero.
			cpu := (proc.CPUSeconds(pid) - before[i].cpu[pid]) / window.Seconds()
			f.allRSS += rss
			f.allCPU += cpu
			if slices.Contains(nodeAgents, name) {
				f.agents[name] += rss
				f.agentsRSS += rss
				f.agentsPSS += proc.PSS(pid)
				f.agentsCPU += cpu
			}
		}
		f.agentsFound = len(f.agents)
		out = append(out, f)
	}
	return out
}

func procComm(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return strings.TrimSpace(string(b))
}
