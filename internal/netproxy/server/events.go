package server

// EventSource is the component of the proxy server's events.
const EventSource = "konnectivity-server"

// Event reasons of the proxy server.
//
//portside:events kind=Node source=konnectivity-server
const (
	// An agent bound to this node (its pod-bound token or system:node certificate) claimed identifiers it may not: another node's name or address, cidr or default-route without --allow-route-claims. They were dropped; the message lists them.
	ReasonAgentIdentifiersDenied = "AgentIdentifiersDenied"
)
