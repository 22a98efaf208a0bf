// Package registry is the local cloud's OCI distribution registry:
// go-containerregistry's registry with durable manifests, behind HTTP Basic
// authentication that accepts only short-lived credentials the cloud signed.
package registry

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Claims are what a credential grants.
type Claims struct {
	// Host is the registry (host[:port]) the credential is for.
	Host string
	// Subject is who holds it: "node", or
	// "system:serviceaccount:<namespace>:<name>".
	Subject string
	// Push allows writes (blob uploads, manifest puts and deletes).
	Push bool
	// ExpiresAt is the end of the credential's life (whole seconds).
	ExpiresAt time.Time
	// Repositories narrows what the credential reads: repository names,
	// or prefixes ending in "/" (ReadAllowed). Empty: every repository.
	Repositories []string
}

const (
	// NodeSubject is the subject of credentials issued without a token.
	NodeSubject   = "node"
	nodeUsername  = "portside"
	saSubject     = "system:serviceaccount:"
	saUserPrefix  = "sa."
	rawUserPrefix = "u." // any other subject, base64url-encoded
	passwordV1    = "v1"
	// passwordV2 is v1 with the repositories the credential may read.
	passwordV2 = "v2"
)

// b64 decodes only canonical encodings, so each credential has one spelling.
var b64 = base64.RawURLEncoding.Strict()

// usernameFor encodes a subject as an HTTP Basic username (no ':').
func usernameFor(subject string) string {
	if subject == NodeSubject {
		return nodeUsername
	}
	if rest, ok := strings.CutPrefix(subject, saSubject); ok {
		ns, name, ok := strings.Cut(rest, ":")
		if ok && ns != "" && name != "" && !strings.ContainsAny(ns, ".:") && !strings.Contains(name, ":") {
			return saUserPrefix + ns + "." + name
		}
	}
	return rawUserPrefix + base64.RawURLEncoding.EncodeToString([]byte(subject))
}

// subjectOf is the inverse of usernameFor.
func subjectOf(username string) (string, error) {
	switch {
	case username == nodeUsername:
		return NodeSubject, nil
	case strings.HasPrefix(username, saUserPrefix):
		ns, name, ok := strings.Cut(strings.TrimPrefix(username, saUserPrefix), ".")
		if !ok || ns == "" || name == "" {
			return "", fmt.Errorf("username %q is not sa.<namespace>.<name>", username)
		}
		return saSubject + ns + ":" + name, nil
	case strings.HasPrefix(username, rawUserPrefix):
		b, err := b64.DecodeString(strings.TrimPrefix(username, rawUserPrefix))
		if err != nil || len(b) == 0 {
			return "", fmt.Errorf("username %q is not a credential username the cloud issues", username)
		}
		return string(b), nil
	}
	return "", fmt.Errorf("username %q is not a credential username the cloud issues", username)
}

// mac signs the canonical encoding of the claims: every field
// length-prefixed, so no field can bleed into another. A v2 credential
// (repos not empty) signs another domain string and the repositories
// after a count, so neither version's MAC is valid as the other's.
func mac(secret []byte, host, subject string, push bool, exp int64, repos []string) []byte {
	m := hmac.New(sha256.New, secret)
	field := func(h hash.Hash, s string) {
		_ = binary.Write(h, binary.BigEndian, uint32(len(s)))
		_, _ = h.Write([]byte(s))
	}
	if len(repos) == 0 {
		field(m, "portside registry credential v1")
	} else {
		field(m, "portside registry credential v2")
	}
	field(m, host)
	field(m, subject)
	field(m, pushFlag(push))
	field(m, strconv.FormatInt(exp, 10))
	if len(repos) > 0 {
		field(m, strconv.Itoa(len(repos)))
		for _, r := range repos {
			field(m, r)
		}
	}
	return m.Sum(nil)
}

func pushFlag(push bool) string {
	if push {
		return "1"
	}
	return "0"
}

// Sign returns the HTTP Basic username and password of a credential with
// claims c. The password is
// "v1.<base64url host>.<unix expiry>.<push 0|1>.<base64url HMAC-SHA256>",
// the MAC covering host, subject, push and expiry; with Repositories,
// "v2.<host>.<expiry>.<push>.<base64url repositories, comma-separated>.<MAC>",
// the MAC covering them too (repository names cannot hold a comma).
func Sign(secret []byte, c Claims) (username, password string) {
	exp := c.ExpiresAt.Unix()
	sum := mac(secret, c.Host, c.Subject, c.Push, exp, c.Repositories)
	parts := []string{
		passwordV1,
		base64.RawURLEncoding.EncodeToString([]byte(c.Host)),
		strconv.FormatInt(exp, 10),
		pushFlag(c.Push),
	}
	if len(c.Repositories) > 0 {
		parts[0] = passwordV2
		parts = append(parts, base64.RawURLEncoding.EncodeToString([]byte(strings.Join(c.Repositories, ","))))
	}
	parts = append(parts, base64.RawURLEncoding.EncodeToString(sum))
	return usernameFor(c.Subject), strings.Join(parts, ".")
}

// errMalformed never includes the password.
var errMalformed = errors.New("password is not a credential the local cloud issued (want v1.<host>.<expiry>.<push>.<signature> or v2.<host>.<expiry>.<push>.<repositories>.<signature>)")

// Verify checks a credential presented to the registry at host: its
// signature, that it is for host, and that it has not expired at now.
// Errors say what is wrong and never include the password.
func Verify(secret []byte, host, username, password string, now time.Time) (Claims, error) {
	subject, err := subjectOf(username)
	if err != nil {
		return Claims{}, err
	}
	if usernameFor(subject) != username {
		return Claims{}, fmt.Errorf("username %q is not a credential username the cloud issues", username)
	}
	parts := strings.Split(password, ".")
	var repos []string
	switch {
	case len(parts) == 5 && parts[0] == passwordV1:
	case len(parts) == 6 && parts[0] == passwordV2:
		list, err := b64.DecodeString(parts[4])
		if err != nil || len(list) == 0 {
			return Claims{}, errMalformed
		}
		repos = strings.Split(string(list), ",")
		if slices.Contains(repos, "") {
			return Claims{}, errMalformed
		}
		parts = append(parts[:4], parts[5])
	default:
		return Claims{}, errMalformed
	}
	hostBytes, err := b64.DecodeString(parts[1])
	if err != nil {
		return Claims{}, errMalformed
	}
	exp, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil || parts[2] != strconv.FormatInt(exp, 10) {
		return Claims{}, errMalformed
	}
	if parts[3] != "0" && parts[3] != "1" {
		return Claims{}, errMalformed
	}
	got, err := b64.DecodeString(parts[4])
	if err != nil {
		return Claims{}, errMalformed
	}
	c := Claims{Host: string(hostBytes), Subject: subject, Push: parts[3] == "1", ExpiresAt: time.Unix(exp, 0).UTC(), Repositories: repos}
	if !hmac.Equal(got, mac(secret, c.Host, c.Subject, c.Push, exp, repos)) {
		return Claims{}, errors.New("signature does not match: the credential was altered or not issued by this cloud")
	}
	if !strings.EqualFold(c.Host, host) {
		return Claims{}, fmt.Errorf("credential is for registry %s, not %s", c.Host, host)
	}
	if !now.Before(c.ExpiresAt) {
		return Claims{}, fmt.Errorf("credential expired at %s: ask the cloud for a new one", c.ExpiresAt.Format(time.RFC3339))
	}
	return c, nil
}
