package vpc

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// NetnsPath is where ip(8) keeps a named network namespace.
func NetnsPath(name string) string { return filepath.Join("/run/netns", name) }

// netnsInode identifies a named namespace: the inode its bind mount shows.
func netnsInode(name string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(NetnsPath(name), &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// InNetns runs fn on a thread switched into the named namespace. The thread
// is locked for the call and switched back after; if switching back fails
// it stays locked, so the runtime retires it rather than reuse it (Go never
// clones new threads from a locked, modified one).
func InNetns(path string, fn func() error) error {
	target, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("network namespace %s: %w", path, err)
	}
	defer target.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer self.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("entering %s: %w", path, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("leaving %s: %w (thread retired)", path, err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// ListenIn opens a listener inside a network namespace: the socket stays
// in it after the thread leaves, so a process on the host serves an
// address only that namespace has (the VPC gateway) without binding any
// host interface.
func ListenIn(path, network, addr string) (net.Listener, error) {
	var l net.Listener
	err := InNetns(path, func() error {
		var err error
		l, err = net.Listen(network, addr)
		return err
	})
	return l, err
}

// ListenPacketIn is ListenIn for datagram sockets.
func ListenPacketIn(path, network, addr string) (net.PacketConn, error) {
	var c net.PacketConn
	err := InNetns(path, func() error {
		var err error
		c, err = net.ListenPacket(network, addr)
		return err
	})
	return c, err
}

// writeSysctlIn writes a per-namespace sysctl (net.*) inside a namespace:
// the file resolves to the namespace of the thread that opens it.
func writeSysctlIn(path, key, value string) error {
	return InNetns(path, func() error {
		return os.WriteFile(filepath.Join("/proc/sys", filepath.FromSlash(dotsToSlashes(key))), []byte(value), 0o644)
	})
}

func dotsToSlashes(key string) string {
	b := []byte(key)
	for i, c := range b {
		if c == '.' {
			b[i] = '/'
		}
	}
	return string(b)
}
