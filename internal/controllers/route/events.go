package route

// Event reasons of the route controller (upstream's).
//
//portside:events kind=Node source=route_controller
const (
	// Creating a route in the cloud for one of the node's pod CIDRs failed (the message has the CIDR, the time taken and the cloud's error); retried.
	ReasonFailedToCreateRoute = "FailedToCreateRoute"
)

// Reasons of the Node condition NetworkUnavailable (upstream's), which the
// route controller sets on nodes with pod CIDRs.
//
//portside:conditions kind=Node type=NetworkUnavailable source=route_controller
const (
	// The cloud has a route for each of the node's pod CIDRs ("RouteController created a route").
	//
	//portside:status False
	ReasonRouteCreated = "RouteCreated"
	// A route for one of the node's pod CIDRs is missing in the cloud ("RouteController failed to create a route").
	//
	//portside:status True
	ReasonNoRouteCreated = "NoRouteCreated"
)
