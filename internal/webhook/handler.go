package webhook

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/klog/v2"
)

// handler serves one webhook on its path: it decodes the AdmissionReview,
// calls Admit and answers in the request's apiVersion. Requests it cannot
// use get an HTTP error with a message saying why (the apiserver logs it
// and applies the webhook's failurePolicy).
type handler struct {
	name     string
	admitter Admitter
	metrics  *metrics
	logger   klog.Logger
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	code := h.serve(w, r)
	c := strconv.Itoa(code)
	h.metrics.requests.WithLabelValues(c, h.name).Inc()
	took := time.Since(start).Seconds()
	h.metrics.latency.WithLabelValues(c, h.name).Observe(took)
	h.metrics.fine.WithLabelValues(c, h.name).Observe(took)
}

// fail writes an HTTP error and returns its code.
func fail(w http.ResponseWriter, code int, format string, args ...any) int {
	http.Error(w, fmt.Sprintf(format, args...), code)
	return code
}

func (h *handler) serve(w http.ResponseWriter, r *http.Request) int {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return fail(w, http.StatusMethodNotAllowed, "method %s not allowed: POST an AdmissionReview", r.Method)
	}
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return fail(w, http.StatusUnsupportedMediaType, "no Content-Type: want application/json")
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return fail(w, http.StatusBadRequest, "Content-Type %q: %v", ct, err)
	}
	if mt != "application/json" {
		return fail(w, http.StatusUnsupportedMediaType, "Content-Type %q: want application/json", ct)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxReviewBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return fail(w, http.StatusBadRequest, "AdmissionReview larger than %d MiB", MaxReviewBytes>>20)
		}
		return fail(w, http.StatusBadRequest, "reading the AdmissionReview: %v", err)
	}
	review, apiVersion, err := DecodeReview(body)
	if err != nil {
		h.logger.V(2).Info("Refused an admission request", "error", err.Error(), "remote", r.RemoteAddr)
		return fail(w, http.StatusBadRequest, "%s", err.Error())
	}
	req := review.Request
	logger := h.logger.WithValues("uid", req.UID, "operation", req.Operation, "resource", req.Resource.Resource,
		"namespace", req.Namespace, "name", req.Name)
	resp, panicked, stack := h.admit(klog.NewContext(r.Context(), logger), req)
	switch {
	case panicked != nil:
		logger.Error(fmt.Errorf("panic: %v", panicked), "Webhook panicked", "stack", string(stack))
		return fail(w, http.StatusInternalServerError, "webhook %s failed on request %s (internal error, logged)", h.name, req.UID)
	case resp == nil:
		logger.Error(nil, "Webhook returned no response")
		return fail(w, http.StatusInternalServerError, "webhook %s returned no response for request %s", h.name, req.UID)
	}
	out := *resp
	out.UID = req.UID
	data, err := encodeReview(apiVersion, &out)
	if err != nil {
		logger.Error(err, "Encoding the admission response")
		return fail(w, http.StatusInternalServerError, "encoding the response: %v", err)
	}
	result := "allowed"
	switch {
	case !out.Allowed:
		result = "denied"
	case len(out.Patch) > 0:
		result = "patched"
	}
	h.metrics.admissions.WithLabelValues(h.name, result).Inc()
	if out.Allowed {
		logger.V(4).Info("Admitted", "result", result, "warnings", out.Warnings)
	} else {
		msg := ""
		if out.Result != nil {
			msg = out.Result.Message
		}
		logger.V(2).Info("Denied", "message", msg)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
	return http.StatusOK
}

// admit calls the webhook; a panic is returned (with its stack), not
// propagated.
func (h *handler) admit(ctx context.Context, req *admissionv1.AdmissionRequest) (resp *admissionv1.AdmissionResponse, panicked any, stack []byte) {
	defer func() {
		if p := recover(); p != nil {
			resp, panicked, stack = nil, p, debug.Stack()
		}
	}()
	return h.admitter.Admit(ctx, req), nil, nil
}
