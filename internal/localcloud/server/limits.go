package server

import (
	"fmt"
	"net/http"

	"github.com/portside-io/portside/internal/localcloud/store"
)

// Limits bound what clients may create, so that one client cannot grow
// the state file or the data plane without bound. Every limit is checked
// where the object is created or replaced; over a limit the API answers
// 400 Invalid (a request too big) or 422 LimitExceeded (a cloud full).
type Limits struct {
	// Per load balancer. Backends: one per node and IP family, so 5000
	// nodes dual-stack (bench/servicelb at its largest) fit.
	ListenersPerLB    int
	BackendsPerLB     int
	SourceRangesPerLB int
	// Totals in the cloud. Routes: one per node and family.
	LoadBalancers, Routes, Instances, Volumes, Registries int
	// Tags of load balancers and labels of instances.
	TagsPerObject, TagKeyLen, TagValueLen int
	// Name lengths. The CCM names load balancers "a"+UID (32 characters)
	// and routes <node UID>-ipv4/-ipv6 (41); instance and volume names are
	// node and PV names (DNS subdomains, 253).
	LBNameLen, RouteNameLen, InstanceNameLen, VolumeNameLen, ClusterNameLen, RegistryHostLen int
}

// DefaultLimits are the limits of a cloud. They are far above the
// benchmarks' largest (1,000 services on 500 nodes; 5,000 nodes).
func DefaultLimits() Limits {
	return Limits{
		ListenersPerLB: 100, BackendsPerLB: 10000, SourceRangesPerLB: 1000,
		LoadBalancers: 10000, Routes: 20000, Instances: 20000, Volumes: 20000, Registries: 1000,
		TagsPerObject: 50, TagKeyLen: 253, TagValueLen: 1024,
		LBNameLen: 63, RouteNameLen: 253, InstanceNameLen: 253, VolumeNameLen: 253, ClusterNameLen: 253, RegistryHostLen: 261,
	}
}

func (s *Server) limits() Limits {
	if s.opts.Limits != nil {
		return *s.opts.Limits
	}
	return DefaultLimits()
}

// tooMany answers a request whose object has more items than a limit allows.
func tooMany(what string, n, limit int) error {
	return invalid("%s has %d items: the limit is %d", what, n, limit)
}

// checkLen rejects a string longer than limit bytes.
func checkLen(what, v string, limit int) error {
	if len(v) > limit {
		return invalid("%s is %d characters long: the limit is %d", what, len(v), limit)
	}
	return nil
}

// checkTags checks the number and sizes of tags (or labels).
func checkTags(what string, tags map[string]string, l Limits) error {
	if len(tags) > l.TagsPerObject {
		return tooMany(what, len(tags), l.TagsPerObject)
	}
	for k, v := range tags {
		if k == "" {
			return invalid("%s: a key is empty", what)
		}
		if err := checkLen(fmt.Sprintf("%s key %.40q", what, k), k, l.TagKeyLen); err != nil {
			return err
		}
		if err := checkLen(fmt.Sprintf("%s[%.40q]", what, k), v, l.TagValueLen); err != nil {
			return err
		}
	}
	return nil
}

// checkCount refuses to create one more record of kind when the cloud
// already holds limit of them.
func checkCount(tx *store.Tx, kind, what string, limit int) error {
	if n := tx.Count(kind); n >= limit {
		return &apiError{http.StatusUnprocessableEntity, "LimitExceeded",
			fmt.Sprintf("limit reached: the cloud holds %d %s and the limit is %d: delete some before creating more", n, what, limit)}
	}
	return nil
}
