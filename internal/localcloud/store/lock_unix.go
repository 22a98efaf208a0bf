//go:build unix

package store

import (
	"os"
	"syscall"
)

// lockedElsewhere reports whether another process holds bbolt's lock on
// path: its file is then being written, not damaged.
func lockedElsewhere(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		return err == syscall.EWOULDBLOCK
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}
