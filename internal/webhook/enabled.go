package webhook

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Enabled applies --webhooks to the known webhooks, as upstream's
// cloud-controller-manager (and manager.EnabledControllers): '*' enables
// every webhook not DisabledByDefault, 'name' enables one, '-name' disables
// one (a disable wins). No flags enable nothing: as upstream, a webhook is
// served only when --webhooks names it (or '*'). The result keeps the order
// of known.
func Enabled(flags []string, known []Webhook) ([]Webhook, error) {
	star := false
	enabled, disabled := map[string]bool{}, map[string]bool{}
	for _, f := range flags {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if f == "*" {
			star = true
			continue
		}
		name, off := strings.CutPrefix(f, "-")
		if !slices.ContainsFunc(known, func(w Webhook) bool { return w.Name == name }) {
			return nil, unknownWebhook(name, known)
		}
		if off {
			disabled[name] = true
		} else {
			enabled[name] = true
		}
	}
	var out []Webhook
	for _, w := range known {
		if !disabled[w.Name] && (enabled[w.Name] || (star && !w.DisabledByDefault)) {
			out = append(out, w)
		}
	}
	return out, nil
}

func unknownWebhook(name string, known []Webhook) error {
	names := make([]string, 0, len(known))
	for _, w := range known {
		n := w.Name
		if w.DisabledByDefault {
			n += " (disabled by default)"
		}
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) == 0 {
		return fmt.Errorf("--webhooks: unknown webhook %q; no webhooks are built in", name)
	}
	return fmt.Errorf("--webhooks: unknown webhook %q; known webhooks: %s", name, strings.Join(names, ", "))
}
