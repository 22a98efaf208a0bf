package testenv

import (
	"fmt"
	"testing"
)

// TestRunningControllers: the watch's reading of a CCM log.
func TestRunningControllers(t *testing.T) {
	own := `I1 run.go:1] "Became leader; starting controllers" lease="cloud-controller-manager" identity="a"` + "\n" +
		`I1 run.go:2] "Controller started" controller="cloud-node-controller"` + "\n"
	mig := `I1 leader.go:1] "Became leader; starting controllers" lease="m" identity="a"` + "\n" +
		`I1 run.go:2] "Controller started" controller="service-lb-controller"` + "\n" +
		`I1 run.go:2] "Controller not started" controller="node-route-controller" reason="x"` + "\n" +
		`I1 run.go:2] "Controller started" controller="cloud-node-lifecycle-controller"` + "\n"
	for _, c := range []struct {
		name, log string
		want      map[string]string
	}{
		{"own lease only", own, map[string]string{}},
		{"migration lease", own + mig, map[string]string{"service-lb-controller": "m", "cloud-node-lifecycle-controller": "m"}},
		{"migration lease released", own + mig + `"Shut down; lease released" lease="m" identity="a"`, map[string]string{}},
		{"own lease released", own + mig + `"Shut down; lease released" lease="cloud-controller-manager" identity="a"`,
			map[string]string{"service-lb-controller": "m", "cloud-node-lifecycle-controller": "m"}},
		{"all under the own lease", own + `"Controller started" controller="node-route-controller"`, map[string]string{"node-route-controller": "cloud-controller-manager"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := RunningControllers(c.log); fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
}
