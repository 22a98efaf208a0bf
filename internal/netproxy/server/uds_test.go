package server

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
)

// TestFrontendSocketMode: the socket New creates is mode 0660 (bind alone
// gives 0777 &^ umask, 0755 with the usual umask), no staging directory is
// left beside it, it answers, and it is gone after the server stops.
func TestFrontendSocketMode(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "konnectivity-server.socket")
	s, err := New(Options{UDSName: sock, DeleteUDSFile: true, AgentAddress: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		if _, err := os.Lstat(sock); !os.IsNotExist(err) {
			t.Errorf("socket left behind after Run: %v", err)
		}
	}()
	fi, err := os.Lstat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o660 {
		t.Errorf("frontend socket is %v, want a socket of mode 0660", fi.Mode())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("beside the socket: %v, want only the socket", entries)
	}
	c, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		t.Fatalf("dialling the socket: %v", err)
	}
	_ = c.Close()
}

// TestFrontendSocketExisting: --delete-existing-uds-file replaces a stale
// file (atomically: see listenUnix); without it an existing file is an
// error that names the flag, and is left alone.
func TestFrontendSocketExisting(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "s")
	if err := os.WriteFile(sock, []byte("stale"), 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := New(Options{UDSName: sock, AgentAddress: "127.0.0.1:0"}); err == nil || !strings.Contains(err.Error(), "--delete-existing-uds-file") {
		if s != nil {
			s.closeListeners()
		}
		t.Fatalf("New over an existing file without DeleteUDSFile: %v", err)
	}
	if b, err := os.ReadFile(sock); err != nil || string(b) != "stale" {
		t.Errorf("the existing file was touched: %q %v", b, err)
	}
	s, err := New(Options{UDSName: sock, DeleteUDSFile: true, AgentAddress: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.closeListeners()
	if fi, err := os.Lstat(sock); err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o660 {
		t.Errorf("after replacing: %v %v", fi, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("beside the socket: %v", entries)
	}
}

// TestOptionsRefusesInsecure: the command line's Options runs checkSecurity
// before anything else, so upstream's plaintext defaults do not start.
func TestOptionsRefusesInsecure(t *testing.T) {
	f := NewFlags()
	fs := pflag.NewFlagSet("proxy-server", pflag.ContinueOnError)
	f.AddFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	_, err := f.Options(fs, logr.Discard())
	if err == nil || !strings.Contains(err.Error(), "--insecure-server-port") || !strings.Contains(err.Error(), "--insecure-agent-port") {
		t.Fatalf("Options with upstream's defaults: %v", err)
	}
	if err := fs.Parse([]string{"--insecure-server-port", "--insecure-agent-port", "--server-port=0", "--agent-port=0", "--health-port=0", "--admin-port=0"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Options(fs, logr.Discard()); err != nil {
		t.Fatalf("Options with both --insecure flags: %v", err)
	}
}

// TestFrontendSocketLongPath: a path near sun_path's limit, whose staging
// name would pass it, still gets its socket (bound through the staging
// directory's descriptor) with mode 0660; a path past the limit is refused
// with an error naming --uds-name.
func TestFrontendSocketLongPath(t *testing.T) {
	base := t.TempDir()
	// A directory so deep that dir + "/s.sock" is exactly maxUnixPath bytes.
	dir := filepath.Join(base, strings.Repeat("d", maxUnixPath-len(base)-len("/s.sock")-1))
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s.sock")
	if len(sock) != maxUnixPath {
		t.Fatalf("test path is %d bytes", len(sock))
	}
	ln, err := listenUnix(sock, true)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(sock); err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o660 {
		t.Errorf("long-path socket: %v %v", fi, err)
	}
	go func() {
		if c, err := ln.Accept(); err == nil {
			_ = c.Close()
		}
	}()
	if c, err := net.DialTimeout("unix", sock, 5*time.Second); err != nil {
		t.Errorf("dialling the long-path socket: %v", err)
	} else {
		_ = c.Close()
	}
	_ = ln.Close()
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left after Close: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left in the directory: %v", entries)
	}
	if _, err := listenUnix(sock+"x", true); err == nil || !strings.Contains(err.Error(), "--uds-name") {
		t.Errorf("a path past the limit: %v", err)
	}
}
