package servingcsr

import (
	"context"
	"fmt"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/portside-io/portside/pkg/cloud"
)

// sync decides one CSR and writes the decision. A cloud error is returned
// for a retry with backoff (or after the delay the cloud asks for): a
// request is never approved on what the cloud could not say.
func (c *Controller) sync(ctx context.Context, name string) error {
	logger := klog.FromContext(ctx).WithValues("csr", name)
	csr, err := c.csrs.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	req, d := Check(csr)
	if d.Verdict == AskCloud {
		logger = logger.WithValues("node", req.Node)
		node, err := c.nodes.Get(req.Node)
		if apierrors.IsNotFound(err) {
			// The Node's arrival queues the request again.
			logger.V(2).Info("Waiting for the requestor's Node to exist")
			return nil
		}
		if err != nil {
			return err
		}
		meta, err := c.cfg.Instances.InstanceMetadata(ctx, cloud.NodeFrom(node))
		c.metrics.cloudCall(err)
		switch {
		case cloud.IsNotFound(err):
			d = InstanceGone(req, node.Spec.ProviderID)
		case err != nil:
			return fmt.Errorf("instance of node %s: %w", req.Node, err)
		default:
			providerID := meta.ProviderID
			if providerID == "" {
				providerID = node.Spec.ProviderID
			}
			d = Judge(req, InstanceName(providerID, node.Name), meta.Addresses)
		}
	}
	switch d.Verdict {
	case Approve:
		return c.write(ctx, csr, certificatesv1.CertificateApproved, d)
	case Deny:
		return c.write(ctx, csr, certificatesv1.CertificateDenied, d)
	}
	logger.V(4).Info("Leaving the CSR alone", "why", d.Message)
	return nil
}

// write sets the Approved or Denied condition. A conflict (the CSR changed,
// e.g. someone decided it) is retried from the cache, where Check then
// leaves a decided CSR alone.
func (c *Controller) write(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, typ certificatesv1.RequestConditionType, d Decision) error {
	csr = csr.DeepCopy()
	now := metav1.Now()
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: typ, Status: corev1.ConditionTrue, Reason: d.Reason, Message: d.Message, LastUpdateTime: now, LastTransitionTime: now,
	})
	if _, err := c.cfg.Client.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("%s CSR %s: %w", d.Verdict, csr.Name, err)
	}
	c.metrics.decision(d)
	logger := klog.FromContext(ctx)
	if typ == certificatesv1.CertificateApproved {
		c.cfg.Recorder.Event(csr, corev1.EventTypeNormal, ReasonServingCertificateApproved, d.Message)
		logger.V(2).Info("Approved kubelet serving CSR", "csr", csr.Name, "requestor", csr.Spec.Username)
	} else {
		c.cfg.Recorder.Event(csr, corev1.EventTypeWarning, ReasonServingCertificateDenied, d.Message)
		logger.Info("Denied kubelet serving CSR", "csr", csr.Name, "requestor", csr.Spec.Username, "reason", d.Reason, "message", d.Message)
	}
	return nil
}
