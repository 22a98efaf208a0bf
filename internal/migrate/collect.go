package migrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Options tune Collect.
type Options struct {
	// Server is the API server URL shown in the report.
	Server string
	// KubeletTimeout bounds each kubelet configz read (default 5s).
	KubeletTimeout time.Duration
	// KubeletParallelism bounds concurrent configz reads (default 8).
	KubeletParallelism int
	// Now overrides the clock (tests).
	Now func() time.Time
}

// Check collects a snapshot of the cluster and evaluates it.
func Check(ctx context.Context, c kubernetes.Interface, o Options) (*Report, error) {
	s, err := Collect(ctx, c, o)
	if err != nil {
		return nil, err
	}
	return Evaluate(s), nil
}

// shortErr makes an API error one short line.
func shortErr(err error) string {
	switch {
	case apierrors.IsForbidden(err):
		return "forbidden"
	case apierrors.IsNotFound(err):
		return "not found"
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		st := status.Status()
		msg := st.Message
		if len(msg) > 120 {
			msg = msg[:120] + "…"
		}
		return fmt.Sprintf("HTTP %d %s: %s", st.Code, st.Reason, msg)
	}
	msg := strings.SplitN(err.Error(), "\n", 2)[0]
	if len(msg) > 160 {
		msg = msg[:160] + "…"
	}
	return msg
}

// Collect reads what the checks need. Only an unreachable server is an
// error; a failed read is recorded in Snapshot.Errors (a blocking finding)
// and a failed best-effort read (configz) in its probe.
func Collect(ctx context.Context, c kubernetes.Interface, o Options) (*Snapshot, error) {
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	v, err := c.Discovery().ServerVersion()
	if err != nil {
		return nil, fmt.Errorf("cannot reach the cluster: %w", err)
	}
	s := &Snapshot{Server: o.Server, ServerVersion: v.GitVersion, Errors: map[string]string{}, Leases: map[string]*coordinationv1.Lease{}}
	s.Minor, _ = strconv.Atoi(strings.TrimRight(v.Minor, "+"))
	fail := func(what string, err error) { s.Errors[what] = shortErr(err) }

	if l, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
		fail("nodes", err)
	} else {
		s.Nodes = l.Items
	}
	if l, err := c.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{}); err != nil {
		fail("pods in kube-system", err)
	} else {
		s.KubeSystemPods = l.Items
	}
	if l, err := c.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{}); err != nil {
		fail("persistentvolumes", err)
	} else {
		s.PVs = l.Items
	}
	if l, err := c.StorageV1().StorageClasses().List(ctx, metav1.ListOptions{}); err != nil {
		fail("storageclasses", err)
	} else {
		s.StorageClasses = l.Items
	}
	if l, err := c.StorageV1().CSIDrivers().List(ctx, metav1.ListOptions{}); err != nil {
		fail("csidrivers", err)
	} else {
		s.CSIDrivers = l.Items
	}
	if l, err := c.StorageV1().CSINodes().List(ctx, metav1.ListOptions{}); err != nil {
		fail("csinodes", err)
	} else {
		s.CSINodes = l.Items
	}
	if l, err := c.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{}); err != nil {
		fail("services", err)
	} else {
		s.Services = l.Items
	}
	switch _, err := c.CoreV1().ServiceAccounts(CCMNamespace).Get(ctx, CCMServiceAccount, metav1.GetOptions{}); {
	case err == nil:
		s.ServiceAccount = true
	case !apierrors.IsNotFound(err):
		fail("serviceaccounts in kube-system", err)
	}
	for _, name := range []string{LeaseKCM, LeaseCCM, LeaseMigration} {
		l, err := c.CoordinationV1().Leases(CCMNamespace).Get(ctx, name, metav1.GetOptions{})
		switch {
		case err == nil:
			s.Leases[name] = l
		case !apierrors.IsNotFound(err):
			fail("leases in kube-system", err)
		}
	}
	s.Access = accessChecks(ctx, c)
	s.MigrationAccess = migrationAccessChecks(ctx, c)
	s.Kubelets = probeKubelets(ctx, c, s.Nodes, o)
	s.Now = now()
	return s, nil
}

// accessChecks asks a SubjectAccessReview for each of CCMAccessChecks as the
// CCM's ServiceAccount.
func accessChecks(ctx context.Context, c kubernetes.Interface) []AccessCheck {
	checks := CCMAccessChecks()
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + CCMNamespace, "system:authenticated"}
	for i := range checks {
		checks[i].Allowed, checks[i].Err = review(ctx, c, CCMSubjectName, groups, checks[i])
	}
	return checks
}

// migrationAccessChecks asks a SubjectAccessReview for each of
// MigrationAccessChecks as its subject.
func migrationAccessChecks(ctx context.Context, c kubernetes.Interface) []SubjectAccess {
	checks := MigrationAccessChecks()
	for i := range checks {
		a := &checks[i]
		groups := []string{"system:authenticated"}
		if strings.HasPrefix(a.Subject, "system:serviceaccount:") {
			groups = append(groups, "system:serviceaccounts", "system:serviceaccounts:"+CCMNamespace)
		}
		a.Allowed, a.Err = review(ctx, c, a.Subject, groups, a.AccessCheck)
	}
	return checks
}

// review asks one SubjectAccessReview.
func review(ctx context.Context, c kubernetes.Interface, user string, groups []string, a AccessCheck) (bool, string) {
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user, Groups: groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: a.Verb, Group: a.Group, Resource: a.Resource, Subresource: a.Subresource, Namespace: a.Namespace, Name: a.Name,
		},
	}}
	res, err := c.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return false, shortErr(err)
	}
	return res.Status.Allowed, ""
}

// probeKubelets reads each Node's kubelet /configz through the API server's
// node proxy, best effort.
func probeKubelets(ctx context.Context, c kubernetes.Interface, nodes []corev1.Node, o Options) []KubeletProbe {
	timeout, par := o.KubeletTimeout, o.KubeletParallelism
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	if par <= 0 {
		par = 8
	}
	out := make([]KubeletProbe, len(nodes))
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			out[i] = probeKubelet(ctx, c, nodes[i].Name, timeout)
		}()
	}
	wg.Wait()
	return out
}

func probeKubelet(ctx context.Context, c kubernetes.Interface, node string, timeout time.Duration) KubeletProbe {
	p := KubeletProbe{Node: node}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	raw, err := c.CoreV1().RESTClient().Get().Resource("nodes").Name(node).SubResource("proxy").Suffix("configz").DoRaw(ctx)
	if err != nil {
		p.Err = "not reachable through the node proxy: " + shortErr(err)
		if body := strings.TrimSpace(string(raw)); body != "" && len(body) < 160 && !strings.HasPrefix(body, "{") {
			p.Err += " (" + body + ")" // the proxy's plain-text answer, e.g. "address not allowed"
		}
		if apierrors.IsForbidden(err) {
			p.Err = "nodes/proxy forbidden"
		}
		if ctx.Err() != nil {
			p.Err = "no answer within " + timeout.String()
		}
		return p
	}
	return parseConfigz(node, raw)
}

// parseConfigz reads kubeletconfig.cloudProvider from a configz answer.
func parseConfigz(node string, raw []byte) KubeletProbe {
	p := KubeletProbe{Node: node}
	var cz struct {
		KubeletConfig map[string]json.RawMessage `json:"kubeletconfig"`
	}
	if err := json.Unmarshal(raw, &cz); err != nil || cz.KubeletConfig == nil {
		p.Err = "configz answer is not a kubelet configuration"
		return p
	}
	if v, ok := cz.KubeletConfig["cloudProvider"]; ok {
		p.Reported = true
		_ = json.Unmarshal(v, &p.CloudProvider)
	}
	return p
}
