package devenv

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"os"
	"strings"
)

// Loopback slots: an environment's VIPs are a /23 of 127.250.0.0/15 and
// its node addresses a /22 of 127.252.0.0/14, both at the same slot.
var (
	vipSlots  = netip.MustParsePrefix("127.250.0.0/15")
	nodeSlots = netip.MustParsePrefix("127.252.0.0/14")
)

const slotCount = 256

// slotOf is the slot whose VIP or node range holds a, if any.
func slotOf(a netip.Addr) (uint32, bool) {
	if !a.Is4() {
		return 0, false
	}
	b := a.As4()
	v := binary.BigEndian.Uint32(b[:])
	switch {
	case vipSlots.Contains(a):
		return (v - 127<<24 - 250<<16) / 512, true
	case nodeSlots.Contains(a):
		return (v - 127<<24 - 252<<16) / 1024, true
	}
	return 0, false
}

// pickSlot is the first slot from start on (wrapping) that no socket uses:
// a random start spreads environments, skipping used slots keeps two that
// run at once (make demo and the tests, or two test packages) from
// sharing addresses. With every slot used, start.
func pickSlot(used map[uint32]bool, start uint32) uint32 {
	for i := range uint32(slotCount) {
		if s := (start + i) % slotCount; !used[s] {
			return s
		}
	}
	return start % slotCount
}

// slotsInUse are the slots of the IPv4 addresses of this network
// namespace's TCP and UDP sockets (/proc/net/tcp, udp): a running
// environment's load balancers listen on its VIPs and its simulated nodes
// on their addresses.
func slotsInUse() map[uint32]bool {
	used := map[uint32]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/udp"} {
		file, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(file)
		for sc.Scan() {
			if a, ok := procNetLocalAddr(sc.Text()); ok {
				if s, ok := slotOf(a); ok {
					used[s] = true
				}
			}
		}
		_ = file.Close()
	}
	return used
}

// procNetLocalAddr parses the local address of a /proc/net/{tcp,udp} line
// ("  0: 0100007F:1F90 ..."): the IPv4 address in the host's byte order.
func procNetLocalAddr(line string) (netip.Addr, bool) {
	fields := strings.Fields(line)
	if len(fields) < 2 {
		return netip.Addr{}, false
	}
	ip, _, ok := strings.Cut(fields[1], ":")
	raw, err := hex.DecodeString(ip)
	if !ok || err != nil || len(raw) != 4 {
		return netip.Addr{}, false
	}
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], binary.NativeEndian.Uint32(raw))
	return netip.AddrFrom4(b), true
}
