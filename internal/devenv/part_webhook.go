package devenv

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portside-io/portside/deploy"
)

// registerWebhook installs deploy/ccm/webhook.yaml's
// MutatingWebhookConfiguration, pointed at the first CCM replica's webhook
// port with the cluster's CA, so PVs of local-cloud volumes get their
// topology as in a cluster with the Service in front of the CCM.
func registerWebhook(ctx context.Context, s *stack, env *environment) error {
	mwc, err := deploy.PVLabelWebhookConfiguration(env.webhookURL, env.cp.CAPEM())
	if err != nil {
		return err
	}
	api := env.client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	cur, err := api.Get(ctx, mwc.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = api.Create(ctx, mwc, metav1.CreateOptions{})
	case err == nil:
		mwc.ResourceVersion = cur.ResourceVersion
		_, err = api.Update(ctx, mwc, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("register the persistent-volume-label webhook: %w", err)
	}
	s.p.step("ccm", "persistent-volume-label webhook registered (MutatingWebhookConfiguration %s → %s)", mwc.Name, env.webhookURL)
	return nil
}

// unregisterWebhook removes an earlier run's webhook configuration when
// this run's CCM serves none: with failurePolicy Fail it would refuse PVs.
func unregisterWebhook(ctx context.Context, env *environment) error {
	mwc, err := deploy.PVLabelWebhookConfiguration("", nil)
	if err != nil {
		return err
	}
	err = env.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, mwc.Name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}
