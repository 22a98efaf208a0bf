package ccm

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/portside-io/portside/internal/localcloud/localcloudtest"
	"github.com/portside-io/portside/internal/manager"
	"github.com/portside-io/portside/internal/nodesim"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/pkg/localcloud/api"
)

// TestAbuseOfMetricsKeepsLeaseAndNodeInit floods /metrics of a leading CCM
// with 2,000 requests carrying made-up bearer tokens (200 at a time). Each
// token is new, so nothing is cached and every request wants a TokenReview.
// The CCM runs with upstream's client limits (20 QPS, burst 30), where
// reviews made through the controllers' client would queue the Lease
// renewals behind them for longer than the renew deadline. It must answer
// 401/403/429/503 (never 200), keep renewing its Lease, and initialize a
// node registered during the flood.
//
// The CCM has its own cloud, its own Lease and only the cloud-node
// controller, so it does not meet the package fixture's CCM (which runs
// without leader election, when other tests started it): that one cannot
// find this test's node in its cloud and leaves it alone.
func TestAbuseOfMetricsKeepsLeaseAndNodeInit(t *testing.T) {
	const (
		requests    = 2000
		concurrency = 200
		initBound   = 20 * time.Second
	)
	client := testenv.Client(t)
	cloud := localcloudtest.Start(t)
	suffix := abuseSuffix()
	lease, identity, nodeName := "portside-abuse-"+suffix, "abuse-ccm-"+suffix, "abuse-node-"+suffix

	dir := t.TempDir()
	cfg := filepath.Join(dir, "cloud.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("endpoint: %s\ntoken: %s\n", cloud.Endpoint, cloud.Token)), 0o600); err != nil {
		t.Fatal(err)
	}
	o := manager.NewOptions()
	o.CloudProvider, o.CloudConfig, o.Kubeconfig = "local", cfg, testenv.Kubeconfig(t)
	o.Controllers = []string{"cloud-node"}
	o.KubeAPIQPS, o.KubeAPIBurst = 20, 30
	o.LeaderElect = true
	o.LeaderElectLockName, o.LeaderElectNamespace, o.LeaderElectIdentity = lease, "kube-system", identity
	o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 6*time.Second, 4*time.Second, 500*time.Millisecond
	o.SecurePort, o.BindAddress = 0, "127.0.0.1"
	o.NodeMonitorPeriod = 300 * time.Millisecond
	o.NodeStatusUpdateFrequency = time.Second

	// Cleanups run last-registered first: the flood and watchers, then the
	// node and Lease, then the CCM, then (registered by Start) the cloud.
	ctx, cancel := context.WithCancel(context.Background())
	metrics, ccmErr, stopCCM := abuseRunCCM(t, o)
	t.Cleanup(stopCCM)
	sim := nodesim.New(client, 1)
	t.Cleanup(func() {
		c, done := context.WithTimeout(context.Background(), 30*time.Second)
		defer done()
		if err := sim.Delete(c, []string{nodeName}); err != nil {
			t.Errorf("delete node %s: %v", nodeName, err)
		}
	})
	var workers sync.WaitGroup
	transport := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, MaxIdleConnsPerHost: concurrency}
	t.Cleanup(func() {
		cancel()
		workers.Wait()
		transport.CloseIdleConnections()
	})

	// alive fails the test as soon as the CCM has stopped (lost its Lease).
	var exitErr error
	exited := false
	alive := func() {
		if !exited {
			select {
			case exitErr = <-ccmErr:
				exited = true
			default:
			}
		}
		if exited {
			t.Fatalf("the CCM stopped: %v", exitErr)
		}
	}

	// It leads.
	abuseWaitLease(t, client, lease, 30*time.Second, func(holder string, _ time.Time) bool { alive(); return holder == identity })
	if _, err := cloud.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: nodeName, Zone: "zone-a"}); err != nil {
		t.Fatal(err)
	}

	// Watch the Lease while the flood runs.
	var (
		leaseMu   sync.Mutex
		renewals  []time.Time
		holders   = map[string]int{}
		leaseErrs int
	)
	watchDone := make(chan struct{})
	workers.Add(1)
	go func() {
		defer workers.Done()
		defer close(watchDone)
		for ctx.Err() == nil {
			l, err := client.CoordinationV1().Leases("kube-system").Get(ctx, lease, metav1.GetOptions{})
			leaseMu.Lock()
			switch {
			case err != nil:
				leaseErrs++
			default:
				holders[abuseStr(l.Spec.HolderIdentity)]++
				if l.Spec.RenewTime != nil {
					rt := l.Spec.RenewTime.Time
					if n := len(renewals); n == 0 || rt.After(renewals[n-1]) {
						renewals = append(renewals, rt)
					}
				}
			}
			leaseMu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()

	// The flood.
	httpc := &http.Client{Timeout: 30 * time.Second, Transport: transport}
	var (
		codesMu sync.Mutex
		codes   = map[int]int{}
		errs    []string
		sent    atomic.Int32
	)
	jobs := make(chan struct{})
	floodDone := make(chan struct{})
	var flood sync.WaitGroup
	for range concurrency {
		flood.Add(1)
		workers.Add(1)
		go func() {
			defer workers.Done()
			defer flood.Done()
			for range jobs {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, metrics, nil)
				req.Header.Set("Authorization", "Bearer "+abuseToken(32))
				resp, err := httpc.Do(req)
				sent.Add(1)
				codesMu.Lock()
				if err != nil {
					errs = append(errs, err.Error())
				} else {
					codes[resp.StatusCode]++
				}
				codesMu.Unlock()
				if resp != nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
			}
		}()
	}
	start := time.Now()
	workers.Add(1)
	go func() {
		defer workers.Done()
		defer close(floodDone)
		defer close(jobs)
		for range requests {
			select {
			case jobs <- struct{}{}:
			case <-ctx.Done():
				return
			}
		}
	}()
	// A node registers while the flood runs, and is initialized in time.
	abuseWait(t, 10*time.Second, "the flood to start", func() bool { return sent.Load() >= concurrency })
	registered := time.Now()
	if err := sim.Register(ctx, []nodesim.NodeSpec{{Name: nodeName}}); err != nil {
		t.Fatal(err)
	}
	var initAt time.Time
	abuseWait(t, initBound, "node "+nodeName+" to be initialized during the flood", func() bool {
		alive()
		n, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err == nil && initialized(n) {
			initAt = time.Now()
			return true
		}
		return false
	})
	initSent := sent.Load()

	select {
	case <-floodDone:
	case <-time.After(3 * time.Minute):
		t.Fatalf("the flood did not end: %d of %d requests sent", sent.Load(), requests)
	}
	flood.Wait()
	floodEnd := time.Now()

	// After the flood the Lease is still renewed by this CCM.
	abuseWaitLease(t, client, lease, 2*o.LeaseDuration, func(holder string, renew time.Time) bool {
		alive()
		return holder == identity && renew.After(floodEnd)
	})
	cancel()
	<-watchDone

	codesMu.Lock()
	defer codesMu.Unlock()
	leaseMu.Lock()
	defer leaseMu.Unlock()
	t.Logf("flood: %d requests in %v, answers %v, transport errors %d; node initialized %v after registering (%d requests sent by then); lease renewals seen %d, holders %v",
		requests, floodEnd.Sub(start).Round(time.Millisecond), codes, len(errs), initAt.Sub(registered).Round(time.Millisecond), initSent, len(renewals), holders)

	total := len(errs)
	for code, n := range codes {
		total += n
		switch code {
		case http.StatusUnauthorized, http.StatusForbidden, http.StatusTooManyRequests, http.StatusServiceUnavailable:
		default:
			t.Errorf("%d requests with made-up tokens got %d", n, code)
		}
	}
	if total != requests {
		t.Errorf("%d answers for %d requests", total, requests)
	}
	if len(errs) > 0 {
		t.Errorf("%d requests failed, e.g. %s", len(errs), errs[0])
	}
	if codes[http.StatusUnauthorized] == 0 {
		t.Errorf("no request was reviewed and denied: %v", codes)
	}
	if len(holders) != 1 || holders[identity] == 0 {
		t.Errorf("Lease holders during the flood: %v, want only %s", holders, identity)
	}
	if leaseErrs > 0 {
		t.Logf("%d Lease reads failed", leaseErrs)
	}
	// Renewals kept coming: no gap near the lease duration.
	sort.Slice(renewals, func(i, j int) bool { return renewals[i].Before(renewals[j]) })
	for i := 1; i < len(renewals); i++ {
		if gap := renewals[i].Sub(renewals[i-1]); gap > o.RenewDeadline {
			t.Errorf("the Lease was not renewed for %v (renew deadline %v) during the flood", gap, o.RenewDeadline)
		}
	}
	if least := int(floodEnd.Sub(start) / (2 * time.Second)); len(renewals) < least {
		t.Errorf("%d Lease renewals seen in %v of flood, want at least %d", len(renewals), floodEnd.Sub(start), least)
	}
	alive()
}

// abuseRunCCM runs a CCM in-process; it returns its /metrics URL, a
// channel that gets Run's result if it ends, and a stop function that
// cancels it and waits.
func abuseRunCCM(t *testing.T, o *manager.Options) (string, <-chan error, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	errc := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		errc <- manager.Run(ctx, o, manager.DefaultControllers(), func(a string) { addr <- a })
	}()
	stop := func() { cancel(); <-done }
	select {
	case a := <-addr:
		return "https://" + a + "/metrics", errc, stop
	case err := <-errc:
		stop()
		t.Fatalf("CCM did not start: %v", err)
	case <-time.After(30 * time.Second):
		stop()
		t.Fatal("CCM did not start serving")
	}
	return "", nil, nil
}

// abuseWaitLease polls a kube-system Lease until cond holds.
func abuseWaitLease(t *testing.T, client kubernetes.Interface, name string, timeout time.Duration, cond func(holder string, renew time.Time) bool) {
	t.Helper()
	var last string
	abuseWait(t, timeout, "Lease kube-system/"+name, func() bool {
		l, err := client.CoordinationV1().Leases("kube-system").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			if !apierrors.IsNotFound(err) {
				last = err.Error()
			}
			return false
		}
		var renew time.Time
		if l.Spec.RenewTime != nil {
			renew = l.Spec.RenewTime.Time
		}
		last = fmt.Sprintf("holder %q renewed %v", abuseStr(l.Spec.HolderIdentity), renew)
		return cond(abuseStr(l.Spec.HolderIdentity), renew)
	}, func() string { return last })
}

func abuseWait(t *testing.T, timeout time.Duration, what string, cond func() bool, last ...func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			msg := ""
			if len(last) > 0 {
				msg = "; last: " + last[0]()
			}
			t.Fatalf("timed out after %v waiting for %s%s", timeout, what, msg)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func abuseStr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// abuseToken returns n random bytes, base64url: a made-up bearer token.
func abuseToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// abuseSuffix makes names of this run's own (-count=2 runs twice).
func abuseSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%x", b)
}
