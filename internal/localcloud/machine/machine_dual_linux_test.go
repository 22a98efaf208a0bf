package machine_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portside-io/portside/internal/hostsnap"
	"github.com/portside-io/portside/internal/localcloud/machine"
	"github.com/portside-io/portside/internal/localcloud/vpc"
	"github.com/portside-io/portside/internal/localcloud/vpc/vpctest"
)

// TestMachineDualStack: a machine of a dual-stack VPC has an address of
// each family on its eth0 and a default route of each; the host reaches a
// service in it at both; Destroy leaves nothing on the host.
func TestMachineDualStack(t *testing.T) {
	vpctest.RequireRoot(t)
	before, err := hostsnap.Take()
	if err != nil {
		t.Fatal(err)
	}
	nw, r := vpctest.StartDual(t)
	mdir := filepath.Join(t.TempDir(), "m1")
	id := fmt.Sprintf("t%d", time.Now().UnixNano()%1e9)
	a4, a6 := r.Subnet.Addr().Next().Next(), r.Subnet6.Addr().Next().Next()
	m, err := machine.Create(context.Background(), nw, machine.Config{Name: "m1", ID: id, Index: 1, Addr: a4, Addr6: a6, Dir: mdir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = machine.Destroy(context.Background(), mdir) })
	if m.Addr6() != a6 {
		t.Errorf("Addr6() = %v, want %v", m.Addr6(), a6)
	}
	for _, a := range []netip.Addr{a4, a6} {
		l, err := vpc.ListenIn(m.Netns(), "tcp", netip.AddrPortFrom(a, 0).String())
		if err != nil {
			t.Fatalf("listen in the machine at %v: %v", a, err)
		}
		defer l.Close()
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				fmt.Fprintf(c, "machine at %v\n", a)
				c.Close()
			}
		}()
		c, err := net.DialTimeout("tcp", l.Addr().String(), 3*time.Second)
		if err != nil {
			t.Fatalf("the host reaches the machine at %v: %v", a, err)
		}
		line, _ := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if want := fmt.Sprintf("machine at %v\n", a); line != want {
			t.Errorf("from %v: %q, want %q", a, line, want)
		}
	}
	if err := machine.Destroy(context.Background(), mdir); err != nil {
		t.Fatal(err)
	}
	if err := vpc.Down(context.Background(), nw.StateFile()); err != nil {
		t.Fatal(err)
	}
	after, err := hostsnap.Take()
	if err != nil {
		t.Fatal(err)
	}
	v4, block6 := r.Subnet.Addr().String(), r.Block6.Addr().String()
	mine := []string{id, v4[:strings.LastIndex(v4, ".")+1], strings.TrimSuffix(block6, "::")}
	if d := hostsnap.Diff(before.Mentioning(mine...), after.Mentioning(mine...)); d != "" {
		t.Errorf("the host differs after Destroy and Down:\n%s", d)
	}
}
