package agent

import "testing"

func TestTLSFailure(t *testing.T) {
	for msg, want := range map[string]bool{
		`connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`:                                            false,
		`connection error: desc = "transport: Error while dialing: dial tcp: lookup nowhere: no such host"`:                                                       false,
		`connection error: desc = "error reading server preface: remote error: tls: certificate required"`:                                                        true,
		`connection error: desc = "transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority"`: true,
		`connection error: desc = "error reading server preface: read tcp 127.0.0.1:5->127.0.0.1:6: read: connection reset by peer"`:                              true,
	} {
		if got := tlsFailure(msg); got != want {
			t.Errorf("tlsFailure(%q) = %v, want %v", msg, got, want)
		}
	}
}
