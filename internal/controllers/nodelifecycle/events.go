package nodelifecycle

// Event reasons of the cloud node lifecycle controller (upstream's).
//
//portside:events kind=Node source=cloud-node-lifecycle-controller
const (
	// The cloud says the node's instance no longer exists: the Node is being deleted.
	ReasonDeletingNode = "DeletingNode"
	// Deleting the Node of a vanished instance failed; retried.
	ReasonDeletingNodeFailed = "DeletingNodeFailed"
)
