package pvlabel

import (
	"fmt"
	"math"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Default provider call budget of the webhook (--pv-label-provider-qps,
// --pv-label-provider-burst): far above what provisioners create (a PV per
// claim), far below what a cloud API's quota allows, so whoever can reach
// the webhook cannot enumerate volumes or spend the cloud quota through it.
const (
	DefaultProviderQPS   = 10
	DefaultProviderBurst = 20
)

// OverLimit decides a PV CREATE that arrives when the webhook's provider
// call budget is spent, retryAfter being when a call is allowed again.
//
// A provisioner's PV with its topology is admitted on its own labels:
// upstream never asked the cloud about it, so nothing is lost but the
// check. Any other PV is refused with 429 and Retry-After: answered (not a
// failed call), so the webhook's failurePolicy does not apply and even
// Ignore does not create the PV without its zone; the PV's creator (a
// provisioner's retry loop, or a person) creates it again.
func OverLimit(pv *corev1.PersistentVolume, name string, retryAfter time.Duration) (Decision, *metav1.Status) {
	if _, _, _, ok := trustedTopology(pv); ok {
		d := Decide(pv, nil)
		d.Warnings = append(d.Warnings, fmt.Sprintf("persistent volume %s: its provisioner's topology labels are used without checking them with the cloud: the webhook's provider call limit (--pv-label-provider-qps) is reached", name))
		return d, nil
	}
	secs := int32(min(max(math.Ceil(retryAfter.Seconds()), 1), math.MaxInt32))
	return Decision{}, &metav1.Status{
		Code:   http.StatusTooManyRequests,
		Reason: metav1.StatusReasonTooManyRequests,
		Message: fmt.Sprintf("%s: too many requests to the cloud: the webhook's provider call limit (--pv-label-provider-qps, --pv-label-provider-burst) is reached; persistent volume %s is refused so it is not created without its zone: retry in %ds",
			Name, name, secs),
		Details: &metav1.StatusDetails{RetryAfterSeconds: secs},
	}
}
