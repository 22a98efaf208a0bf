package devenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// The demo's Service: no pods are needed, since the kube-proxy stand-ins
// answer on its NodePort on every node.
const (
	demoNamespace = "demo"
	demoService   = "hello"
	demoPort      = 8080
	demoRequests  = 6
)

// demo creates (or finds, on a later run) a LoadBalancer Service, waits for
// the ccm to give it a VIP, and sends real requests through the VIP.
func demo(ctx context.Context, p *progress, env *environment) error {
	svc, err := ensureDemoService(ctx, env)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	p.step("demo", "LoadBalancer Service %s/%s (port %d, NodePort %d); waiting for its VIP", demoNamespace, demoService, demoPort, svc.Spec.Ports[0].NodePort)
	vip, err := waitIngress(ctx, env, time.Minute)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	p.step("demo", "the ccm gave it VIP %s; the local cloud balances it over %d nodes", vip, len(env.nodes))
	url := "http://" + net.JoinHostPort(vip, strconv.Itoa(demoPort)) + "/"
	first, counts, err := requests(ctx, url, demoRequests, 30*time.Second)
	if err != nil {
		return fmt.Errorf("demo: GET %s: %w (see `%s status`)", url, err, selfName())
	}
	p.step("demo", "GET %s → %s", url, first)
	p.step("demo", "%d requests answered by %s", demoRequests, counts)
	return nil
}

func ensureDemoService(ctx context.Context, env *environment) (*corev1.Service, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: demoNamespace}}
	if _, err := env.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: demoNamespace, Name: demoService},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": demoService},
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: demoPort}}},
	}
	created, err := env.client.CoreV1().Services(demoNamespace).Create(ctx, svc, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return env.client.CoreV1().Services(demoNamespace).Get(ctx, demoService, metav1.GetOptions{})
	}
	return created, err
}

// waitIngress waits for the Service's load-balancer ingress; on timeout it
// names the Service's latest warning event, where the ccm says what failed.
func waitIngress(ctx context.Context, env *environment, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		svc, err := env.client.CoreV1().Services(demoNamespace).Get(ctx, demoService, metav1.GetOptions{})
		if err == nil && len(svc.Status.LoadBalancer.Ingress) > 0 {
			return svc.Status.LoadBalancer.Ingress[0].IP, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no load-balancer ingress after %v (%s)", timeout, lastServiceWarning(ctx, env))
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func lastServiceWarning(ctx context.Context, env *environment) string {
	list, err := env.client.CoreV1().Events(demoNamespace).List(ctx, metav1.ListOptions{FieldSelector: fields.AndSelectors(
		fields.OneTermEqualSelector("involvedObject.name", demoService), fields.OneTermEqualSelector("type", corev1.EventTypeWarning)).String()})
	if err != nil || len(list.Items) == 0 {
		return "no warning events; see the ccm log in " + env.logs()
	}
	e := list.Items[len(list.Items)-1]
	return "last warning: " + e.Reason + ": " + e.Message
}

// requests sends n GETs through the VIP (retrying until the first succeeds,
// as backends become healthy) and returns the first answer and which nodes
// answered how often.
func requests(ctx context.Context, url string, n int, timeout time.Duration) (string, string, error) {
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	deadline := time.Now().Add(timeout)
	var first string
	counts := map[string]int{}
	for sum(counts) < n {
		node, body, err := get(ctx, hc, url)
		if err != nil {
			if time.Now().After(deadline) {
				return "", "", err
			}
			select {
			case <-ctx.Done():
				return "", "", ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		if first == "" {
			first = fmt.Sprintf("200 OK from %s: %q", node, body)
		}
		counts[node]++
	}
	names := make([]string, 0, len(counts))
	for name := range counts {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool { return compareNodeNames(names[i], names[j]) < 0 })
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = fmt.Sprintf("%s (%d)", name, counts[name])
	}
	return first, strings.Join(parts, ", "), nil
}

func get(ctx context.Context, hc *http.Client, url string) (node, body string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", "", err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return "", "", err
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Node") == "" {
		return "", "", errors.New("unexpected answer: " + resp.Status)
	}
	return resp.Header.Get("X-Node"), strings.TrimSpace(string(data)), nil
}

func sum(m map[string]int) int {
	t := 0
	for _, v := range m {
		t += v
	}
	return t
}
