package client

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
	"strings"
)

// maxTokenFileBytes bounds a token file: a token is a line, not a dump.
const maxTokenFileBytes = 64 << 10

// CheckTokenFileMode refuses a token file that users other than its owner
// may read or write: the cloud's token is full control of the cloud (and a
// writable file lets another user swap in a token of theirs), so it is
// refused as ssh refuses a shared private key, with the fix in the error.
// Windows has no POSIX modes; there the check is left to the file's ACL.
func CheckTokenFileMode(path string, mode fs.FileMode) error {
	if runtime.GOOS == "windows" || mode.Perm()&0o077 == 0 {
		return nil
	}
	return fmt.Errorf("token file %s has mode %04o: group or others may read or write it, and it holds a secret; run `chmod 600 %s`", path, mode.Perm(), path)
}

// ReadTokenFile reads the bearer token in path (one line, surrounding space
// trimmed), refusing a file readable by group or others
// (CheckTokenFileMode) or an empty one. The mode is taken from the open
// file, so it is the mode of the very bytes read. A missing file's error
// matches fs.ErrNotExist.
func ReadTokenFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	if err := CheckTokenFileMode(path, fi.Mode()); err != nil {
		return "", err
	}
	data, err := io.ReadAll(io.LimitReader(f, maxTokenFileBytes+1))
	if err != nil {
		return "", fmt.Errorf("token file %s: %w", path, err)
	}
	if len(data) > maxTokenFileBytes {
		return "", fmt.Errorf("token file %s is larger than %d bytes: it should hold one token", path, maxTokenFileBytes)
	}
	tok := strings.TrimSpace(string(data))
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty: put the cloud's token in it", path)
	}
	return tok, nil
}
