// Package version reports what this build of Portside is. The Makefile sets
// Version, Commit and BuildDate with -ldflags -X.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set at build time by the Makefile.
var (
	Version   = "v0.0.0-dev"
	Commit    = "unknown"
	BuildDate = "unknown"
)

// Info is the version of this binary.
type Info struct {
	Version            string `json:"version"`
	Commit             string `json:"commit"`
	BuildDate          string `json:"buildDate"`
	GoVersion          string `json:"goVersion"`
	KubernetesLibaries string `json:"kubernetesLibraries"`
}

// Get returns the version of this binary.
func Get() Info {
	return Info{
		Version:            Version,
		Commit:             Commit,
		BuildDate:          BuildDate,
		GoVersion:          runtime.Version(),
		KubernetesLibaries: kubernetesLibraries(),
	}
}

// String is the human-readable form printed by `portside version`.
func (i Info) String() string {
	return fmt.Sprintf("portside %s\n  commit:               %s\n  build date:           %s\n  go:                   %s\n  kubernetes libraries: %s\n",
		i.Version, i.Commit, i.BuildDate, i.GoVersion, i.KubernetesLibaries)
}

// kubernetesLibraries is the k8s.io/client-go version compiled in, read from
// the module build info so it can never drift from go.mod.
func kubernetesLibraries() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, dep := range bi.Deps {
		if dep.Path == "k8s.io/client-go" {
			if dep.Replace != nil {
				return dep.Replace.Version
			}
			return dep.Version
		}
	}
	return "unknown"
}
