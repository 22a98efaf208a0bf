// Command coredns is CoreDNS (github.com/coredns/coredns, the version
// hack/tools/versions.env pins as COREDNS_VERSION) with the plugins a
// cluster's DNS uses here: those of kubeadm's default Corefile (errors,
// health, ready, kubernetes, prometheus, forward, cache, loop, reload,
// loadbalance) and log, hosts and template. Upstream supports this
// selection (its plugin.cfg); the whole set would pull every cloud's SDK
// (route53, azure, clouddns) and tracing libraries into `make tools` for
// plugins nobody runs here. The plugins' order in a server block is
// still upstream's (core/dnsserver's generated directive list).
package main

import (
	_ "github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
	_ "github.com/coredns/coredns/plugin/template"
)

func main() { coremain.Run() }
