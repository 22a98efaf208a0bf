package netproxy

import (
	"log"
	"net/http"
	"time"
)

// Timeouts of the proxy's HTTP servers (HTTP-CONNECT frontend, health,
// admin): a client slow to send its request, slow to read the answer, or
// idle does not hold a connection and a goroutine for long. A CONNECT
// tunnel clears them once hijacked. Variables so tests can shorten them.
var (
	HTTPReadHeaderTimeout = 10 * time.Second
	HTTPReadTimeout       = 30 * time.Second
	// HTTPWriteTimeout leaves room for the admin port's 30 s CPU profile.
	HTTPWriteTimeout = 2 * time.Minute
	HTTPIdleTimeout  = 90 * time.Second
)

// NewHTTPServer is an http.Server with the proxy's timeouts.
func NewHTTPServer(h http.Handler, errorLog *log.Logger) *http.Server {
	return &http.Server{Handler: h, ErrorLog: errorLog,
		ReadHeaderTimeout: HTTPReadHeaderTimeout, ReadTimeout: HTTPReadTimeout,
		WriteTimeout: HTTPWriteTimeout, IdleTimeout: HTTPIdleTimeout}
}
