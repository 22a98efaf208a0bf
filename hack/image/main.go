// Command image builds the OCI image of portside (`make image`): it
// cross-compiles ./cmd/portside, static, for linux/amd64 and linux/arm64,
// builds the image index with internal/image, writes it into an OCI layout
// and, with --push, pushes it to a registry, e.g. the local cloud's.
//
//	go run ./hack/image --version v1.2.3 [--out _output/image/oci]
//	go run ./hack/image --version v1.2.3 --local-cloud-data-dir _output/up/cloud
//	    (pushes to <registry-endpoint>/portside/portside:v1.2.3 with a push
//	    credential of that cloud)
//
// The build date defaults to $SOURCE_DATE_EPOCH, else to the time of the
// HEAD commit, so that the same commit gives the same image digest.
// Run it from the module's root.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"

	"github.com/portside-io/portside/internal/image"
	"github.com/portside-io/portside/pkg/localcloud/api"
	"github.com/portside-io/portside/pkg/localcloud/client"
)

const versionPkg = "github.com/portside-io/portside/internal/version"

type options struct {
	version, commit, buildDate string
	out, binDir, releaseOut    string
	platforms                  string
	push                       string
	pushInsecure               bool
	cloudDir                   string
	goCmd                      string
}

func main() {
	var o options
	flag.StringVar(&o.version, "version", "", "version to stamp into the binary, the labels and the tag (required)")
	flag.StringVar(&o.commit, "commit", "", "commit to stamp (default: git rev-parse HEAD)")
	flag.StringVar(&o.buildDate, "build-date", "", "build date to stamp, RFC 3339 (default: $SOURCE_DATE_EPOCH, else the HEAD commit's time: reproducible)")
	flag.StringVar(&o.out, "out", "_output/image/oci", "OCI layout directory to write (replaced)")
	flag.StringVar(&o.releaseOut, "release-out", "_output/image/release", "where the manifests of deploy/ and the Helm chart, stamped with this image, go")
	flag.StringVar(&o.binDir, "bin-dir", "_output/image/bin", "where the cross-compiled binaries go (<os>_<arch>/portside)")
	flag.StringVar(&o.platforms, "platforms", "linux/amd64,linux/arm64", "comma-separated os/arch list")
	flag.StringVar(&o.push, "push", "", "push the index to this reference (registry/repository[:tag]); with --local-cloud-data-dir, default <registry-endpoint>/"+image.DefaultRepository+":<version>")
	flag.BoolVar(&o.pushInsecure, "push-insecure", false, "speak plain HTTP to the --push registry (loopback registries always are)")
	flag.StringVar(&o.cloudDir, "local-cloud-data-dir", "", "push to the local cloud of this data directory (<dir>/endpoint, <dir>/token) with a push credential it issues")
	flag.StringVar(&o.goCmd, "go", "go", "go command")
	flag.Parse()
	if flag.NArg() != 0 {
		fmt.Fprintf(os.Stderr, "image: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	start := time.Now()
	if o.version == "" {
		return errors.New("--version is required")
	}
	if o.commit == "" {
		c, err := git(ctx, "rev-parse", "HEAD")
		if err != nil {
			return fmt.Errorf("--commit not given: %w", err)
		}
		o.commit = c
	}
	date, err := buildDate(ctx, o.buildDate)
	if err != nil {
		return err
	}
	var platforms []image.Platform
	for _, s := range strings.Split(o.platforms, ",") {
		p, err := image.ParsePlatform(s)
		if err != nil {
			return err
		}
		platforms = append(platforms, p)
	}

	// Resolve where to push first: a wrong flag fails before minutes of
	// compiling.
	var ref name.Reference
	var auth authn.Authenticator
	if o.push != "" || o.cloudDir != "" {
		if ref, auth, err = pushTarget(ctx, o); err != nil {
			return err
		}
	}

	fmt.Printf("portside image %s (commit %s, build date %s)\n", o.version, o.commit, date.Format(time.RFC3339))
	bins := map[image.Platform]string{}
	for _, p := range platforms {
		out := filepath.Join(o.binDir, p.OS+"_"+p.Architecture, "portside")
		fmt.Printf("  compiling ./cmd/portside for %s ...", p)
		t := time.Now()
		if err := compile(ctx, o.goCmd, p, out, o.version, o.commit, date); err != nil {
			fmt.Println()
			return err
		}
		fi, err := os.Stat(out)
		if err != nil {
			return err
		}
		fmt.Printf(" %s (%.1f MB) in %s\n", out, float64(fi.Size())/1e6, time.Since(t).Round(100*time.Millisecond))
		bins[p] = out
	}

	t := time.Now()
	idx, err := image.Build(ctx, image.Options{Version: o.version, Commit: o.commit, BuildDate: date, Binaries: bins})
	if err != nil {
		return err
	}
	if err := clearLayout(o.out); err != nil {
		return err
	}
	tag := image.Tag(o.version)
	digest, err := image.WriteLayout(o.out, idx, tag)
	if err != nil {
		return err
	}
	fmt.Printf("  wrote OCI layout %s (ref name %s) in %s\n", o.out, tag, time.Since(t).Round(100*time.Millisecond))
	fmt.Printf("index %s\n", digest)
	mans, err := image.Manifests(idx)
	if err != nil {
		return err
	}
	for _, m := range mans {
		p := "?"
		if m.Platform != nil {
			p = m.Platform.String()
		}
		fmt.Printf("  %-12s %s\n", p, m.Digest)
	}

	repo := image.DefaultImage
	if ref != nil {
		repo = ref.Context().Name()
	}
	if err := writeRelease(o.releaseOut, image.Ref(repo, tag, digest.String()), o.version, date); err != nil {
		return err
	}
	fmt.Printf("  wrote manifests and chart referencing %s into %s\n", image.Ref(repo, tag, digest.String()), o.releaseOut)

	if ref != nil {
		t := time.Now()
		if err := image.Push(ctx, idx, ref, auth); err != nil {
			return err
		}
		fmt.Printf("pushed %s@%s in %s\n", ref, digest, time.Since(t).Round(100*time.Millisecond))
	}
	fmt.Printf("done in %s\n", time.Since(start).Round(time.Second))
	return nil
}

// buildDate is --build-date, else $SOURCE_DATE_EPOCH, else the HEAD
// commit's time.
func buildDate(ctx context.Context, flagValue string) (time.Time, error) {
	if flagValue != "" {
		t, err := time.Parse(time.RFC3339, flagValue)
		if err != nil {
			return time.Time{}, fmt.Errorf("--build-date: %w", err)
		}
		return t.UTC(), nil
	}
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH: %w", err)
		}
		return time.Unix(sec, 0).UTC(), nil
	}
	s, err := git(ctx, "log", "-1", "--format=%ct", "HEAD")
	if err != nil {
		return time.Time{}, fmt.Errorf("--build-date not given: %w", err)
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("commit time %q: %w", s, err)
	}
	return time.Unix(sec, 0).UTC(), nil
}

func git(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "git", args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}

// compile cross-compiles ./cmd/portside, static and stripped, with the
// version stamped as the Makefile's LDFLAGS do (but not the tools directory
// of this machine, meaningless in an image).
func compile(ctx context.Context, goCmd string, p image.Platform, out, version, commit string, date time.Time) error {
	ldflags := strings.Join([]string{
		"-s", "-w",
		"-X", versionPkg + ".Version=" + version,
		"-X", versionPkg + ".Commit=" + commit,
		"-X", versionPkg + ".BuildDate=" + date.Format(time.RFC3339),
	}, " ")
	cmd := exec.CommandContext(ctx, goCmd, "build", "-trimpath", "-ldflags", ldflags, "-o", out, "./cmd/portside")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture, "GOWORK=off")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build for %s: %w", p, err)
	}
	return nil
}

// clearLayout removes dir if it is an OCI layout (or empty), so that blobs of
// earlier builds do not pile up; anything else is refused.
func clearLayout(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(entries) > 0 {
		if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
			return fmt.Errorf("--out %s exists and is not an OCI layout: not replacing it", dir)
		}
	}
	return os.RemoveAll(dir)
}

// pushTarget is the reference to push to and the credential to push with:
// the local cloud's push credential with --local-cloud-data-dir, else the
// docker config's (authn.DefaultKeychain).
func pushTarget(ctx context.Context, o options) (name.Reference, authn.Authenticator, error) {
	refStr := o.push
	var cloud *client.Client
	if o.cloudDir != "" {
		endpoint, err := readFile(o.cloudDir, "endpoint")
		if err != nil {
			return nil, nil, err
		}
		token, err := readFile(o.cloudDir, "token")
		if err != nil {
			return nil, nil, err
		}
		cloud = client.New(endpoint, token)
		if refStr == "" {
			host, err := readFile(o.cloudDir, "registry-endpoint")
			if err != nil {
				return nil, nil, fmt.Errorf("no --push and %w", err)
			}
			refStr = host + "/" + image.DefaultRepository + ":" + image.Tag(o.version)
		}
	}
	var nameOpts []name.Option
	if o.pushInsecure {
		nameOpts = append(nameOpts, name.Insecure)
	}
	ref, err := name.ParseReference(refStr, nameOpts...)
	if err != nil {
		return nil, nil, fmt.Errorf("--push: %w", err)
	}
	if cloud == nil {
		auth, err := authn.DefaultKeychain.Resolve(ref.Context())
		if err != nil {
			return nil, nil, fmt.Errorf("credential for %s: %w", ref.Context().RegistryStr(), err)
		}
		return ref, auth, nil
	}
	cred, err := cloud.Credential(ctx, api.CredentialRequest{Image: ref.Name(), Push: true})
	if err != nil {
		return nil, nil, fmt.Errorf("push credential from the local cloud at %s: %w", cloud.Endpoint(), err)
	}
	fmt.Printf("push credential for %s from the local cloud (expires %s)\n", cred.Registry, cred.ExpiresAt.Format(time.RFC3339))
	return ref, &authn.Basic{Username: cred.Username, Password: cred.Password}, nil
}

func readFile(dir, file string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return "", fmt.Errorf("--local-cloud-data-dir: %w (is the local cloud running?)", err)
	}
	return strings.TrimSpace(string(b)), nil
}
