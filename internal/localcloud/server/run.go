package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/portside-io/portside/pkg/localcloud/client"
)

// Files a running cloud keeps in its data directory, so that clients on the
// same machine (CLI verbs, `portside up`, tests) find it.
const (
	StateFile = "state.db"
	TokenFile = "token"
	// ViewerTokenFile logs in to the web console read-only.
	ViewerTokenFile = "viewer-token"
	EndpointFile    = "endpoint"
	// ScopedTokenFile lists tokens limited to named operations, one
	// `<token> <scope>[,<scope>...]` a line; read if it exists.
	ScopedTokenFile = "scoped-tokens"
	// RegistryEndpointFile holds the served registry's host:port.
	RegistryEndpointFile = "registry-endpoint"
)

// RunOptions configure Run.
type RunOptions struct {
	Options
	// DataDir holds the state, token and endpoint files.
	DataDir string
	// Listen is the API address; port 0 picks a free port.
	Listen string
	// RegistryListen is the served OCI registry's address (port 0 picks a
	// free port; <DataDir>/registry-endpoint tells it); "" serves none.
	RegistryListen string
	// TokenFile overrides <DataDir>/token; it is created with a random token
	// if it does not exist.
	TokenFile string
	// ViewerTokenFile overrides <DataDir>/viewer-token (created like the
	// token file): the web console's read-only token.
	ViewerTokenFile string
	// ScopedTokenFile overrides <DataDir>/scoped-tokens. Unlike the token
	// files it is never generated: the default is read only if it exists,
	// an explicit one must exist.
	ScopedTokenFile string
	// Ready, if set, is called with the API endpoint once serving.
	Ready func(endpoint string)
}

// Run serves the cloud until ctx is done, then shuts down gracefully.
func Run(ctx context.Context, opts RunOptions) error {
	logger := klog.FromContext(ctx)
	if opts.DataDir == "" {
		return errors.New("--data-dir must not be empty")
	}
	if err := os.MkdirAll(opts.DataDir, 0o755); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	if opts.TokenFile == "" {
		opts.TokenFile = filepath.Join(opts.DataDir, TokenFile)
	}
	token, err := EnsureToken(opts.TokenFile)
	if err != nil {
		return err
	}
	opts.Token = token
	if opts.ViewerTokenFile == "" {
		opts.ViewerTokenFile = filepath.Join(opts.DataDir, ViewerTokenFile)
	}
	if opts.ViewerToken, err = EnsureToken(opts.ViewerTokenFile); err != nil {
		return err
	}
	if opts.ViewerToken == opts.Token {
		return fmt.Errorf("the viewer token (%s) equals the API token: it would give read-write access; use another", opts.ViewerTokenFile)
	}
	if opts.ScopedTokens, err = readScopedTokens(opts.ScopedTokenFile, filepath.Join(opts.DataDir, ScopedTokenFile)); err != nil {
		return err
	}
	srv, err := New(ctx, filepath.Join(opts.DataDir, StateFile), opts.Options)
	if err != nil {
		return err
	}
	defer srv.Close()
	// SIGHUP re-reads the token files: a rotation without a restart. Asked
	// for before the endpoint file exists, so a client that finds the cloud
	// may signal it.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go reloadOnSignal(ctx, srv, opts, hup)

	// The registry first: once the endpoint file exists, clients may ask
	// for the served registry.
	errc := make(chan error, 2)
	regHost, rs, err := serveRegistry(ctx, srv, opts, errc)
	if err != nil {
		return err
	}
	if rs != nil {
		defer func() { _ = os.Remove(filepath.Join(opts.DataDir, RegistryEndpointFile)) }()
		defer func() { _ = rs.Close() }() // after a graceful Shutdown, a no-op
	}

	if err := srv.exposeRegistry(ctx, regHost, opts.DataDir); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return fmt.Errorf("cannot listen on %s: %w (is another cloud running? pick another --listen)", opts.Listen, err)
	}
	endpoint := "http://" + ln.Addr().String()
	// Before the endpoint file: once it exists, clients may look for this one.
	if err := srv.exposeAPI(ctx, ln.Addr().String(), opts.DataDir); err != nil {
		_ = ln.Close()
		return err
	}
	defer func() { _ = os.Remove(filepath.Join(opts.DataDir, VPCEndpointFile)) }()
	if err := os.WriteFile(filepath.Join(opts.DataDir, EndpointFile), []byte(endpoint+"\n"), 0o644); err != nil {
		_ = ln.Close()
		return err
	}
	defer func() { _ = os.Remove(filepath.Join(opts.DataDir, EndpointFile)) }()

	hs := apiServer(ctx, srv.Handler())
	go func() { errc <- hs.Serve(ln) }()
	servers := []*http.Server{hs}
	if rs != nil {
		servers = append(servers, rs)
	}
	logger.Info("Local cloud serving", "endpoint", endpoint, "registry", regHost, "dataDir", opts.DataDir,
		"vipPool", srv.opts.VIPPoolV4, "nodePool", srv.opts.NodePoolV4)
	if opts.Ready != nil {
		opts.Ready(endpoint)
	}
	select {
	case err := <-errc:
		for _, s := range servers {
			_ = s.Close()
		}
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var errs []error
	for _, s := range servers {
		errs = append(errs, s.Shutdown(shutdownCtx))
	}
	return errors.Join(errs...)
}

// serveRegistry starts the served registry on opts.RegistryListen and
// writes <DataDir>/registry-endpoint; it returns the registry's host:port,
// and its server, or none (recording no served registry) when
// RegistryListen is empty.
func serveRegistry(ctx context.Context, srv *Server, opts RunOptions, errc chan<- error) (string, *http.Server, error) {
	if opts.RegistryListen == "" {
		_ = os.Remove(filepath.Join(opts.DataDir, RegistryEndpointFile))
		return "", nil, srv.recordServedRegistry("")
	}
	ln, err := net.Listen("tcp", opts.RegistryListen)
	if err != nil {
		return "", nil, fmt.Errorf("cannot listen on %s for the registry: %w (pick another --registry-listen)", opts.RegistryListen, err)
	}
	host := ln.Addr().String()
	h, err := srv.ServeRegistry(host)
	if err == nil {
		err = os.WriteFile(filepath.Join(opts.DataDir, RegistryEndpointFile), []byte(host+"\n"), 0o644)
	}
	if err != nil {
		_ = ln.Close()
		return "", nil, err
	}
	rs := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       5 * time.Minute, // blob uploads
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	go func() { errc <- rs.Serve(ln) }()
	return host, rs, nil
}

// API serving timeouts: a client slow to send its request (bodies are at
// most 4 MiB), slow to read the answer, or idle, does not hold a
// connection and a goroutine for long.
const (
	apiReadHeaderTimeout = 10 * time.Second
	apiReadTimeout       = time.Minute
	apiWriteTimeout      = time.Minute
	apiIdleTimeout       = 2 * time.Minute
)

func apiServer(ctx context.Context, h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: apiReadHeaderTimeout,
		ReadTimeout:       apiReadTimeout,
		WriteTimeout:      apiWriteTimeout,
		IdleTimeout:       apiIdleTimeout,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
}

// reloadOnSignal rotates srv's tokens to its token files' contents at
// each signal on hup, until ctx is done. A failed reload is logged, naming
// the file and the fix, and the tokens in force stay.
func reloadOnSignal(ctx context.Context, srv *Server, opts RunOptions, hup <-chan os.Signal) {
	logger := klog.FromContext(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		changed, err := srv.ReloadTokens(opts.TokenFile, opts.ViewerTokenFile, opts.ScopedTokenFile, filepath.Join(opts.DataDir, ScopedTokenFile))
		if err != nil {
			logger.Error(err, "Tokens not reloaded (SIGHUP): the tokens in force stay; fix the file and send SIGHUP again")
			continue
		}
		if len(changed) == 0 {
			logger.Info("Tokens reloaded (SIGHUP): no token changed")
		}
	}
}

// EnsureToken reads the token file, creating it with a random token when
// it does not exist.
func EnsureToken(path string) (string, error) {
	// Refused if group or others may read it (client.ReadTokenFile): the
	// cloud would otherwise serve under a token other users may know.
	tok, err := client.ReadTokenFile(path)
	if err == nil {
		return tok, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	buf := make([]byte, 24)
	if _, err := rand.Read(buf); err != nil {
		return "", err
	}
	tok = hex.EncodeToString(buf)
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write token file: %w", err)
	}
	return tok, nil
}

// readScopedTokens reads the scoped-token file: explicit when set (it must
// exist), else the default if it exists. Like the token files, one group or
// others may read is refused.
func readScopedTokens(explicit, def string) ([]ScopedToken, error) {
	path := explicit
	if path == "" {
		path = def
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) && explicit == "" {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("--scoped-token-file: %w", err)
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("--scoped-token-file: %w", err)
	}
	if err := client.CheckTokenFileMode(path, fi.Mode()); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, maxScopedTokenFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("--scoped-token-file %s: %w", path, err)
	}
	if len(data) > maxScopedTokenFileBytes {
		return nil, fmt.Errorf("--scoped-token-file %s is larger than %d bytes: it should hold a few token lines", path, maxScopedTokenFileBytes)
	}
	return ParseScopedTokens(path, string(data))
}

// maxScopedTokenFileBytes bounds the scoped-token file (a line is ~100 bytes).
const maxScopedTokenFileBytes = 1 << 20
