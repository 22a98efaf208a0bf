// kubelet-credential-harness runs the kubelet's own image credential provider
// client (k8s.io/kubernetes/pkg/credentialprovider/plugin) the way the kubelet
// does, and answers JSON-line requests on stdin, so Portside's tests can drive
// credential provider plugins through the real client code (config parsing
// and validation, matchImages, exec, caching, service account tokens) without
// a kubelet.
//
//	kubelet-credential-harness --config <file|dir> --bin-dir <dir>
//	    [--kubeconfig <file>] [--validate-only] [--v N]
//
// One JSON reply line per stdin line:
//
//	{"op":"lookup","image":I,"podNamespace":..,"podName":..,"podUID":..,"serviceAccountName":..}
//	  -> {"image":I,"found":bool,"auths":[{"username":..,"password":..}],"execs":N}
//	{"op":"bench","image":I,"n":N, ...pod fields}
//	  -> {"image":I,"n":N,"seconds":s,"lookupsPerSecond":r,"execs":N,"execsDuring":d}
//	{"op":"match","pattern":P,"image":I}
//	  -> {"pattern":P,"image":I,"matched":bool[,"error":..]}
//	anything else -> {"error":..}
//
// "execs" is the number of plugin executions so far, as counted by the
// plugin package's own kubelet_credential_provider_plugin_duration histogram.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/credentialprovider"
	"k8s.io/kubernetes/pkg/credentialprovider/plugin"
	"k8s.io/kubernetes/pkg/features"
)

const (
	name = "kubelet-credential-harness"
	// execMetric is observed once per plugin exec (execPlugin.runPlugin), on
	// success and failure alike; cache hits and non-matching images never
	// reach it.
	execMetric = "kubelet_credential_provider_plugin_duration"
	apiTimeout = 30 * time.Second
)

type request struct {
	Op                 string `json:"op"`
	Image              string `json:"image"`
	Pattern            string `json:"pattern"`
	N                  int    `json:"n"`
	PodNamespace       string `json:"podNamespace"`
	PodName            string `json:"podName"`
	PodUID             string `json:"podUID"`
	ServiceAccountName string `json:"serviceAccountName"`
}

type auth struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

type lookupReply struct {
	Image string `json:"image"`
	Found bool   `json:"found"`
	Auths []auth `json:"auths"`
	Execs uint64 `json:"execs"`
}

type benchReply struct {
	Image            string  `json:"image"`
	N                int     `json:"n"`
	Seconds          float64 `json:"seconds"`
	LookupsPerSecond float64 `json:"lookupsPerSecond"`
	Execs            uint64  `json:"execs"`
	ExecsDuring      uint64  `json:"execsDuring"`
}

type matchReply struct {
	Pattern string `json:"pattern"`
	Image   string `json:"image"`
	Matched bool   `json:"matched"`
	Error   string `json:"error,omitempty"`
}

type errorReply struct {
	Error string `json:"error"`
}

func main() {
	klog.InitFlags(nil) // --v and friends; klog writes to stderr by default
	config := flag.String("config", "", "CredentialProviderConfig file or directory (the kubelet's --image-credential-provider-config)")
	binDir := flag.String("bin-dir", "", "directory holding the plugin binaries (the kubelet's --image-credential-provider-bin-dir)")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig for service account lookups and TokenRequests (service-account-token mode)")
	validateOnly := flag.Bool("validate-only", false, "exit after registering the plugins, printing ok")
	flag.Parse()
	if *config == "" || *binDir == "" || flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "%s: --config and --bin-dir are required and no arguments are taken\n", name)
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*config, *binDir, *kubeconfig, *validateOnly); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}

func run(config, binDir, kubeconfig string, validateOnly bool) error {
	// Beta and on by default in 1.37, but set it explicitly: without it the
	// plugin package rejects tokenAttributes and ignores pod coordinates.
	gate := string(features.KubeletServiceAccountTokenForCredentialProviders)
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(map[string]bool{gate: true}); err != nil {
		return fmt.Errorf("enabling feature gate %s: %w", gate, err)
	}
	if !utilfeature.DefaultFeatureGate.Enabled(features.KubeletServiceAccountTokenForCredentialProviders) {
		return fmt.Errorf("feature gate %s is still off", gate)
	}

	getToken, getSA, err := serviceAccountFuncs(kubeconfig)
	if err != nil {
		return err
	}
	// Exactly the kubelet's call (kuberuntime.NewKubeGenericRuntimeManager).
	if err := plugin.RegisterCredentialProviderPlugins(config, binDir, getToken, getSA); err != nil {
		return err
	}
	if validateOnly {
		_, err := fmt.Println("ok")
		return err
	}
	return serve(os.Stdin, os.Stdout)
}

// serviceAccountFuncs stand in for the kubelet's token manager and service
// account lister, calling the API server directly.
func serviceAccountFuncs(kubeconfig string) (
	func(ns, name string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error),
	func(ns, name string) (*v1.ServiceAccount, error),
	error,
) {
	if kubeconfig == "" {
		// Only plugins with tokenAttributes call these; others work without.
		need := errors.New("service-account-token mode needs a kubeconfig: run " + name + " with --kubeconfig")
		noToken := func(string, string, *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
			return nil, need
		}
		noSA := func(string, string) (*v1.ServiceAccount, error) { return nil, need }
		return noToken, noSA, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("loading kubeconfig %s: %w", kubeconfig, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	getToken := func(ns, saName string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
		ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
		defer cancel()
		// The plugin builds the pod-bound TokenRequest; pass it through as is.
		return cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, saName, tr, metav1.CreateOptions{})
	}
	getSA := func(ns, saName string) (*v1.ServiceAccount, error) {
		ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
		defer cancel()
		return cs.CoreV1().ServiceAccounts(ns).Get(ctx, saName, metav1.GetOptions{})
	}
	return getToken, getSA, nil
}

// serve answers one JSON line per input line (blank lines included, so a
// caller can always read exactly one reply per line written) until EOF.
func serve(in io.Reader, out io.Writer) error {
	r := bufio.NewReader(in)
	w := bufio.NewWriter(out)
	for {
		line, readErr := r.ReadBytes('\n')
		if readErr != nil && readErr != io.EOF {
			return readErr
		}
		if readErr == io.EOF && len(line) == 0 {
			return nil
		}
		b, err := json.Marshal(handle(line))
		if err != nil {
			return err
		}
		if _, err := w.Write(append(b, '\n')); err != nil {
			return err
		}
		if err := w.Flush(); err != nil {
			return err
		}
		if readErr == io.EOF {
			return nil
		}
	}
}

func handle(line []byte) any {
	if len(bytes.TrimSpace(line)) == 0 {
		return errorReply{Error: "empty request"}
	}
	var req request
	dec := json.NewDecoder(bytes.NewReader(line))
	// A misspelt field (serviceAccount) would otherwise pass silently;
	// encoding/json still matches names case-insensitively.
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return errorReply{Error: "bad request: " + err.Error()}
	}
	switch req.Op {
	case "lookup":
		// A new keyring per lookup, as the kubelet makes one per image pull.
		kr := plugin.NewExternalCredentialProviderDockerKeyring(req.PodNamespace, req.PodName, req.PodUID, req.ServiceAccountName)
		found, auths := lookup(kr, req.Image)
		return lookupReply{Image: req.Image, Found: found, Auths: auths, Execs: execs()}
	case "bench":
		if req.N <= 0 {
			return errorReply{Error: "bench needs n > 0"}
		}
		before := execs()
		start := time.Now()
		for i := 0; i < req.N; i++ {
			kr := plugin.NewExternalCredentialProviderDockerKeyring(req.PodNamespace, req.PodName, req.PodUID, req.ServiceAccountName)
			kr.Lookup(req.Image)
		}
		secs := time.Since(start).Seconds()
		after := execs()
		return benchReply{Image: req.Image, N: req.N, Seconds: secs, LookupsPerSecond: float64(req.N) / secs, Execs: after, ExecsDuring: after - before}
	case "match":
		ok, err := credentialprovider.URLsMatchStr(req.Pattern, req.Image)
		rep := matchReply{Pattern: req.Pattern, Image: req.Image, Matched: ok}
		if err != nil {
			rep.Error = err.Error()
		}
		return rep
	default:
		return errorReply{Error: fmt.Sprintf("unknown op %q (want lookup, bench or match)", req.Op)}
	}
}

func lookup(kr credentialprovider.DockerKeyring, image string) (bool, []auth) {
	tracked, found := kr.Lookup(image)
	auths := make([]auth, 0, len(tracked))
	for _, a := range tracked {
		auths = append(auths, auth{Username: a.Username, Password: a.Password})
	}
	return found, auths
}

// execs sums the sample count of the plugin package's exec-duration
// histogram over all plugins. A gathering error is logged and whatever was
// gathered is still counted, so a reply never fails for want of it.
func execs() uint64 {
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		klog.ErrorS(err, "gathering metrics")
	}
	var n uint64
	for _, f := range families {
		if f.GetName() != execMetric {
			continue
		}
		for _, m := range f.GetMetric() {
			n += m.GetHistogram().GetSampleCount()
		}
	}
	return n
}
