package server

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// udsMode is the frontend socket's mode: kube-apiserver's user or group
// may connect, nobody else. Connecting to the socket is dialling into the
// cluster network, with no other check.
const udsMode = 0o660

// maxUnixPath is the longest sun_path Linux accepts (108 bytes with NUL).
const maxUnixPath = 107

// listenUnix listens on a unix socket at path that is never reachable with
// a mode looser than udsMode.
//
// bind(2) creates the socket file with 0777 &^ umask, and chmod can only
// follow it: a socket bound at path directly is open to everyone between
// the two calls (or for ever, with the usual umask 022 and no chmod).
// Changing the umask around bind (upstream does) is process-wide: it races
// every other goroutine creating files, here and in tests. So the socket
// is bound inside a fresh directory of mode 0700 beside path, where no
// other user can reach it, chmod'ed there, and only then given its name by
// a hard link (replace false: fails if path exists, as bind would) or a
// rename (replace true: atomically replaces a stale socket, so a
// kube-apiserver retrying never sees the path missing). Both stay on one
// file system, and neither changes the inode's mode.
func listenUnix(path string, replace bool) (net.Listener, error) {
	if strings.HasPrefix(path, "@") {
		// Linux's abstract namespace: no file, no mode (checkSecurity asks
		// for --insecure-server-port).
		return net.Listen("unix", path)
	}
	if len(path) > maxUnixPath {
		return nil, fmt.Errorf("--uds-name %s is %d bytes, longer than a unix socket's path may be (%d): clients could not connect; use a shorter path", path, len(path), maxUnixPath)
	}
	dir, err := os.MkdirTemp(filepath.Dir(path), ".p")
	if err != nil {
		return nil, fmt.Errorf("frontend socket %s: creating its private staging directory: %w", path, err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	staged := filepath.Join(dir, "s")
	bindName := staged
	if len(staged) > maxUnixPath {
		// The staging name is 14 bytes longer than the directory; when
		// that passes sun_path's limit but path does not, bind through
		// the directory's descriptor instead (Linux resolves
		// /proc/self/fd/N to it), which is as short whatever the path.
		d, err := os.Open(dir)
		if err != nil {
			return nil, fmt.Errorf("frontend socket %s: %w", path, err)
		}
		defer func() { _ = d.Close() }()
		bindName = fmt.Sprintf("/proc/self/fd/%d/s", d.Fd())
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: bindName, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("frontend socket %s: %w", path, err)
	}
	// Go would unlink the staged name on Close; the socket's name is path.
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(staged, udsMode); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("frontend socket %s: %w", path, err)
	}
	if replace {
		err = os.Rename(staged, path)
	} else if err = os.Link(staged, path); errors.Is(err, fs.ErrExist) {
		err = fmt.Errorf("%s already exists; remove it or set --delete-existing-uds-file", path)
	}
	if err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("frontend socket: %w", err)
	}
	return &unixListener{UnixListener: ln, path: path}, nil
}

// unixListener removes its socket file when closed, as Go's own does for
// the name it bound.
type unixListener struct {
	*net.UnixListener
	path string
	once sync.Once
}

func (l *unixListener) Close() error {
	err := l.UnixListener.Close()
	l.once.Do(func() { _ = os.Remove(l.path) })
	return err
}
