package manifests

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	apiserverv1beta1 "k8s.io/apiserver/pkg/apis/apiserver/v1beta1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/portside-io/portside/internal/cli"
	"github.com/portside-io/portside/internal/testenv"
)

const netproxyDeployDir = "../../../deploy/network-proxy"

// TestNetworkProxyManifests: every object of deploy/network-proxy is valid
// for a real kube-apiserver (server-side dry run), the
// EgressSelectorConfiguration decodes strictly with the upstream types and
// names the socket the server listens on, and every container command line
// parses with the `portside` subcommand it runs.
func TestNetworkProxyManifests(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(netproxyDeployDir, "*.yaml"))
	if err != nil || len(files) != 4 {
		t.Fatalf("deploy/network-proxy: %v %v", files, err)
	}
	client := testenv.Client(t)
	ctx := context.Background()
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	// No kube-controller-manager here makes the default ServiceAccount the
	// static pod's admission looks for.
	if _, err := client.CoreV1().ServiceAccounts("kube-system").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	var egressSocket, serverSocket string
	kinds := map[string]int{}
	for _, file := range files {
		for i, doc := range splitYAML(t, file) {
			var meta metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				t.Fatalf("%s #%d: %v", file, i, err)
			}
			kinds[meta.Kind]++
			if meta.Kind == "EgressSelectorConfiguration" {
				var cfg apiserverv1beta1.EgressSelectorConfiguration
				if err := yaml.UnmarshalStrict(doc, &cfg); err != nil {
					t.Fatalf("%s: %v", file, err)
				}
				for _, sel := range cfg.EgressSelections {
					if sel.Name == "cluster" && sel.Connection.ProxyProtocol == apiserverv1beta1.ProtocolGRPC && sel.Connection.Transport != nil && sel.Connection.Transport.UDS != nil {
						egressSocket = sel.Connection.Transport.UDS.UDSName
					}
				}
				continue
			}
			obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
			if err != nil {
				t.Fatalf("%s #%d: %v", file, i, err)
			}
			switch o := obj.(type) {
			case *corev1.ServiceAccount:
				_, err = client.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, dry)
			case *rbacv1.ClusterRole:
				_, err = client.RbacV1().ClusterRoles().Create(ctx, o, dry)
			case *rbacv1.ClusterRoleBinding:
				_, err = client.RbacV1().ClusterRoleBindings().Create(ctx, o, dry)
			case *rbacv1.Role:
				_, err = client.RbacV1().Roles(o.Namespace).Create(ctx, o, dry)
			case *rbacv1.RoleBinding:
				_, err = client.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, dry)
			case *corev1.Pod:
				serverSocket = flagValue(o.Spec.Containers[0].Command, "--uds-name")
				checkCommands(t, file, o.Spec.Containers)
				_, err = client.CoreV1().Pods(o.Namespace).Create(ctx, o, dry)
			case *appsv1.DaemonSet:
				checkCommands(t, file, o.Spec.Template.Spec.Containers)
				_, err = client.AppsV1().DaemonSets(o.Namespace).Create(ctx, o, dry)
			default:
				t.Fatalf("%s #%d: unexpected %T", file, i, obj)
			}
			if err != nil {
				t.Errorf("%s: %s rejected by kube-apiserver: %v", file, describe(obj), err)
			}
		}
	}
	// Two ClusterRoleBindings: TokenReviews (system:auth-delegator) and
	// reading Nodes, which bound agents' claims are checked against.
	for k, n := range map[string]int{"EgressSelectorConfiguration": 1, "Pod": 1, "ClusterRole": 1, "ClusterRoleBinding": 2,
		"Role": 1, "RoleBinding": 1, "ServiceAccount": 1, "DaemonSet": 1} {
		if kinds[k] != n {
			t.Errorf("want %d %s, got %d (%v)", n, k, kinds[k], kinds)
		}
	}
	if egressSocket == "" || egressSocket != serverSocket {
		t.Errorf("the EgressSelectorConfiguration's cluster socket %q is not the proxy-server's --uds-name %q", egressSocket, serverSocket)
	}
}

// checkCommands parses each `/portside <subcommand> flags...` command line
// with the real command: an unknown flag or a bad value fails.
func checkCommands(t *testing.T, file string, containers []corev1.Container) {
	t.Helper()
	for _, c := range containers {
		if err := parseCommand(c.Command); err != nil {
			t.Errorf("%s: container %s: %v", file, c.Name, err)
		}
	}
}

func parseCommand(command []string) error {
	if len(command) < 2 || command[0] != "/portside" {
		return fmt.Errorf("runs %v, want /portside <subcommand>", command)
	}
	cmd, rest, err := cli.NewRootCommand().Find(command[1:])
	if err != nil || cmd.Name() != command[1] {
		return fmt.Errorf("no subcommand %q (%v)", command[1], err)
	}
	if err := cmd.ParseFlags(rest); err != nil {
		return err
	}
	if len(cmd.Flags().Args()) > 0 {
		return fmt.Errorf("stray arguments %v", cmd.Flags().Args())
	}
	return nil
}

// TestParseCommandRejects: the check above does catch bad command lines.
func TestParseCommandRejects(t *testing.T) {
	for _, bad := range [][]string{
		{"/portside", "proxy-agent", "--no-such-flag=1"},
		{"/portside", "proxy-server", "--agent-port=eighty"},
		{"/portside", "no-such-command"},
		{"/proxy-server", "--mode=grpc"},
	} {
		if err := parseCommand(bad); err == nil {
			t.Errorf("%v parsed", bad)
		}
	}
}

func flagValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

func describe(obj runtime.Object) string {
	if m, ok := obj.(metav1.Object); ok {
		return obj.GetObjectKind().GroupVersionKind().Kind + " " + m.GetNamespace() + "/" + m.GetName()
	}
	return "object"
}

func splitYAML(t *testing.T, file string) [][]byte {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	r := utilyaml.NewYAMLReader(bufioReader(data))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if len(bytes.TrimSpace(doc)) > 0 {
			docs = append(docs, doc)
		}
	}
}

func bufioReader(data []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(data)) }
