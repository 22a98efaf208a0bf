package credentialprovider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"

	v1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1"
)

const (
	// APIVersion is the only request and response version spoken; it is what
	// the kubelet's CredentialProviderConfig must name as apiVersion.
	APIVersion = "credentialprovider.kubelet.k8s.io/v1"
	// maxRequestBytes bounds what is read from stdin: a request is an image
	// reference, a service-account token and a few annotations.
	maxRequestBytes = 1 << 20
	// maxImageLength is generous: references are at most a few hundred bytes.
	maxImageLength = 4096
)

// ReadRequest reads and checks a CredentialProviderRequest from r (the
// kubelet writes exactly one JSON object and closes stdin).
func ReadRequest(r io.Reader) (*v1.CredentialProviderRequest, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxRequestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading the request from stdin: %w", err)
	}
	if len(data) > maxRequestBytes {
		return nil, fmt.Errorf("the request on stdin is larger than %d bytes: the kubelet sends one small CredentialProviderRequest", maxRequestBytes)
	}
	return DecodeRequest(data)
}

// DecodeRequest parses and validates one request. Errors say what is wrong
// and never include the service-account token.
func DecodeRequest(data []byte) (*v1.CredentialProviderRequest, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New("no request on stdin: this program is run by the kubelet, which writes a CredentialProviderRequest (" + APIVersion + ") to it")
	}
	var req v1.CredentialProviderRequest
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&req); err != nil {
		return nil, fmt.Errorf("the request on stdin is not a JSON CredentialProviderRequest: %s", describeJSONError(err))
	}
	if dec.More() {
		return nil, errors.New("the request on stdin has data after the JSON object: send exactly one CredentialProviderRequest")
	}
	switch {
	case req.APIVersion == "":
		return nil, fmt.Errorf("the request has no apiVersion: want %s", APIVersion)
	case req.APIVersion != APIVersion:
		return nil, fmt.Errorf("request apiVersion %q is not supported: set apiVersion: %s for this provider in the kubelet's CredentialProviderConfig", req.APIVersion, APIVersion)
	case req.Kind != "CredentialProviderRequest":
		return nil, fmt.Errorf("request kind %q is not CredentialProviderRequest", req.Kind)
	}
	if err := validateImage(req.Image); err != nil {
		return nil, err
	}
	return &req, nil
}

// validateImage rejects what cannot be an image reference, so a garbled
// request never reaches the cloud.
func validateImage(image string) error {
	switch {
	case image == "":
		return errors.New("the request's image is empty (want e.g. registry.example.com/team/app:1.0)")
	case len(image) > maxImageLength:
		return fmt.Errorf("the request's image is %d bytes long; references are at most %d", len(image), maxImageLength)
	}
	for _, r := range image {
		if unicode.IsSpace(r) || unicode.IsControl(r) || r == unicode.ReplacementChar {
			return fmt.Errorf("the request's image %q contains whitespace or control characters", truncate(image))
		}
	}
	if strings.HasPrefix(image, "/") || strings.Contains(image, "//") {
		return fmt.Errorf("the request's image %q is not an image reference (want e.g. registry.example.com/team/app:1.0)", truncate(image))
	}
	return nil
}

// describeJSONError names the problem without quoting the input, which may
// hold the service-account token.
func describeJSONError(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("invalid JSON at byte %d", se.Offset)
	case errors.As(err, &te):
		return fmt.Sprintf("field %q must be a %s, not a JSON %s", te.Field, te.Type, te.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the JSON object is cut short"
	default:
		return "invalid JSON"
	}
}

func truncate(s string) string {
	const n = 200
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
