//go:build tools

// Package tools pins upstream's ecr-credential-provider for the credential
// provider benchmark (target P6 names it for scale).
package tools

import _ "k8s.io/cloud-provider-aws/cmd/ecr-credential-provider"
