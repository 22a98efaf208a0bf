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

// maxRevoked bounds the logged-out sessions remembered until they expire.
const maxRevoked = 4096

type authenticator struct {
	key []byte
	now func() time.Time

	mu                      sync.Mutex
	writeToken, viewerToken string
	tickets                 map[string]ticket
	// revoked holds logged-out session ids until their expiry.
	revoked map[string]time.Time
	// changed is closed (and replaced) when tokens rotate or a session is
	// revoked, so open event streams check their session again.
	changed chan struct{}
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
		now: time.Now, tickets: map[string]ticket{}, revoked: map[string]time.Time{}, changed: make(chan struct{})}
}

// setTokens rotates the tokens: every session granted under a token that
// changed dies (its cookie no longer verifies), open streams included, and
// so do unredeemed tickets.
func (a *authenticator) setTokens(writeToken, viewerToken string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if writeToken != a.writeToken {
		for k, t := range a.tickets {
			if t.write {
				delete(a.tickets, k)
			}
		}
	}
	if viewerToken != a.viewerToken {
		for k, t := range a.tickets {
			if !t.write {
				delete(a.tickets, k)
			}
		}
	}
	a.writeToken, a.viewerToken = writeToken, viewerToken
	a.notifyLocked()
}

func (a *authenticator) notifyLocked() {
	close(a.changed)
	a.changed = make(chan struct{})
}

// watch returns a channel closed at the next rotation or revocation.
func (a *authenticator) watch() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.changed
}

// revoke ends the session with id sid (logout) until it would expire.
func (a *authenticator) revoke(sid string, exp time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	for k, e := range a.revoked {
		if now.After(e) {
			delete(a.revoked, k)
		}
	}
	for len(a.revoked) >= maxRevoked { // drop the soonest to expire
		first := ""
		for k, e := range a.revoked {
			if first == "" || e.Before(a.revoked[first]) {
				first = k
			}
		}
		delete(a.revoked, first)
	}
	a.revoked[sid] = exp
	a.notifyLocked()
}

// tokenAccess says what a pasted token gives.
func (a *authenticator) tokenAccess(tok string) access {
	tok = strings.TrimSpace(tok)
	a.mu.Lock()
	defer a.mu.Unlock()
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

// grant is a verified session.
type grant struct {
	acc access
	sid string
	exp time.Time
}

// session encodes "<access>.<expiry unix>.<id>.<mac>". The MAC's key is
// derived from the token of that access level, so rotating a token ends
// every session granted under it, even across cloud restarts (the signing
// key is kept with the cloud's state, the token is not part of it).
func (a *authenticator) session(acc access) (string, time.Time) {
	exp := a.now().Add(SessionTTL)
	buf := make([]byte, 12)
	_, _ = rand.Read(buf)
	payload := strconv.Itoa(int(acc)) + "." + strconv.FormatInt(exp.Unix(), 10) + "." + hex.EncodeToString(buf)
	return payload + "." + a.sign(acc, payload), exp
}

func (a *authenticator) sign(acc access, payload string) string {
	a.mu.Lock()
	tok := a.viewerToken
	if acc == readWrite {
		tok = a.writeToken
	}
	a.mu.Unlock()
	k := hmac.New(sha256.New, a.key)
	k.Write([]byte("granted under token\x00" + tok))
	mac := hmac.New(sha256.New, k.Sum(nil))
	mac.Write([]byte(payload))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// verify returns the session a cookie value grants: signed under the
// current token of its access level, not expired, not logged out.
func (a *authenticator) verify(v string) grant {
	i := strings.LastIndexByte(v, '.')
	if i < 0 {
		return grant{}
	}
	payload, sig := v[:i], v[i+1:]
	parts := strings.Split(payload, ".")
	if len(parts) != 3 {
		return grant{}
	}
	acc, err1 := strconv.Atoi(parts[0])
	exp, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err1 != nil || err2 != nil || (access(acc) != readOnly && access(acc) != readWrite) {
		return grant{}
	}
	if !hmac.Equal([]byte(sig), []byte(a.sign(access(acc), payload))) || a.now().Unix() > exp {
		return grant{}
	}
	a.mu.Lock()
	_, out := a.revoked[parts[2]]
	a.mu.Unlock()
	if out {
		return grant{}
	}
	return grant{acc: access(acc), sid: parts[2], exp: time.Unix(exp, 0)}
}

type sessionKey struct{}

// reqSession is a request's verified session and the cookie it came in.
type reqSession struct {
	grant
	cookie string
}

func sessionFrom(ctx context.Context) reqSession {
	s, _ := ctx.Value(sessionKey{}).(reqSession)
	return s
}

func accessFrom(ctx context.Context) access { return sessionFrom(ctx).acc }

// requireSession lets requests with a valid session through; pages are
// sent to the login form, API calls get 401.
func (c *Console) requireSession(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var s reqSession
		if ck, err := r.Cookie(CookieName); err == nil {
			s = reqSession{c.auth.verify(ck.Value), ck.Value}
		}
		if s.acc == noAccess {
			if strings.HasPrefix(r.URL.Path, "/console/api/") {
				http.Error(w, "not logged in: open /console/login", http.StatusUnauthorized)
				return
			}
			http.Redirect(w, r, "/console/login", http.StatusSeeOther)
			return
		}
		next(w, r.WithContext(context.WithValue(r.Context(), sessionKey{}, s)))
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

// logout ends the session on the server too: a copy of the cookie (or an
// open event stream) stops working, not only this browser's.
func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	if ck, err := r.Cookie(CookieName); err == nil {
		if g := c.auth.verify(ck.Value); g.acc != noAccess {
			c.auth.revoke(g.sid, g.exp)
		}
	}
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
