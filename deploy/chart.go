package deploy

import (
	"embed"
	"io/fs"
)

//go:embed all:helm/portside
var chartFiles embed.FS

// Chart is the Helm chart deploy/helm/portside as files (Chart.yaml at its
// root), for programs that install it (`portside up --install=chart`).
func Chart() fs.FS {
	sub, err := fs.Sub(chartFiles, "helm/portside")
	if err != nil {
		panic(err) // the embedded path is fixed at build time
	}
	return sub
}
