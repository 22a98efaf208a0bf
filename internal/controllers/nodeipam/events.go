package nodeipam

// Event reasons of the node IPAM controller (upstream's).
//
//portside:events kind=Node source=node-ipam-controller
const (
	// The node has no pod CIDR to get: the cluster CIDRs are exhausted (it gets one when a node is deleted or the cluster CIDR grows), or, with CloudAllocator, the cloud assigned none to its instance (retried).
	ReasonCIDRNotAvailable = "CIDRNotAvailable"
	// Writing the allocated pod CIDRs to the Node failed; the CIDRs are released when the write cannot succeed, and the node retried.
	ReasonCIDRAssignmentFailed = "CIDRAssignmentFailed"
)
