package service

// Event reasons of the service controller (upstream's, same strings).
//
//portside:events kind=Service source=service-controller
const (
	// The controller is about to create or fully update the Service's load balancer in the cloud.
	ReasonEnsuringLoadBalancer = "EnsuringLoadBalancer"
	// The cloud has the load balancer, serving the Service; its ingress is in the Service's status.
	ReasonEnsuredLoadBalancer = "EnsuredLoadBalancer"
	// Creating or updating the load balancer failed (the cloud's error, an unusable status it returned,
	// or a Service that cannot get one: the condition's reason says which); retried with backoff unless terminal.
	ReasonSyncLoadBalancerFailed = "SyncLoadBalancerFailed"
	// The Service no longer needs its load balancer (it is being deleted, or no longer of type LoadBalancer): deleting it in the cloud.
	ReasonDeletingLoadBalancer = "DeletingLoadBalancer"
	// The load balancer is deleted in the cloud; the status and finalizer are cleared.
	ReasonDeletedLoadBalancer = "DeletedLoadBalancer"
	// Deleting the load balancer in the cloud failed; retried with backoff, the finalizer kept.
	ReasonDeleteLoadBalancerFailed = "DeleteLoadBalancerFailed"
	// Only the set of nodes changed: the load balancer's backends were updated (the count in the message).
	ReasonUpdatedLoadBalancer = "UpdatedLoadBalancer"
	// Updating the load balancer's backends to the new set of nodes failed; retried with backoff.
	ReasonUpdateLoadBalancerFailed = "UpdateLoadBalancerFailed"
	// No node is eligible as a backend (all being deleted, or excluded by label node.kubernetes.io/exclude-from-external-load-balancers): the load balancer is made without backends.
	ReasonUnAvailableLoadBalancer = "UnAvailableLoadBalancer"
)

// Reasons of the Service condition LoadBalancerReady (Portside's;
// upstream sets no condition).
//
//portside:conditions kind=Service type=LoadBalancerReady source=service-controller
const (
	// The load balancer serves the Service.
	//
	//portside:status True
	ReasonProvisioned = "Provisioned"
	// The cloud failed to create or update the load balancer with an error that is not a throttle (the message is the cloud's); retried with backoff.
	//
	//portside:status False
	ReasonCloudError = "CloudError"
	// The Service is not a valid LoadBalancer Service for the provider SDK (the message says why); not retried until the Service changes.
	//
	//portside:status False
	ReasonInvalidService = "InvalidService"
	// The Service asks for what the cloud's load balancers do not support (by their declared features; the message says what); not retried until the Service changes.
	//
	//portside:status False
	ReasonUnsupportedService = "UnsupportedService"
)
