package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/portside-io/portside/internal/localcloud/dataplane"
	"github.com/portside-io/portside/internal/localcloud/localcloudtest"
	"github.com/portside-io/portside/internal/nodesim"
	"github.com/portside-io/portside/internal/proc"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

// BenchmarkServiceLoadBalancers: S LoadBalancer Services × N nodes, every
// load-balancer call taking 10 ms. Measured per contender: time until every
// Service has its ingress, then time for one added node to reach every load
// balancer, with cloud call counts (and the calls a no-op node update
// causes). PORTSIDE_BENCH_LB_SERVICES (1000) and PORTSIDE_BENCH_LB_NODES
// (500) set the scale; PORTSIDE_BENCH_SKIP_SLOW=1 skips upstream's defaults.
func BenchmarkServiceLoadBalancers(b *testing.B) {
	nNodes, nSvcs := envInt("PORTSIDE_BENCH_LB_NODES", 500), envInt("PORTSIDE_BENCH_LB_SERVICES", 1000)
	cfg := testenv.Config(b)
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	client := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	lc, stop, err := localcloudtest.StartWith(b.TempDir(), dataplane.Options{NoHealthChecks: true})
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	cloudCfg := filepath.Join(b.TempDir(), "cloud.yaml")
	if err := os.WriteFile(cloudCfg, []byte(fmt.Sprintf("endpoint: %s\ntoken: %s\n", lc.Endpoint, lc.Token)), 0o600); err != nil {
		b.Fatal(err)
	}
	// N nodes plus the one added in the second phase, each with its instance.
	specs := make([]nodesim.NodeSpec, nNodes+1)
	var failed atomic.Value
	workqueue.ParallelizeUntil(ctx, 16, nNodes+1, func(i int) {
		name := fmt.Sprintf("lb-node-%04d", i)
		inst, err := lc.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: name, Zone: "zone-a"})
		if err != nil {
			failed.Store(err)
			return
		}
		specs[i] = nodesim.NodeSpec{Name: name, NodeIPs: []string{inst.Addresses[0].Address}}
	})
	if err := failed.Load(); err != nil {
		b.Fatal(err)
	}
	sim := nodesim.New(client, 32)
	if err := sim.Register(ctx, specs[:nNodes]); err != nil {
		b.Fatal(err)
	}
	// Every write of a load balancer takes 10 ms, incremental backend
	// changes (PATCH, Portside's provider) as full ones (PUT).
	if err := lc.Client.SetFaults(ctx, api.Faults{Rules: []api.FaultRule{
		{Method: "PUT", PathPrefix: "/v1/load-balancers", LatencyMillis: 10},
		{Method: "PATCH", PathPrefix: "/v1/load-balancers", LatencyMillis: 10},
	}}); err != nil {
		b.Fatal(err)
	}
	contenders := []contender{
		{Name: "portside-defaults", Controller: "service", Workers: 16, QPS: 200, Burst: 400},
		{Name: "upstream-defaults", Controller: "service", Upstream: true, Workers: 1, QPS: 20, Burst: 30},
		{Name: "portside-equal", Controller: "service", Workers: 10, QPS: unthrottled, Burst: unthrottled},
		{Name: "upstream-equal", Controller: "service", Upstream: true, Workers: 10, QPS: unthrottled, Burst: unthrottled},
	}
	results := map[string]lbResult{}
	for _, c := range contenders {
		if c.Name == "upstream-defaults" && os.Getenv("PORTSIDE_BENCH_SKIP_SLOW") == "1" {
			continue
		}
		c.Kubeconfig, c.CloudConfig = testenv.Kubeconfig(b), cloudCfg
		r := runLBContender(b, client, lc, sim, c, nSvcs, specs[nNodes])
		results[c.Name] = r
		b.Logf("%-18s %d Services × %d nodes: all ingress %6.1fs (%.2f cloud calls/Service); node added → all LBs %6.2fs (%d cloud calls); no-op node update: %d cloud calls; peak RSS %5.1f MB",
			c.Name, nSvcs, nNodes, r.ingressS, r.ingressCalls, r.nodeAddS, r.nodeAddCalls, r.noopCalls, r.peakRSSMB)
		b.ReportMetric(r.ingressS, c.Name+"-ingress-s")
		b.ReportMetric(r.nodeAddS, c.Name+"-nodeadd-s")
		b.ReportMetric(r.ingressCalls, c.Name+"-calls/svc")
		b.ReportMetric(float64(r.nodeAddCalls), c.Name+"-nodeadd-calls")
		b.ReportMetric(float64(r.noopCalls), c.Name+"-noop-calls")
		b.ReportMetric(r.peakRSSMB, c.Name+"-peakRSS-MB")
	}
	if u, ok := results["upstream-defaults"]; ok {
		b.ReportMetric(u.ingressS/results["portside-defaults"].ingressS, "ingress-speedup-vs-upstream-defaults")
		b.ReportMetric(u.nodeAddS/results["portside-defaults"].nodeAddS, "nodeadd-speedup-vs-upstream-defaults")
	}
	b.ReportMetric(results["upstream-equal"].ingressS/results["portside-equal"].ingressS, "ingress-speedup-at-equal")
	b.ReportMetric(results["upstream-equal"].nodeAddS/results["portside-equal"].nodeAddS, "nodeadd-speedup-at-equal")
}

type lbResult struct {
	ingressS, nodeAddS, ingressCalls, peakRSSMB float64
	nodeAddCalls, noopCalls                     int64
}

func lbCalls(lc *localcloudtest.Cloud) int64 {
	var n int64
	for k, v := range lc.Server.Calls() {
		if strings.HasPrefix(k, "PUT /v1/load-balancers") || strings.HasPrefix(k, "PATCH /v1/load-balancers") {
			n += v
		}
	}
	return n
}

func runLBContender(b *testing.B, client kubernetes.Interface, lc *localcloudtest.Cloud, sim *nodesim.Simulator, c contender, nSvcs int, extra nodesim.NodeSpec) lbResult {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	names := make([]string, nSvcs)
	for i := range names {
		names[i] = fmt.Sprintf("lb-svc-%04d", i)
	}
	workqueue.ParallelizeUntil(ctx, 32, nSvcs, func(i int) {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: names[i], Namespace: "default"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": names[i]},
				Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}}
		if _, err := client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			b.Error(err)
		}
	})
	var withIngress atomic.Int64
	allIngress := make(chan struct{})
	factory := informers.NewSharedInformerFactory(client, 0)
	_, _ = factory.Core().V1().Services().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, cur any) {
			o, n := old.(*corev1.Service), cur.(*corev1.Service)
			if len(o.Status.LoadBalancer.Ingress) == 0 && len(n.Status.LoadBalancer.Ingress) > 0 && withIngress.Add(1) == int64(nSvcs) {
				close(allIngress)
			}
		},
	})
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	defer func() {
		cancel()
		factory.Shutdown()
	}()

	before := lbCalls(lc)
	spec, _ := json.Marshal(c)
	start := time.Now()
	p, err := proc.Start(c.Name, os.Args[0], []string{"-test.run=^$", "-test.bench=^$"}, []string{childEnv + "=" + string(spec)},
		filepath.Join(b.TempDir(), c.Name+".log"))
	if err != nil {
		b.Fatal(err)
	}
	defer p.Stop(10 * time.Second)
	var r lbResult
	watch := func(done <-chan struct{}, what string) {
		timeout := time.After(30 * time.Minute)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-p.Done():
				b.Fatalf("%s exited: %v\n%s", c.Name, p.ExitErr(), p.LogTail(20))
			case <-timeout:
				b.Fatalf("%s: %s did not happen in 30 minutes", c.Name, what)
			case <-tick.C:
				r.peakRSSMB = max(r.peakRSSMB, peakRSSMB(p.PID()))
			}
		}
	}
	watch(allIngress, "every Service getting its ingress")
	r.ingressS = time.Since(start).Seconds()
	r.ingressCalls = float64(lbCalls(lc)-before) / float64(nSvcs)

	// A node update that changes nothing the load balancers use: no calls.
	time.Sleep(3 * time.Second) // let the last status writes settle
	before = lbCalls(lc)
	patch := []byte(`{"metadata":{"labels":{"bench.portside.io/touched":"` + c.Name + `"}}}`)
	if _, err := client.CoreV1().Nodes().Patch(ctx, "lb-node-0000", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		b.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	r.noopCalls = lbCalls(lc) - before

	// One node added: time until every load balancer has it.
	before = lbCalls(lc)
	added := time.Now()
	if err := sim.Register(ctx, []nodesim.NodeSpec{extra}); err != nil {
		b.Fatal(err)
	}
	reached := make(chan struct{})
	go func() {
		for ctx.Err() == nil {
			all, with, err := lc.Server.LoadBalancersWithBackend("kubernetes", extra.NodeIPs[0])
			if err == nil && all >= nSvcs && with == all {
				close(reached)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	watch(reached, "the added node reaching every load balancer")
	r.nodeAddS = time.Since(added).Seconds()
	r.nodeAddCalls = lbCalls(lc) - before
	r.peakRSSMB = max(r.peakRSSMB, peakRSSMB(p.PID()))
	p.Stop(10 * time.Second)

	// Clean up for the next contender: the extra node, the Services (their
	// finalizers first, the contender being gone) and the load balancers.
	if err := sim.Delete(ctx, []string{extra.Name}); err != nil {
		b.Fatal(err)
	}
	workqueue.ParallelizeUntil(ctx, 32, nSvcs, func(i int) {
		_, _ = client.CoreV1().Services("default").Patch(ctx, names[i], types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		_ = client.CoreV1().Services("default").Delete(ctx, names[i], metav1.DeleteOptions{})
	})
	lbs, err := lc.Client.ListLoadBalancers(ctx, "kubernetes")
	if err != nil {
		b.Fatal(err)
	}
	workqueue.ParallelizeUntil(ctx, 16, len(lbs), func(i int) { _ = lc.Client.DeleteLoadBalancer(ctx, lbs[i].Name) })
	for {
		list, err := client.CoreV1().Services("default").List(ctx, metav1.ListOptions{Limit: 2})
		if err == nil && len(list.Items) <= 1 { // the kubernetes Service may exist
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	return r
}
