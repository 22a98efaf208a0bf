package api

import "time"

// ConsoleTicketRequest asks for a one-time login link to the web console.
type ConsoleTicketRequest struct {
	// ReadOnly links log in without the right to change faults.
	ReadOnly bool `json:"readOnly,omitempty"`
}

// ConsoleTicket is a one-time login link, valid until ExpiresAt.
type ConsoleTicket struct {
	// Path is the link relative to the API endpoint:
	// /console/login?ticket=<ticket>.
	Path      string    `json:"path"`
	ExpiresAt time.Time `json:"expiresAt"`
	ReadOnly  bool      `json:"readOnly,omitempty"`
}
