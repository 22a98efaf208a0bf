package helm

import (
	"path"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestWebhookClientCA: webhook.clientCA (a ConfigMap or a Secret key)
// makes the CCM require the apiserver's client certificate: the flag
// names the mounted key, and only that key is mounted. Without it the
// flag and the volume are absent; both sources, or a client CA without
// the webhook, are refused with the value to fix.
func TestWebhookClientCA(t *testing.T) {
	ca := "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="
	webhook := func(clientCA map[string]any) map[string]any {
		w := map[string]any{"enabled": true, "caBundle": ca}
		if clientCA != nil {
			w["clientCA"] = clientCA
		}
		return map[string]any{"webhook": w}
	}
	for _, c := range []struct {
		name     string
		clientCA map[string]any
		want     corev1.VolumeSource
		file     string
	}{
		{"ConfigMap", map[string]any{"configMapName": "apiserver-webhook-client-ca"},
			corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "apiserver-webhook-client-ca"},
				Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			"ca.crt"},
		{"Secret with its own key", map[string]any{"secretName": "front-ca", "key": "client-ca.pem"},
			corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "front-ca",
				Items: []corev1.KeyToPath{{Key: "client-ca.pem", Path: "client-ca.pem"}}}},
			"client-ca.pem"},
	} {
		t.Run(c.name, func(t *testing.T) {
			stream := mustRender(t, webhook(c.clientCA))
			d, ccm := ccmDeployment(t, objects(t, stream))
			var mount *corev1.VolumeMount
			for i := range ccm.VolumeMounts {
				if ccm.VolumeMounts[i].Name == "webhook-client-ca" {
					mount = &ccm.VolumeMounts[i]
				}
			}
			if mount == nil || !mount.ReadOnly {
				t.Fatalf("no read-only webhook-client-ca mount: %+v", ccm.VolumeMounts)
			}
			if arg := "--webhook-client-ca-file=" + path.Join(mount.MountPath, c.file); !hasArg(ccm, arg) {
				t.Errorf("command lacks %q: %q", arg, ccm.Command)
			}
			var vol *corev1.Volume
			for i := range d.Spec.Template.Spec.Volumes {
				if d.Spec.Template.Spec.Volumes[i].Name == "webhook-client-ca" {
					vol = &d.Spec.Template.Spec.Volumes[i]
				}
			}
			if vol == nil || !reflect.DeepEqual(vol.VolumeSource, c.want) {
				t.Errorf("webhook-client-ca volume %+v, want %+v", vol, c.want)
			}
			dryRunApply(t, stream)
		})
	}

	t.Run("unset", func(t *testing.T) {
		d, ccm := ccmDeployment(t, objects(t, mustRender(t, webhook(nil))))
		for _, a := range ccm.Command {
			if strings.HasPrefix(a, "--webhook-client-ca-file") {
				t.Errorf("command has %q without webhook.clientCA", a)
			}
		}
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == "webhook-client-ca" {
				t.Errorf("volume %+v without webhook.clientCA", v)
			}
		}
	})

	for _, c := range []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"both sources", webhook(map[string]any{"configMapName": "a", "secretName": "b"}),
			"set webhook.clientCA.configMapName or webhook.clientCA.secretName, not both"},
		{"without the webhook", map[string]any{"webhook": map[string]any{"clientCA": map[string]any{"secretName": "b"}}},
			"webhook.clientCA needs webhook.enabled"},
		{"a key that is no file name", webhook(map[string]any{"secretName": "b", "key": "../ca.crt"}),
			"'/webhook/clientCA/key'"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := render(t, c.values)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want %q", err, c.want)
			}
		})
	}
}
