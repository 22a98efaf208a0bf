package devenv

import (
	"net/netip"
	"testing"
)

func TestPickSlot(t *testing.T) {
	all := map[uint32]bool{}
	for i := range uint32(slotCount) {
		all[i] = true
	}
	for _, tc := range []struct {
		name  string
		used  map[uint32]bool
		start uint32
		want  uint32
	}{
		{"nothing used: the random start", nil, 17, 17},
		{"start used: the next", map[uint32]bool{17: true}, 17, 18},
		{"a run used: after it", map[uint32]bool{17: true, 18: true, 19: true}, 17, 20},
		{"wraps past the last slot", map[uint32]bool{255: true}, 255, 0},
		{"others used, start free", map[uint32]bool{3: true, 200: true}, 100, 100},
		{"every slot used: the start", all, 42, 42},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pickSlot(tc.used, tc.start); got != tc.want {
				t.Errorf("pickSlot = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestSlotOf(t *testing.T) {
	for _, tc := range []struct {
		addr string
		want uint32
		ok   bool
	}{
		{"127.250.0.1", 0, true},
		{"127.250.2.0", 1, true}, // VIPs: a /23 per slot
		{"127.251.255.255", 255, true},
		{"127.252.4.1", 1, true}, // nodes: a /22 per slot
		{"127.255.255.254", 255, true},
		{"127.249.0.1", 0, false}, // test clouds' ranges
		{"127.0.0.1", 0, false},
		{"192.0.2.10", 0, false},
		{"::1", 0, false},
	} {
		got, ok := slotOf(netip.MustParseAddr(tc.addr))
		if got != tc.want || ok != tc.ok {
			t.Errorf("slotOf(%s) = %d, %v; want %d, %v", tc.addr, got, ok, tc.want, tc.ok)
		}
	}
}

func TestProcNetLocalAddr(t *testing.T) {
	for _, tc := range []struct {
		line, want string
		ok         bool
	}{
		{"   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0", "127.0.0.1", true},
		{"   1: 0102FA7F:0050 00000000:0000 0A", "127.250.2.1", true},
		{"  sl  local_address rem_address   st", "", false},
		{"", "", false},
		{"   2: zz:0050", "", false},
	} {
		got, ok := procNetLocalAddr(tc.line)
		if ok != tc.ok || (ok && got.String() != tc.want) {
			t.Errorf("procNetLocalAddr(%q) = %v, %v; want %s, %v", tc.line, got, ok, tc.want, tc.ok)
		}
	}
}
