// Package rbac checks deploy/ccm's RBAC against what the CCM really calls:
// a CCM runs every controller on a real kube-apiserver as its
// ServiceAccount (impersonated, through a recording proxy), through node
// initialization, pod CIDRs and routes, a load balancer's life, a node's
// shutdown and deletion, and leader election. Every call must be allowed
// by the manifests, and every verb the manifests grant must have been used.
package rbac

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/portside-io/portside/internal/localcloud/localcloudtest"
	"github.com/portside-io/portside/internal/manager"
	"github.com/portside-io/portside/internal/nodesim"
	"github.com/portside-io/portside/internal/testenv"
	"github.com/portside-io/portside/pkg/cloud"
	"github.com/portside-io/portside/pkg/localcloud/api"
	_ "github.com/portside-io/portside/pkg/providers/local" // registers "local"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const serviceAccount = "system:serviceaccount:kube-system:cloud-controller-manager"

// call is one request as RBAC sees it.
type call struct {
	group, resource, verb, namespace, name string
	status                                 int
}

func (c call) String() string {
	r := c.resource
	if c.group != "" {
		r = c.group + "/" + r
	}
	return fmt.Sprintf("%s %s ns=%q name=%q", c.verb, r, c.namespace, c.name)
}

type recorder struct {
	mu    sync.Mutex
	calls []call
}

func (r *recorder) all() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// proxy forwards to the apiserver as the CCM's ServiceAccount and records
// each request's RBAC attributes.
func proxy(t *testing.T, cfg *rest.Config) (*recorder, string) {
	t.Helper()
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse(cfg.Host)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = transport
	infos := &request.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}
	rec := &recorder{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		req.Header.Del("Authorization")
		req.Header.Set("Impersonate-User", serviceAccount)
		req.Header.Add("Impersonate-Group", "system:serviceaccounts")
		req.Header.Add("Impersonate-Group", "system:serviceaccounts:kube-system")
		req.Header.Add("Impersonate-Group", "system:authenticated")
		info, err := infos.NewRequestInfo(req)
		sw := &statusWriter{ResponseWriter: w, status: 200}
		if err != nil || !info.IsResourceRequest {
			rp.ServeHTTP(sw, req)
			return
		}
		res := info.Resource
		if info.Subresource != "" {
			res += "/" + info.Subresource
		}
		// Recorded when it starts: watches end only with the CCM.
		rec.mu.Lock()
		i := len(rec.calls)
		rec.calls = append(rec.calls, call{group: info.APIGroup, resource: res, verb: info.Verb, namespace: info.Namespace, name: info.Name})
		rec.mu.Unlock()
		sw.onStatus = func(code int) {
			rec.mu.Lock()
			rec.calls[i].status = code
			rec.mu.Unlock()
		}
		rp.ServeHTTP(sw, req)
	}))
	t.Cleanup(srv.Close)
	return rec, srv.URL
}

type statusWriter struct {
	http.ResponseWriter
	status   int
	onStatus func(int)
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	if w.onStatus != nil {
		w.onStatus(code)
	}
	w.ResponseWriter.WriteHeader(code)
}
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// manifests reads deploy/ccm and applies its RBAC and ServiceAccount (and
// the files named in extra).
func manifests(t *testing.T, client kubernetes.Interface, extra ...string) (cluster []rbacv1.PolicyRule, leader []rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	for _, file := range append([]string{"serviceaccount.yaml", "rbac.yaml"}, extra...) {
		data, err := os.ReadFile(filepath.Join("..", "..", "..", "deploy", "ccm", file))
		if err != nil {
			t.Fatal(err)
		}
		dec := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for {
			doc, err := dec.Read()
			if err != nil {
				break
			}
			var meta metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &meta); err != nil || meta.Kind == "" {
				continue
			}
			if err := apply(ctx, client, meta.Kind, doc, &cluster, &leader); err != nil {
				t.Fatalf("%s %s: %v", file, meta.Kind, err)
			}
		}
	}
	return cluster, leader
}

func apply(ctx context.Context, c kubernetes.Interface, kind string, doc []byte, cluster, leader *[]rbacv1.PolicyRule) error {
	ignoreExists := func(err error) error {
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}
	switch kind {
	case "ServiceAccount":
		var o corev1.ServiceAccount
		if err := yaml.Unmarshal(doc, &o); err != nil {
			return err
		}
		_, err := c.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
		return ignoreExists(err)
	case "ClusterRole":
		var o rbacv1.ClusterRole
		if err := yaml.Unmarshal(doc, &o); err != nil {
			return err
		}
		*cluster = append(*cluster, o.Rules...)
		_, err := c.RbacV1().ClusterRoles().Create(ctx, &o, metav1.CreateOptions{})
		return ignoreExists(err)
	case "ClusterRoleBinding":
		var o rbacv1.ClusterRoleBinding
		if err := yaml.Unmarshal(doc, &o); err != nil {
			return err
		}
		_, err := c.RbacV1().ClusterRoleBindings().Create(ctx, &o, metav1.CreateOptions{})
		return ignoreExists(err)
	case "Role":
		var o rbacv1.Role
		if err := yaml.Unmarshal(doc, &o); err != nil {
			return err
		}
		*leader = append(*leader, o.Rules...)
		_, err := c.RbacV1().Roles(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
		return ignoreExists(err)
	case "RoleBinding":
		var o rbacv1.RoleBinding
		if err := yaml.Unmarshal(doc, &o); err != nil {
			return err
		}
		for i := range o.Subjects {
			if o.Subjects[i].Kind == "ServiceAccount" && o.Subjects[i].Namespace == "" {
				o.Subjects[i].Namespace = o.Namespace
			}
		}
		_, err := c.RbacV1().RoleBindings(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
		return ignoreExists(err)
	}
	return fmt.Errorf("unexpected kind %s", kind)
}

// canI asks the apiserver (a SubjectAccessReview, what `kubectl auth
// can-i --as` asks) whether the CCM's ServiceAccount may verb resource
// ("name" or "name/subresource", core group) in namespace ("" is every
// namespace, -A).
func canI(t *testing.T, client kubernetes.Interface, verb, resource, namespace string) bool {
	t.Helper()
	res, sub, _ := strings.Cut(resource, "/")
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   serviceAccount,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Resource: res, Subresource: sub,
			Namespace: namespace},
	}}
	got, err := client.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), sar, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SubjectAccessReview %s %s: %v", verb, resource, err)
	}
	return got.Status.Allowed
}

// TestCCMCannotReadSecrets: with deploy/ccm's RBAC applied (with
// --use-service-account-credentials' file too), the CCM's ServiceAccount may
// not get, list or watch Secrets, across namespaces or in its own. The
// unused-grant check above catches a new secrets grant only while the
// scenario never calls it; this says it outright. Grants it does have are
// asked too, so a review that always says no cannot pass.
func TestCCMCannotReadSecrets(t *testing.T) {
	admin := testenv.Client(t)
	manifests(t, admin, "rbac-service-account-credentials.yaml")
	for _, ns := range []string{"", "kube-system", "default"} {
		for _, verb := range []string{"get", "list", "watch"} {
			if canI(t, admin, verb, "secrets", ns) {
				t.Errorf("the CCM's ServiceAccount may %s secrets in namespace %q (\"\" is -A)", verb, ns)
			}
		}
	}
	for _, g := range [][2]string{{"list", "nodes"}, {"watch", "services"}, {"patch", "services/status"}} {
		if !canI(t, admin, g[0], g[1], "") {
			t.Errorf("control: the CCM's ServiceAccount may not %s %s: the review or the applied manifests are wrong", g[0], g[1])
		}
	}
}

// allows reports whether a rule grants c.
func allows(r rbacv1.PolicyRule, c call) bool {
	return (slices.Contains(r.APIGroups, c.group) || slices.Contains(r.APIGroups, "*")) &&
		(slices.Contains(r.Resources, c.resource) || slices.Contains(r.Resources, "*")) &&
		(slices.Contains(r.Verbs, c.verb) || slices.Contains(r.Verbs, "*")) &&
		(len(r.ResourceNames) == 0 || slices.Contains(r.ResourceNames, c.name))
}

func TestManifestRBACIsExactlyWhatTheCCMCalls(t *testing.T) {
	ctx := context.Background()
	admin := testenv.Client(t)
	clusterRules, leaderRules := manifests(t, admin)
	// The scenario creates the Lease, also when repeated (-count=N).
	if err := admin.CoordinationV1().Leases("kube-system").Delete(ctx, "cloud-controller-manager", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	rec, url := proxy(t, testenv.Config(t))
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q}}]
users: [{name: u, user: {}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, url), 0o600); err != nil {
		t.Fatal(err)
	}

	lc := localcloudtest.Start(t)
	cloudCfg := filepath.Join(t.TempDir(), "cloud.yaml")
	if err := os.WriteFile(cloudCfg, fmt.Appendf(nil, "endpoint: %s\ntoken: %s\n", lc.Endpoint, lc.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	o := manager.NewOptions()
	o.CloudProvider, o.CloudConfig, o.Kubeconfig = "local", cloudCfg, kubeconfig
	o.ClusterName = "rbac-test"
	o.SecurePort, o.BindAddress = 0, "127.0.0.1"
	o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 3*time.Second, 2*time.Second, 500*time.Millisecond
	o.NodeMonitorPeriod, o.NodeStatusUpdateFrequency = 300*time.Millisecond, time.Second
	o.AllocateNodeCIDRs, o.ClusterCIDR = true, "10.120.0.0/16"
	var stop func()
	start := func() {
		ccmCtx, stopCCM := context.WithCancel(ctx)
		ccmDone := make(chan error, 1)
		go func() { ccmDone <- manager.Run(ccmCtx, o, manager.DefaultControllers(), nil) }()
		stopped := false
		stop = func() {
			if !stopped {
				stopped = true
				stopCCM()
				if err := <-ccmDone; err != nil {
					t.Errorf("ccm: %v", err)
				}
			}
		}
	}
	start()
	t.Cleanup(func() { stop() })

	// Nodes: initialized, given pod CIDRs and routes; addresses re-synced.
	sim := nodesim.New(admin, 4)
	t.Cleanup(func() { _ = sim.Delete(context.Background(), sim.Names()) })
	var insts []*api.Instance
	for _, name := range []string{"rbac-1", "rbac-2"} {
		inst, err := lc.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: name, Zone: "zone-a"})
		if err != nil {
			t.Fatal(err)
		}
		insts = append(insts, inst)
	}
	if err := sim.Register(ctx, []nodesim.NodeSpec{{Name: "rbac-1"}, {Name: "rbac-2"}}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "nodes initialized and routed", func() (bool, string) {
		for _, name := range []string{"rbac-1", "rbac-2"} {
			n, err := admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil || tainted(n, "node.cloudprovider.kubernetes.io/uninitialized") || len(n.Spec.PodCIDRs) == 0 || !routed(n) {
				return false, fmt.Sprintf("%s: %v %+v", name, err, n.Spec)
			}
		}
		return true, ""
	})

	// A load balancer made; the CCM restarts while its Service is removed by
	// hand: orphan collection reads the Service and deletes the load balancer.
	orphan := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "rbac-orphan"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}}
	orphan, err := admin.CoreV1().Services("default").Create(ctx, orphan, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "orphan-to-be's ingress", func() (bool, string) {
		s, err := admin.CoreV1().Services("default").Get(ctx, "rbac-orphan", metav1.GetOptions{})
		return err == nil && len(s.Status.LoadBalancer.Ingress) > 0, fmt.Sprint(err)
	})
	stop()
	if _, err := admin.CoreV1().Services("default").Patch(ctx, "rbac-orphan", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := admin.CoreV1().Services("default").Delete(ctx, "rbac-orphan", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	start()
	testenv.Eventually(t, 30*time.Second, "the orphan collected", func() (bool, string) {
		_, err := lc.Client.GetLoadBalancer(ctx, cloud.LoadBalancerName(orphan.UID))
		return err != nil && strings.Contains(err.Error(), "404"), fmt.Sprint(err)
	})

	// A load balancer made, then deleted.
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "rbac-lb"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}}
	if _, err := admin.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "ingress", func() (bool, string) {
		s, err := admin.CoreV1().Services("default").Get(ctx, "rbac-lb", metav1.GetOptions{})
		return err == nil && len(s.Status.LoadBalancer.Ingress) > 0, fmt.Sprint(err)
	})
	if err := admin.CoreV1().Services("default").Delete(ctx, "rbac-lb", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "Service cleaned up", func() (bool, string) {
		_, err := admin.CoreV1().Services("default").Get(ctx, "rbac-lb", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})

	// A node shut down (tainted), then its instance deleted (Node deleted).
	if _, err := lc.Client.StopInstance(ctx, insts[1].ID); err != nil {
		t.Fatal(err)
	}
	if err := sim.SetReady(ctx, "rbac-2", false); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "shutdown taint", func() (bool, string) {
		n, err := admin.CoreV1().Nodes().Get(ctx, "rbac-2", metav1.GetOptions{})
		return err == nil && tainted(n, "node.cloudprovider.kubernetes.io/shutdown"), fmt.Sprint(err)
	})
	if err := lc.Client.DeleteInstance(ctx, insts[1].ID); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "node of the deleted instance deleted", func() (bool, string) {
		_, err := admin.CoreV1().Nodes().Get(ctx, "rbac-2", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	stop() // releases the Lease (an update)

	calls := rec.all()
	var denied, uncovered []string
	used := map[string]bool{}
	// What the CCM's informers watched in this run: list is exempt for
	// these only (see optional).
	watched := map[string]bool{}
	for _, c := range calls {
		if c.verb == "watch" {
			watched[c.group+"/"+c.resource] = true
		}
	}
	if len(watched) == 0 {
		t.Errorf("the CCM watched nothing: its informers did not run through the proxy")
	}
	for _, c := range calls {
		if c.status == http.StatusForbidden {
			denied = append(denied, c.String())
		}
		rules := clusterRules
		if c.namespace == "kube-system" && c.group == "coordination.k8s.io" {
			rules = leaderRules
		}
		covered := false
		for i, r := range rules {
			if allows(r, c) {
				covered = true
				used[ruleKey(rules, i, c)] = true
			}
		}
		if !covered {
			uncovered = append(uncovered, c.String())
		}
	}
	if len(denied) > 0 {
		t.Errorf("calls the manifests forbid:\n  %s", strings.Join(uniq(denied), "\n  "))
	}
	if len(uncovered) > 0 {
		t.Errorf("calls no rule grants:\n  %s", strings.Join(uniq(uncovered), "\n  "))
	}
	var unused []string
	for _, set := range []struct {
		name  string
		rules []rbacv1.PolicyRule
	}{{"ClusterRole", clusterRules}, {"leader-election Role", leaderRules}} {
		for i, r := range set.rules {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						k := fmt.Sprintf("%p/%d %s %s %s", set.rules, i, g, res, v)
						if !used[k] && !optional(g, res, v, watched) {
							unused = append(unused, fmt.Sprintf("%s: %s %s/%s", set.name, v, g, res))
						}
					}
				}
			}
		}
	}
	if len(unused) > 0 {
		t.Errorf("verbs the manifests grant but the CCM never used (grant exactly what is called):\n  %s", strings.Join(uniq(unused), "\n  "))
	}
	if t.Failed() {
		t.Logf("all calls:\n  %s", strings.Join(uniq(callStrings(calls)), "\n  "))
	}
}

// optional are grants for paths this scenario does not take: events through
// events.k8s.io, and event patches and updates (client-go's recorder uses
// them when an event repeats), and list of a resource the CCM's informers
// watched in this run: an informer lists only when the apiserver cannot
// stream the initial list over watch (WatchList). list of anything not
// watched (secrets, say) is no informer's and must have been called.
func optional(group, resource, verb string, watched map[string]bool) bool {
	return group == "events.k8s.io" || (resource == "events" && (verb == "update" || verb == "patch")) ||
		(verb == "list" && watched[group+"/"+resource])
}

func ruleKey(rules []rbacv1.PolicyRule, i int, c call) string {
	return fmt.Sprintf("%p/%d %s %s %s", rules, i, c.group, c.resource, c.verb)
}

func tainted(n *corev1.Node, key string) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key })
}

func routed(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeNetworkUnavailable {
			return c.Status == corev1.ConditionFalse
		}
	}
	return false
}

func callStrings(cs []call) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = fmt.Sprintf("%s -> %d", c, c.status)
	}
	return out
}

func uniq(s []string) []string {
	sort.Strings(s)
	return slices.Compact(s)
}
