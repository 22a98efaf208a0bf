// Package cloud is Portside's provider SDK: the interface a platform
// implements so that every Portside component (the cloud controller manager
// and its controllers, the PV labeling webhook, the kubelet credential
// provider) can run on it.
//
// A Provider is small and context-first. Its capabilities are discovered:
// each accessor (Instances, LoadBalancers, Routes, Volumes,
// RegistryCredentials) returns false when the platform does not have that
// capability, and Portside then does not start what needs it.
//
// Errors follow a small contract:
//   - ErrNotFound (wrapped) means the object does not exist in the cloud;
//   - ErrNotImplemented means the provider does not do this operation;
//   - a *RetryAfterError asks the caller to try again after a delay (a load
//     balancer still being provisioned, a rate limit);
//   - anything else is a transient failure, retried with backoff. Portside
//     never takes a destructive action (deleting a Node, a load balancer)
//     on the strength of such an error.
//
// Providers are registered by name with Register and created from a config
// file with New, which is what --cloud-provider and --cloud-config select.
package cloud
