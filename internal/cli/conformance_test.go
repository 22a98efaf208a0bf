package cli

import (
	"bytes"
	"strings"
	"testing"
)

func TestConformanceNeedsCapabilities(t *testing.T) {
	root := NewRootCommand()
	root.SetArgs([]string{"conformance", "--kubeconfig", "/nonexistent"})
	root.SetOut(&bytes.Buffer{})
	err := root.Execute()
	if err == nil || !strings.Contains(err.Error(), "--capabilities") || !strings.Contains(err.Error(), "--cloud-provider") {
		t.Errorf("err = %v, want one naming --capabilities and --cloud-provider", err)
	}
	root = NewRootCommand()
	root.SetArgs([]string{"conformance", "--capabilities", "instances,nope"})
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("err = %v, want the unknown capability", err)
	}
}

func TestConformanceList(t *testing.T) {
	root := NewRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"conformance", "--list", "-v", "--focus", "^nodes/"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "nodes/lifecycle") || !strings.Contains(out.String(), "instances,instance-deletion") || strings.Contains(out.String(), "routes/") {
		t.Errorf("--list output:\n%s", out.String())
	}
}
