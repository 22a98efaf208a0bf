// Package serving holds what Portside's HTTPS servers share.
package serving

import (
	"log"
	"strings"

	"k8s.io/klog/v2"
)

// ErrorLog is an http.Server's ErrorLog that writes to logger: TLS
// handshake errors (port scanners, probes without TLS, clients gone during
// a flood) at -v=4, as upstream's apiserver does; other errors at -v=0.
func ErrorLog(logger klog.Logger) *log.Logger {
	return log.New(errorLog{logger}, "", 0)
}

type errorLog struct{ logger klog.Logger }

func (l errorLog) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	if strings.Contains(msg, "TLS handshake error") {
		l.logger.V(4).Info("Serving", "error", msg)
	} else {
		l.logger.Info("Serving", "error", msg)
	}
	return len(p), nil
}
