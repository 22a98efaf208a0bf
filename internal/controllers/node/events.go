package node

// Event reasons of the cloud node controller: Portside's, where upstream
// only logs. Upstream's Normal "Synced" event is not emitted (one API
// write per node for what a metric shows).
//
//portside:events kind=Node source=cloud-node-controller
const (
	// The cloud has no instance for an uninitialized node: it stays tainted and is retried (check the machine exists and the node name or providerID matches it).
	ReasonInstanceNotFound = "InstanceNotFound"
	// The cloud provider returned no providerID for an uninitialized node that has none: it stays tainted and is retried.
	//
	//portside:type Warning
	ReasonProviderIDMissing = "ProviderIDMissing"
	// The kubelet's provided node IP annotation names an address the instance does not have: the node stays uninitialized (or its addresses are not updated) until the kubelet's --node-ip or the instance is fixed.
	//
	//portside:type Warning
	ReasonProvidedNodeIPNotFound = "ProvidedNodeIPNotFound"
	// The kubelet's provided node IP annotation is not one IP or an IPv4 and an IPv6: the node stays uninitialized (or its addresses are not updated).
	//
	//portside:type Warning
	ReasonInvalidProvidedNodeIP = "InvalidProvidedNodeIP"
	// The provider could not say something about the node's instance (zone, providerID, ...): the node was initialized without it; one event per warning, once.
	ReasonIncompleteInstanceMetadata = "IncompleteInstanceMetadata"
)
