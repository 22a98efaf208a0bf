package credentialprovider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/klog/v2"
	v1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1"

	"github.com/portside-io/portside/pkg/cloud"
)

// Timeout bounds one exec. The kubelet kills a plugin after one minute;
// answering with an error before that tells it why.
const Timeout = 50 * time.Second

// attempts and backoff for cloud errors other than "not found": a
// throttled or briefly unavailable cloud should not fail a pull.
const attempts = 3

var backoff = []time.Duration{200 * time.Millisecond, 600 * time.Millisecond}

// Serve answers one kubelet request: it reads the request from in, asks rc
// for a credential and writes the response to out. Errors say what is
// wrong and what to do, and never contain the service-account token.
func Serve(ctx context.Context, rc cloud.RegistryCredentials, in io.Reader, out io.Writer) error {
	req, err := ReadRequest(in)
	if err != nil {
		return err
	}
	return Answer(ctx, rc, req, out)
}

// Answer is Serve for a request already read. rc answers with a whole
// Result when it implements Responder, else with its one credential.
func Answer(ctx context.Context, rc cloud.RegistryCredentials, req *v1.CredentialProviderRequest, out io.Writer) error {
	res, err := fetch(ctx, rc, cloud.RegistryCredentialRequest{
		Image: req.Image, ServiceAccountToken: req.ServiceAccountToken, ServiceAccountAnnotations: req.ServiceAccountAnnotations,
	})
	if err != nil {
		return redact(err, req.ServiceAccountToken)
	}
	resp, narrowed, err := buildResponse(req.Image, res, time.Now())
	if err != nil {
		return redact(fmt.Errorf("image %s: %w", req.Image, err), req.ServiceAccountToken)
	}
	if narrowed != "" {
		// The kubelet ignores a successful plugin's stderr; this is for
		// whoever runs the plugin by hand with a higher verbosity.
		klog.FromContext(ctx).V(2).Info("Narrowed the cache key", "image", req.Image, "cacheKeyType", resp.CacheKeyType, "reason", narrowed)
	}
	data, err := json.Marshal(resp)
	if err != nil {
		return err
	}
	if _, err := out.Write(append(data, '\n')); err != nil {
		return fmt.Errorf("writing the response to stdout: %w", err)
	}
	return nil
}

// fetch asks the provider, retrying what may be transient within ctx.
func fetch(ctx context.Context, rc cloud.RegistryCredentials, req cloud.RegistryCredentialRequest) (*Result, error) {
	for i := 0; ; i++ {
		res, err := respond(ctx, rc, req)
		var perm permanent
		switch {
		case err == nil:
			return res, nil
		case errors.As(err, &perm):
			return nil, err
		case cloud.IsNotFound(err) || cloud.IsNotImplemented(err):
			return nil, fmt.Errorf("no registry of this provider serves image %s (%v): list only the provider's registries in matchImages of the kubelet's CredentialProviderConfig, or have the provider answer a Result with no credentials", req.Image, err)
		case i+1 >= attempts:
			return nil, fmt.Errorf("the cloud did not issue a credential for image %s after %d attempts: %w", req.Image, attempts, err)
		}
		wait := backoff[min(i, len(backoff)-1)]
		if d, ok := cloud.IsRetryAfter(err); ok {
			wait = d
		}
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
			return nil, fmt.Errorf("the cloud did not issue a credential for image %s in time: %w", req.Image, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("the cloud did not issue a credential for image %s in time: %w", req.Image, err)
		case <-time.After(wait):
		}
	}
}

// redact keeps the token out of error text even if a provider echoes it.
func redact(err error, token string) error {
	if err == nil || len(token) < 8 || !strings.Contains(err.Error(), token) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), token, "[service-account token redacted]"))
}

// Main is a whole plugin: it builds the provider's credentials capability
// with newCreds, answers the request on stdin and returns the exit code
// (0, or 1 with a one-line message on stderr).
func Main(newCreds func(ctx context.Context) (cloud.RegistryCredentials, error)) int {
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	err := func() error {
		rc, err := newCreds(ctx)
		if err != nil {
			return err
		}
		return Serve(ctx, rc, os.Stdin, os.Stdout)
	}()
	return Exit(os.Stderr, filepath.Base(os.Args[0]), err)
}

// Exit prints err as one line on stderr, prefixed with the program name,
// and returns the exit code.
func Exit(stderr io.Writer, program string, err error) int {
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "%s: %v\n", program, err)
	return 1
}
