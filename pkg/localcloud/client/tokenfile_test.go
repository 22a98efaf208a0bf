package client

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestCheckTokenFileMode(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no POSIX modes on Windows")
	}
	for _, tc := range []struct {
		mode fs.FileMode
		ok   bool
	}{
		{0o600, true}, {0o400, true}, {0o700, true}, {0o200, true},
		{0o640, false}, {0o604, false}, {0o644, false}, {0o660, false},
		{0o620, false}, {0o602, false}, {0o610, false}, {0o777, false},
	} {
		err := CheckTokenFileMode("/d/token", tc.mode)
		if (err == nil) != tc.ok {
			t.Errorf("mode %04o: %v, want ok=%v", tc.mode, err, tc.ok)
		}
		if err != nil && !(strings.Contains(err.Error(), "token file /d/token") && strings.Contains(err.Error(), "chmod 600 /d/token") &&
			strings.Contains(err.Error(), fmt.Sprintf("mode %04o", tc.mode))) {
			t.Errorf("mode %04o: error %q must name the file and the fix", tc.mode, err)
		}
	}
}

func TestReadTokenFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string, mode fs.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // not subject to the umask
			t.Fatal(err)
		}
		return p
	}
	if tok, err := ReadTokenFile(write("ok", "  abc\n", 0o600)); err != nil || tok != "abc" {
		t.Errorf("0600 file = %q %v", tok, err)
	}
	shared := write("shared", "abc\n", 0o644)
	if _, err := ReadTokenFile(shared); err == nil || !strings.Contains(err.Error(), "mode 0644") || !strings.Contains(err.Error(), "chmod 600 "+shared) {
		t.Errorf("0644 file: %v, want a refusal naming the mode and the fix", err)
	}
	if _, err := ReadTokenFile(write("empty", "\n", 0o600)); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("empty file: %v", err)
	}
	if _, err := ReadTokenFile(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
}
