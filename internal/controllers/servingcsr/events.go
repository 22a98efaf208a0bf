package servingcsr

// Event reasons of the serving CSR approver, on the CertificateSigningRequest.
//
//portside:events kind=CertificateSigningRequest source=node-serving-csr-approver
const (
	// A node's kubelet-serving CSR was approved: its subject is the requestor's node and every SAN is an address the cloud reports for the node's instance.
	ReasonServingCertificateApproved = "ServingCertificateApproved"
	// A node's kubelet-serving CSR was denied (the message says which rule it broke, e.g. "IP 10.0.0.9 is not an address of instance i-0000002a").
	ReasonServingCertificateDenied = "ServingCertificateDenied"
)

// Reasons of the Approved condition the approver sets.
//
//portside:conditions kind=CertificateSigningRequest type=Approved source=node-serving-csr-approver
const (
	// Every rule held: signer kubernetes.io/kubelet-serving, requestor system:node:<name> in system:nodes, subject CN=system:node:<name> O=system:nodes, kubelet's usages, every SAN the node's name or an address of its cloud instance, the Node exists (upstream's approver's reason).
	//
	//portside:status True
	ReasonAutoApproved = "AutoApproved"
)

// Reasons of the Denied condition the approver sets, on a node's
// kubelet-serving CSRs only.
//
//portside:conditions kind=CertificateSigningRequest type=Denied source=node-serving-csr-approver
const (
	// A SAN is not the node's name nor an address the cloud reports for its instance: another node's address, or a stale one.
	//
	//portside:status True
	ReasonAddressNotOfInstance = "AddressNotOfInstance"
	// The subject is not CN=system:node:<requestor's node>, O=system:nodes: a node asking for another node's name.
	//
	//portside:status True
	ReasonSubjectNotRequestor = "SubjectNotRequestor"
	// The usages are not kubelet's (digital signature and server auth, key encipherment allowed).
	//
	//portside:status True
	ReasonUnexpectedUsages = "UnexpectedUsages"
	// The request does not parse, has email or URI SANs, or has no DNS or IP SAN.
	//
	//portside:status True
	ReasonInvalidRequest = "InvalidRequest"
	// The Node has a providerID and the cloud says its instance does not exist.
	//
	//portside:status True
	ReasonInstanceNotFound = "InstanceNotFound"
)
