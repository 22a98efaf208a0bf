package netproxy

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
)

// socketOwner returns which of pids holds the TCP socket whose local end is
// local and remote end remote (IPv4), read from /proc/net/tcp and
// /proc/<pid>/fd: a kubelet proves who dialed it, whatever the source
// address (on loopback every dialer's source is 127.0.0.1).
func socketOwner(local, remote netip.AddrPort, pids map[string]int) (string, error) {
	inode, err := tcpInode(local, remote)
	if err != nil {
		return "", err
	}
	want := "socket:[" + inode + "]"
	for name, pid := range pids {
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if link, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", pid), fd.Name())); err == nil && link == want {
				return name, nil
			}
		}
	}
	return "", fmt.Errorf("socket %s→%s (inode %s) is held by none of %v", local, remote, inode, pids)
}

func tcpInode(local, remote netip.AddrPort) (string, error) {
	data, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return "", err
	}
	l, r := procAddr(local), procAddr(remote)
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) >= 10 && f[1] == l && f[2] == r {
			return f[9], nil
		}
	}
	return "", fmt.Errorf("no TCP socket %s→%s in /proc/net/tcp", local, remote)
}

// procAddr formats an IPv4 address as /proc/net/tcp does: the address as a
// native-endian (little on amd64/arm64) 32-bit hex number, ':', the port in hex.
func procAddr(ap netip.AddrPort) string {
	a := ap.Addr().Unmap().As4()
	return fmt.Sprintf("%08X:%04X", binary.LittleEndian.Uint32(a[:]), ap.Port())
}
