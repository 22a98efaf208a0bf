package nodelifecycle

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
)

// TestOnlyGoneNodesAreDeleted: of NotReady nodes whose instance exists,
// is shut down, cannot say whether it is shut down, or whose existence
// the cloud failed to tell (an error: retried), only the one the cloud
// positively reports gone is deleted, and a Ready node stays.
func TestOnlyGoneNodesAreDeleted(t *testing.T) {
	objs := []*corev1.Node{notReady("gone"), notReady("stopped"), notReady("running"), notReady("flaky"), notReady("noshutdown"), node(true, false)}
	objs[5].Name = "ready"
	client := fake.NewClientset()
	nodes := informers.NewSharedInformerFactory(client, 0).Core().V1().Nodes()
	for _, n := range objs {
		n.UID = types.UID("uid-" + n.Name)
		if _, err := client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := nodes.Informer().GetIndexer().Add(n); err != nil {
			t.Fatal(err)
		}
	}
	c := New(Config{Client: client, Nodes: nodes, Instances: fakeInstances{}, Recorder: record.NewFakeRecorder(100), Workers: 1})
	ctx := context.Background()
	var errs []string
	for _, n := range objs {
		if err := c.sync(ctx, n.Name); err != nil {
			errs = append(errs, n.Name)
		}
	}
	if !slices.Equal(errs, []string{"flaky"}) {
		t.Errorf("sync errors for %v, want only flaky's (retried)", errs)
	}
	list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, n := range list.Items {
		left = append(left, n.Name)
	}
	slices.Sort(left)
	if want := []string{"flaky", "noshutdown", "ready", "running", "stopped"}; !slices.Equal(left, want) {
		t.Errorf("nodes left %v, want %v (only gone deleted)", left, want)
	}
}

// TestDeleteIsForTheNodeSeen: the deletion names the UID of the Node the
// decision was made about; a Node recreated under the same name since (a
// new machine) is not deleted for the old one's instance.
func TestDeleteIsForTheNodeSeen(t *testing.T) {
	old := notReady("gone")
	old.UID = "uid-old"
	client := fake.NewClientset()
	nodes := informers.NewSharedInformerFactory(client, 0).Core().V1().Nodes()
	if err := nodes.Informer().GetIndexer().Add(old); err != nil {
		t.Fatal(err)
	}
	var preconditionUID string
	client.PrependReactor("delete", "nodes", func(a clienttesting.Action) (bool, runtime.Object, error) {
		d := a.(clienttesting.DeleteAction)
		if p := d.GetDeleteOptions().Preconditions; p != nil && p.UID != nil {
			preconditionUID = string(*p.UID)
			if *p.UID != "uid-new" {
				// The apiserver's answer for a precondition on another UID.
				return true, nil, apierrors.NewConflict(corev1.Resource("nodes"), "gone", nil)
			}
		}
		return true, nil, nil // deleted: only without the precondition or with the new UID
	})
	c := New(Config{Client: client, Nodes: nodes, Instances: fakeInstances{}, Recorder: record.NewFakeRecorder(100), Workers: 1})
	err := c.sync(context.Background(), "gone")
	if preconditionUID != "uid-old" {
		t.Fatalf("delete precondition UID %q, want uid-old (the Node the decision was about)", preconditionUID)
	}
	if err == nil {
		t.Error("a delete refused by its precondition was taken as done")
	}
}
