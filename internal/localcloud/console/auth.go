package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	// CookieName holds the signed session.
	CookieName = "portside_console"
	// SessionTTL is how long a login lasts.
	SessionTTL = 12 * time.Hour
	// TicketTTL is how long a one-time login URL stays valid.
	TicketTTL = 10 * time.Minute
	// maxTickets bounds unredeemed tickets (a client asking for many
	// cannot grow memory).
	maxTickets = 64
	// WriteHeader must be on every write from the page: a cross-site form
	// cannot set it, so a write cannot be forged from another origin.
	WriteHeader = "X-Portside-Console"
)

// access is what a session may do.
type access int

const (
	noAccess access = iota
	readOnly
	readWrite
)

type ticket struct {
	write   bool
	expires time.Time
}

type authenticator struct {
	writeToken, viewerToken string
	key                     []byte
	now                     func() time.Time

	mu      sync.Mutex
	tickets map[string]ticket
}

func newAuthenticator(writeToken, viewerToken string, key []byte) *authenticator {
	if len(key) == 0 {
		key = make([]byte, 32)
		_, _ = rand.Read(key)
	}
	// Derived, so the cookie's key is never the key of anything else.
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("portside console session v1"))
	return &authenticator{writeToken: writeToken, viewerToken: viewerToken, key: mac.Sum(nil),
		now: time.Now, tickets: map[string]ticket{}}
}

// tokenAccess says what a pasted token gives.
func (a *authenticator) tokenAccess(tok string) access {
	tok = strings.TrimSpace(tok)
	switch {
	case tok == "":
		return noAccess
	case a.writeToken != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(a.writeToken)) == 1:
		return readWrite
	case a.viewerToken != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(a.viewerToken)) == 1:
		return readOnly
	}
	return noAccess
}

func (a *authenticator) newTicket(write bool) (string, time.Time) {
	buf := make([]byte, 24)
	_, _ = rand.Read(buf)
	id := hex.EncodeToString(buf)
	now := a.now()
	exp := now.Add(TicketTTL)
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, t := range a.tickets {
		if now.After(t.expires) {
			delete(a.tickets, k)
		}
	}
	for len(a.tickets) >= maxTickets { // drop the oldest
		oldest := ""
		for k, t := range a.tickets {
			if oldest == "" || t.expires.Before(a.tickets[oldest].expires) {
				oldest = k
			}
		}
		delete(a.tickets, oldest)
	}
	a.tickets[id] = ticket{write: write, expires: exp}
	return id, exp
}

// redeem spends a ticket: it works once, before it expires.
func (a *authenticator) redeem(id string) access {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.tickets[id]
	if !ok {
		return noAccess
	}
	delete(a.tickets, id)
	if a.now().After(t.expires) {
		return noAccess
	}
	if t.write {
		return readWrite
	}
	return readOnly
}

// session encodes "<access>.<expiry unix>.<mac>".
func (a *authenticator) session(acc access) (string, time.Time) {
	exp := a.now().Add(SessionTTL)
	payload := strconv.Itoa(int(acc)) + "." + strconv.FormatInt(exp.Unix(), 10)
	return payload + "." + a.sign(payload), exp
}

func (a *authenticator) sign(payload string) string {
	mac := hmac.New(sha256.New, a.key)
	mac.Write([]byte(payload))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// verify returns the access a cookie value grants.
func (a *authenticator) verify(v string) access {
	i := strings.LastIndexByte(v, '.')
	if i < 0 {
		return noAccess
	}
	payload, sig := v[:i], v[i+1:]
	if !hmac.Equal([]byte(sig), []byte(a.sign(payload))) {
		return noAccess
	}
	accStr, expStr, ok := strings.Cut(payload, ".")
	if !ok {
		return noAccess
	}
	acc, err1 := strconv.Atoi(accStr)
	exp, err2 := strconv.ParseInt(expStr, 10, 64)
	if err1 != nil || err2 != nil || a.now().Unix() > exp || (access(acc) != readOnly && access(acc) != readWrite) {
		return noAccess
	}
	return access(acc)
}

type accessKey struct{}

func accessFrom(ctx context.Context) access {
	acc, _ := ctx.Value(accessKey{}).(access)
	return acc
}

// requireSession lets requests with a valid session through; pages are
// sent to the login form, API calls get 401.
func (c *Console) requireSession(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		acc := noAccess
		if ck, err := r.Cookie(CookieName); err == nil {
			acc = c.auth.verify(ck.Value)
		}
		if acc == noAccess {
			if strings.HasPrefix(r.URL.Path, "/console/api/") {
				http.Error(w, "not logged in: open /console/login", http.StatusUnauthorized)
				return
			}
			http.Redirect(w, r, "/console/login", http.StatusSeeOther)
			return
		}
		next(w, r.WithContext(context.WithValue(r.Context(), accessKey{}, acc)))
	}
}

func (c *Console) setSession(w http.ResponseWriter, acc access) {
	v, exp := c.auth.session(acc)
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: v, Path: "/console/", Expires: exp,
		HttpOnly: true, SameSite: http.SameSiteStrictMode})
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	if id := r.URL.Query().Get("ticket"); id != "" {
		if acc := c.auth.redeem(id); acc != noAccess {
			c.setSession(w, acc)
			http.Redirect(w, r, "/console/", http.StatusSeeOther)
			return
		}
		c.renderLogin(w, http.StatusUnauthorized, "This login link was already used or has expired. Get a new one with `portside cloud console`, or paste a token.")
		return
	}
	c.renderLogin(w, http.StatusOK, "")
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	if err := r.ParseForm(); err != nil {
		c.renderLogin(w, http.StatusBadRequest, "The login form could not be read: "+err.Error())
		return
	}
	acc := c.auth.tokenAccess(r.PostForm.Get("token"))
	if acc == noAccess {
		c.renderLogin(w, http.StatusUnauthorized, "That token is not valid. Use the cloud's token file (<data-dir>/token, read-write) or its viewer-token file (read-only).")
		return
	}
	c.setSession(w, acc)
	http.Redirect(w, r, "/console/", http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/console/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/console/login", http.StatusSeeOther)
}

// canWrite checks a write request: a read-write session and the header a
// cross-site form cannot send.
func canWrite(r *http.Request) (int, string) {
	if accessFrom(r.Context()) != readWrite {
		return http.StatusForbidden, "this session is read-only: log in with the cloud's API token to change faults"
	}
	if r.Header.Get(WriteHeader) == "" {
		return http.StatusForbidden, fmt.Sprintf("writes need the %s header", WriteHeader)
	}
	return 0, ""
}
