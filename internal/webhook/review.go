package webhook

import (
	"encoding/json"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	sigsjson "sigs.k8s.io/json"
)

// MaxReviewBytes caps the body of an AdmissionReview: the apiserver sends
// the object and the old object, each up to its 3 MiB request limit.
const MaxReviewBytes = 7 << 20

// AdmissionReview API versions served; v1beta1 has the same JSON shape, and
// is answered in v1beta1.
const (
	APIVersionV1      = "admission.k8s.io/v1"
	APIVersionV1beta1 = "admission.k8s.io/v1beta1"
)

// reviewError is a request the host refuses with 400: what is wrong with it.
type reviewError struct{ msg string }

func (e *reviewError) Error() string { return e.msg }

func badReview(format string, args ...any) error {
	return &reviewError{msg: fmt.Sprintf(format, args...)}
}

// DecodeReview parses an AdmissionReview of admission.k8s.io/v1 or
// v1beta1: field names are case-sensitive, as the apiserver's; it needs
// apiVersion, kind, request and request.uid. It returns the apiVersion to
// answer in.
func DecodeReview(body []byte) (*admissionv1.AdmissionReview, string, error) {
	if len(body) == 0 {
		return nil, "", badReview("empty body: want an AdmissionReview")
	}
	review := &admissionv1.AdmissionReview{}
	strictErrs, err := sigsjson.UnmarshalStrict(body, review, sigsjson.DisallowDuplicateFields)
	if err != nil {
		return nil, "", badReview("malformed AdmissionReview: %v", err)
	}
	// Unknown fields (a newer apiserver) are fine; duplicate ones are not.
	if len(strictErrs) > 0 {
		return nil, "", badReview("malformed AdmissionReview: %v", strictErrs[0])
	}
	apiVersion := review.APIVersion
	switch apiVersion {
	case APIVersionV1, APIVersionV1beta1:
	case "":
		return nil, "", badReview("AdmissionReview without apiVersion: want %s or %s", APIVersionV1, APIVersionV1beta1)
	default:
		return nil, "", badReview("apiVersion %q is not served: want %s or %s", apiVersion, APIVersionV1, APIVersionV1beta1)
	}
	if review.Kind != "AdmissionReview" {
		return nil, "", badReview("kind %q: want AdmissionReview", review.Kind)
	}
	if review.Request == nil {
		return nil, "", badReview("AdmissionReview without request")
	}
	if review.Request.UID == "" {
		return nil, "", badReview("AdmissionReview request without uid")
	}
	return review, apiVersion, nil
}

// encodeReview is the answer: the response, in the request's apiVersion.
func encodeReview(apiVersion string, resp *admissionv1.AdmissionResponse) ([]byte, error) {
	out := admissionv1.AdmissionReview{Response: resp}
	out.APIVersion, out.Kind = apiVersion, "AdmissionReview"
	return json.Marshal(&out)
}
