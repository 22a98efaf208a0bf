// Package reference generates the reference pages of docs/reference that
// are not the command tree: metrics.md, from the components' Prometheus
// registries, and events.md, from the controllers' reason constants.
// hack/gen-reference writes them; tests fail when they are stale.
package reference

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/portside-io/portside/internal/controllers/node"
	"github.com/portside-io/portside/internal/controllers/nodeipam"
	"github.com/portside-io/portside/internal/controllers/nodelifecycle"
	"github.com/portside-io/portside/internal/controllers/route"
	"github.com/portside-io/portside/internal/controllers/service"
	"github.com/portside-io/portside/internal/controllers/servingcsr"
	"github.com/portside-io/portside/internal/manager"
	"github.com/portside-io/portside/internal/netproxy/agent"
	"github.com/portside-io/portside/internal/netproxy/server"
	"github.com/portside-io/portside/internal/webhook"
	"github.com/portside-io/portside/internal/webhooks/pvlabel"
)

// A metricSource registers the metrics of one package on a registry, the
// way the component builds them.
type metricSource struct {
	pkg      string
	register func(prometheus.Registerer) error
}

// A metricComponent is a command that exposes metrics on its /metrics.
type metricComponent struct {
	command string
	intro   string
	sources []metricSource
}

// exampleProvider names the cloud API metrics, which are named for the
// provider; the page shows <provider> in its place.
const exampleProvider = "local"

func ok(f func(prometheus.Registerer)) func(prometheus.Registerer) error {
	return func(reg prometheus.Registerer) error { f(reg); return nil }
}

// metricComponents lists every command's metrics, by package.
func metricComponents() []metricComponent {
	return []metricComponent{
		{
			command: "portside ccm",
			intro: "The cloud controller manager, on its `/metrics` (`--secure-port`). " +
				"The controllers' metrics are registered when the controller starts (a controller not enabled, or skipped, has none).",
			sources: []metricSource{
				{"internal/manager", ok(manager.RegisterWorkqueueMetrics)},
				{"internal/manager", ok(func(reg prometheus.Registerer) { manager.RegisterCloudAPIMetrics(reg, exampleProvider) })},
				{"internal/controllers/node", ok(node.RegisterMetrics)},
				{"internal/controllers/nodelifecycle", ok(nodelifecycle.RegisterMetrics)},
				{"internal/controllers/service", ok(service.RegisterMetrics)},
				{"internal/controllers/nodeipam", ok(func(reg prometheus.Registerer) {
					// The IPAM gauges come from the allocator's state when
					// scraped: one cluster CIDR stands for it here.
					nodeipam.RegisterMetrics(reg, func() map[string][2]int { return map[string][2]int{placeholder(0): {0, 256}} })
				})},
				{"internal/controllers/route", ok(route.RegisterMetrics)},
				{"internal/controllers/servingcsr", ok(servingcsr.RegisterMetrics)},
			},
		},
		{
			command: "portside ccm --webhooks=…",
			intro: "The admission webhooks the CCM serves (`--webhooks`), on the CCM's `/metrics`. " +
				"`portside webhook serve` serves the same webhooks without any `/metrics`: it registers none of these.",
			sources: []metricSource{
				{"internal/webhook", ok(webhook.RegisterMetrics)},
				{"internal/webhooks/pvlabel", pvlabel.RegisterMetrics},
			},
		},
		{
			command: "portside proxy-server",
			intro:   "The network proxy server, on `/metrics` of its health port (`--health-port`) and its admin port (`--admin-port`).",
			sources: []metricSource{{"internal/netproxy/server", ok(server.RegisterMetrics)}},
		},
		{
			command: "portside proxy-agent",
			intro:   "The network proxy agent, on `/metrics` of its health port (`--health-server-port`) and its admin port (`--admin-server-port`).",
			sources: []metricSource{{"internal/netproxy/agent", ok(agent.RegisterMetrics)}},
		},
	}
}

// Metric is one metric family as a registry exposes it.
type Metric struct {
	Name        string
	Type        string   // counter, gauge, histogram, summary, untyped
	Labels      []string // variable labels, in the collector's order
	ConstLabels []string // name="value"
	Help        string
	Package     string
}

// placeholder is the value given to variable label i when a vector is
// touched; no real label value looks like it.
func placeholder(i int) string { return placeholderPrefix + strconv.Itoa(i) }

const placeholderPrefix = "\x1fportside-reference-label-"

// maxLabels bounds the variable labels a vector is tried with.
const maxLabels = 16

// gatherMetrics registers src on a fresh registry and returns its metric
// families.
//
// prometheus.Desc has no accessors for its labels, and parsing
// (*Desc).String() would depend on a debugging format. Instead: every
// collector registered is recorded; each vector (which Gather leaves out
// while it has no child) is touched with one child, found by trying 0..16
// placeholder label values with GetMetricWithLabelValues, which only
// accepts the right number; then Gather gives, from the public data model,
// each family's name, help, type and label pairs. The placeholder values
// give back the variable labels' order (Gather sorts label pairs by name);
// the other pairs are constant labels. A described metric that Gather does
// not return (a collector with nothing to collect) is an error, so that no
// metric is left out of the page silently.
func gatherMetrics(src metricSource) ([]Metric, error) {
	reg := prometheus.NewPedanticRegistry()
	rec := &recordingRegisterer{reg: reg}
	if err := src.register(rec); err != nil {
		return nil, fmt.Errorf("%s: %w", src.pkg, err)
	}
	described := map[string]bool{}
	for _, c := range rec.collectors {
		if err := touch(c); err != nil {
			return nil, fmt.Errorf("%s: %w", src.pkg, err)
		}
		ch := make(chan *prometheus.Desc, 64)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			described[d.String()] = true
		}
	}
	families, err := reg.Gather()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", src.pkg, err)
	}
	var out []Metric
	for _, f := range families {
		m := Metric{Name: f.GetName(), Help: f.GetHelp(), Type: strings.ToLower(f.GetType().String()), Package: src.pkg}
		if len(f.Metric) > 0 {
			m.Labels, m.ConstLabels = labels(f.Metric[0].Label)
		}
		out = append(out, m)
	}
	if len(out) != len(described) {
		names := make([]string, len(out))
		for i, m := range out {
			names[i] = m.Name
		}
		return nil, fmt.Errorf("%s: %d metrics described but %d gathered (%s): a collector collected nothing", src.pkg, len(described), len(out), strings.Join(names, ", "))
	}
	return out, nil
}

// labels splits a metric's label pairs into the variable labels, in the
// order of their placeholder values, and the constant ones.
func labels(pairs []*dto.LabelPair) (variable, constant []string) {
	type pos struct {
		i    int
		name string
	}
	var vs []pos
	for _, p := range pairs {
		if rest, ok := strings.CutPrefix(p.GetValue(), placeholderPrefix); ok {
			if i, err := strconv.Atoi(rest); err == nil {
				vs = append(vs, pos{i, p.GetName()})
				continue
			}
		}
		constant = append(constant, fmt.Sprintf("%s=%q", p.GetName(), p.GetValue()))
	}
	slices.SortFunc(vs, func(a, b pos) int { return a.i - b.i })
	for _, v := range vs {
		variable = append(variable, v.name)
	}
	return variable, constant
}

// touch gives a vector one child, so that Gather returns it.
func touch(c prometheus.Collector) error {
	var get func([]string) error
	switch v := c.(type) {
	case *prometheus.CounterVec:
		get = func(lv []string) error { _, err := v.GetMetricWithLabelValues(lv...); return err }
	case *prometheus.GaugeVec:
		get = func(lv []string) error { _, err := v.GetMetricWithLabelValues(lv...); return err }
	case *prometheus.HistogramVec:
		get = func(lv []string) error { _, err := v.GetMetricWithLabelValues(lv...); return err }
	case *prometheus.SummaryVec:
		get = func(lv []string) error { _, err := v.GetMetricWithLabelValues(lv...); return err }
	default:
		return nil // a metric without labels, or a collector that makes its own
	}
	var lv []string
	for n := 0; n <= maxLabels; n++ {
		if get(lv) == nil {
			return nil
		}
		lv = append(lv, placeholder(n))
	}
	return fmt.Errorf("a %T takes none of 0..%d label values", c, maxLabels)
}

// recordingRegisterer records the collectors registered through it.
type recordingRegisterer struct {
	reg        prometheus.Registerer
	collectors []prometheus.Collector
}

func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	if err := r.reg.Register(c); err != nil {
		return err
	}
	r.collectors = append(r.collectors, c)
	return nil
}

func (r *recordingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func (r *recordingRegisterer) Unregister(c prometheus.Collector) bool { return r.reg.Unregister(c) }

// upstreamName says whether a metric keeps an upstream project's name:
// Portside's own are prefixed portside_, or carry portside_ in an upstream
// namespace (konnectivity_network_proxy_server_portside_...).
func upstreamName(name string) bool {
	return !strings.HasPrefix(name, "portside_") && !strings.Contains(name, "_portside_")
}

// displayName shows the cloud API metrics with <provider> for the provider.
func displayName(name string) string {
	if rest, ok := strings.CutPrefix(name, "cloudprovider_"+exampleProvider+"_"); ok {
		return "cloudprovider_<provider>_" + rest
	}
	return name
}

// WriteMetricsReference writes docs/reference/metrics.md.
func WriteMetricsReference(w io.Writer) error {
	var b strings.Builder
	b.WriteString("# Metrics reference\n\n")
	b.WriteString("Generated by `go run ./hack/gen-reference` from the metrics each component registers on a fresh\n" +
		"Prometheus registry (`internal/reference`); `make test` fails when it is stale.\n\n")
	b.WriteString("**Upstream name** marks a metric that keeps the name, labels and meaning of upstream's\n" +
		"(k8s.io/cloud-provider, the in-tree cloud providers, konnectivity), so that dashboards and alerts\n" +
		"written for upstream work; the others are Portside's own (`portside_…`).\n" +
		"`portside ccm` also exposes the Go runtime and process collectors (`go_*`, `process_*`), left out here.\n" +
		"client-go's workqueue metrics are exported as `portside_ccm_workqueue_*` (upstream's CCM: `workqueue_*`);\n" +
		"no leader-election or client-go REST client metrics are registered.\n")
	for _, c := range metricComponents() {
		fmt.Fprintf(&b, "\n## `%s`\n\n%s\n\n", c.command, c.intro)
		b.WriteString("| metric | type | labels | meaning | package |\n|---|---|---|---|---|\n")
		for _, src := range c.sources {
			ms, err := gatherMetrics(src)
			if err != nil {
				return err
			}
			for _, m := range ms {
				labels := make([]string, len(m.Labels))
				for i, l := range m.Labels {
					labels[i] = "`" + l + "`"
				}
				for _, l := range m.ConstLabels {
					labels = append(labels, "`"+l+"` (constant)")
				}
				help := strings.ReplaceAll(strings.ReplaceAll(m.Help, "\n", " "), "|", "\\|")
				if upstreamName(m.Name) {
					help = "**Upstream name.** " + help
				}
				if displayName(m.Name) != m.Name {
					help += " Named for `--cloud-provider` (`" + m.Name + "` with the local cloud)."
				}
				fmt.Fprintf(&b, "| `%s` | %s | %s | %s | `%s` |\n", displayName(m.Name), m.Type, strings.Join(labels, ", "), help, m.Package)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
