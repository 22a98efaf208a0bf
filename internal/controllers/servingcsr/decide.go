package servingcsr

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
)

// Verdict is what the approver does with a CSR.
type Verdict int

const (
	// Leave: not this approver's to judge (another signer, a requestor that
	// is not a node, a CSR already decided); it is never touched.
	Leave Verdict = iota
	// AskCloud: a node's kubelet-serving request that passed every check
	// needing neither the Node nor the cloud; Judge decides it.
	AskCloud
	// Approve sets the Approved condition.
	Approve
	// Deny sets the Denied condition: the request is a node's for the
	// kubelet-serving signer, and something in it is not what kubelet asks
	// for, or not that node's.
	Deny
)

func (v Verdict) String() string {
	return [...]string{"leave", "ask-cloud", "approve", "deny"}[v]
}

// Decision is a verdict with the condition's reason and message (for
// Approve and Deny) or why it is left alone.
type Decision struct {
	Verdict Verdict
	Reason  string
	Message string
}

// Request is what a node's kubelet-serving CSR asks for.
type Request struct {
	// Node is the requestor's node name (spec.username system:node:<Node>).
	Node     string
	DNSNames []string
	IPs      []netip.Addr
}

const (
	nodeUserPrefix = "system:node:"
	nodesGroup     = "system:nodes"
)

// Check applies the rules that need neither the Node nor the cloud, in the
// spirit of upstream's ValidateKubeletServingCSR (k8s.io/kubernetes
// pkg/apis/certificates/helpers.go) and the KCM's client approver
// (pkg/controller/certificates/approver/sarapprove.go): who asks is read
// from spec.username and spec.groups, which the apiserver set from the
// requestor's credentials, never from the subject, which the requestor
// wrote. A request of another signer, or of a requestor that is not a
// node, is left for someone else (an admin may approve such a request by
// hand); a node's request that breaks a rule is denied, so that kubelet
// sees why at once instead of waiting.
func Check(csr *certificatesv1.CertificateSigningRequest) (Request, Decision) {
	if csr.Spec.SignerName != certificatesv1.KubeletServingSignerName {
		return Request{}, leave("signer %q is not %s", csr.Spec.SignerName, certificatesv1.KubeletServingSignerName)
	}
	if decided(csr) {
		return Request{}, leave("already approved, denied or failed")
	}
	node, isNode := strings.CutPrefix(csr.Spec.Username, nodeUserPrefix)
	if !isNode || node == "" || !slices.Contains(csr.Spec.Groups, nodesGroup) {
		return Request{}, leave("requestor %q (groups %v) is not a node (%s<name> in group %s)", csr.Spec.Username, csr.Spec.Groups, nodeUserPrefix, nodesGroup)
	}
	block, _ := pem.Decode(csr.Spec.Request)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return Request{}, deny(ReasonInvalidRequest, "spec.request is not a PEM CERTIFICATE REQUEST")
	}
	x, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return Request{}, deny(ReasonInvalidRequest, "spec.request does not parse: %v", err)
	}
	if want := nodeUserPrefix + node; x.Subject.CommonName != want {
		return Request{}, deny(ReasonSubjectNotRequestor, "subject CN %q is not the requestor's %q", x.Subject.CommonName, want)
	}
	if !slices.Equal(x.Subject.Organization, []string{nodesGroup}) {
		return Request{}, deny(ReasonSubjectNotRequestor, "subject O %q is not exactly [%s]", x.Subject.Organization, nodesGroup)
	}
	if msg, ok := kubeletUsages(csr.Spec.Usages); !ok {
		return Request{}, deny(ReasonUnexpectedUsages, "%s", msg)
	}
	if len(x.EmailAddresses) > 0 || len(x.URIs) > 0 {
		return Request{}, deny(ReasonInvalidRequest, "email (%v) and URI (%v) SANs are not allowed in a kubelet serving certificate", x.EmailAddresses, x.URIs)
	}
	if len(x.DNSNames) == 0 && len(x.IPAddresses) == 0 {
		return Request{}, deny(ReasonInvalidRequest, "a kubelet serving certificate needs at least one DNS or IP SAN")
	}
	req := Request{Node: node, DNSNames: x.DNSNames}
	for _, ip := range x.IPAddresses {
		a, ok := netip.AddrFromSlice(ip)
		if !ok {
			return Request{}, deny(ReasonInvalidRequest, "IP SAN %v is not an IP address", ip)
		}
		req.IPs = append(req.IPs, a.Unmap())
	}
	return req, Decision{Verdict: AskCloud, Message: "a kubelet serving request of node " + node}
}

// kubeletUsages accepts exactly what kubelet asks for: digital signature
// and server auth, plus key encipherment (its RSA keys need it; upstream
// accepts both sets).
func kubeletUsages(usages []certificatesv1.KeyUsage) (string, bool) {
	seen := map[certificatesv1.KeyUsage]bool{}
	for _, u := range usages {
		switch u {
		case certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth, certificatesv1.UsageKeyEncipherment:
			seen[u] = true
		default:
			return fmt.Sprintf("usage %q is not one kubelet asks for (digital signature, server auth, key encipherment)", u), false
		}
	}
	if !seen[certificatesv1.UsageDigitalSignature] || !seen[certificatesv1.UsageServerAuth] {
		return fmt.Sprintf("usages %q lack digital signature or server auth", usages), false
	}
	return "", true
}

// Judge decides a checked request against what the cloud reports for the
// requestor's node: instance names it in messages, addrs are the
// instance's addresses. Every IP SAN must be an InternalIP or ExternalIP
// of the instance; every DNS SAN the node's name or a Hostname,
// InternalDNS or ExternalDNS of the instance (the address types kubelet
// puts in its serving certificate). Anything else is an impostor's or a
// stale kubelet's, and denied.
func Judge(req Request, instance string, addrs []corev1.NodeAddress) Decision {
	ips := map[netip.Addr]bool{}
	names := map[string]bool{strings.ToLower(req.Node): true}
	for _, a := range addrs {
		switch a.Type {
		case corev1.NodeInternalIP, corev1.NodeExternalIP:
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				ips[ip.Unmap()] = true
			}
		case corev1.NodeHostName, corev1.NodeInternalDNS, corev1.NodeExternalDNS:
			names[strings.ToLower(strings.TrimSuffix(a.Address, "."))] = true
		}
	}
	for _, ip := range req.IPs {
		if !ips[ip] {
			return deny(ReasonAddressNotOfInstance, "IP %s is not an address of instance %s (node %s)", ip, instance, req.Node)
		}
	}
	for _, n := range req.DNSNames {
		if !names[strings.ToLower(n)] {
			return deny(ReasonAddressNotOfInstance, "DNS name %q is not node %s's name nor a hostname or DNS address of instance %s", n, req.Node, instance)
		}
	}
	return Decision{Verdict: Approve, Reason: ReasonAutoApproved,
		Message: fmt.Sprintf("Auto approving the kubelet serving certificate of node %s: every SAN is an address of instance %s", req.Node, instance)}
}

// InstanceGone decides a request whose node's instance the cloud says does
// not exist. A Node with a providerID names its instance, so the cloud's
// answer is positive: denied. A Node without one yet may still be matched
// to its instance by the cloud node controller (by name, as the provider
// could not): left alone, and judged again when the Node gets its
// providerID.
func InstanceGone(req Request, providerID string) Decision {
	if providerID == "" {
		return leave("the cloud finds no instance by node name %s, and the Node has no providerID yet", req.Node)
	}
	return deny(ReasonInstanceNotFound, "instance %s of node %s does not exist in the cloud", providerID, req.Node)
}

// InstanceName names the instance in messages: the id of its providerID,
// else the node's providerID as is, else the node's name.
func InstanceName(providerID, node string) string {
	if _, id, ok := strings.Cut(providerID, "://"); ok && id != "" {
		return strings.TrimPrefix(id, "/")
	}
	if providerID != "" {
		return providerID
	}
	return "of node " + node
}

// decided says whether the CSR already has an Approved, Denied or Failed
// condition, or a certificate: nothing is left to decide.
func decided(csr *certificatesv1.CertificateSigningRequest) bool {
	if len(csr.Status.Certificate) > 0 {
		return true
	}
	return slices.ContainsFunc(csr.Status.Conditions, func(c certificatesv1.CertificateSigningRequestCondition) bool {
		return c.Type == certificatesv1.CertificateApproved || c.Type == certificatesv1.CertificateDenied || c.Type == certificatesv1.CertificateFailed
	})
}

func leave(format string, args ...any) Decision {
	return Decision{Verdict: Leave, Message: fmt.Sprintf(format, args...)}
}

func deny(reason, format string, args ...any) Decision {
	return Decision{Verdict: Deny, Reason: reason, Message: fmt.Sprintf(format, args...)}
}
