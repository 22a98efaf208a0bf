package registry

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"

	"github.com/go-logr/logr"
)

// journalFile is the manifest journal in the registry's directory: one JSON
// object per line, each an acknowledged manifest put or delete, in the order
// the registry applied them. Replaying it in order rebuilds exactly the
// manifests (tags and digests) the registry held.
const journalFile = "manifests.journal"

// maxManifestBytes bounds a manifest body.
const maxManifestBytes = 4 << 20

type journalEntry struct {
	Op          string `json:"op"` // "put" or "delete"
	Repo        string `json:"repo"`
	Ref         string `json:"ref"`
	ContentType string `json:"contentType,omitempty"`
	Body        []byte `json:"body,omitempty"`
}

type journal struct {
	mu sync.Mutex // serializes manifest writes, so the journal's order is the registry's
	f  *os.File
	// blobs learns each manifest put, live or replayed.
	blobs *blobIndex
}

// isManifestPath reports whether path is /v2/<repo>/manifests/<ref>, as
// go-containerregistry's registry routes it.
func isManifestPath(path string) bool {
	_, _, ok := splitManifestPath(path)
	return ok
}

func splitManifestPath(path string) (repo, ref string, ok bool) {
	if !strings.HasPrefix(path, "/v2/") {
		return "", "", false
	}
	elem := strings.Split(path, "/")[1:]
	if len(elem) < 4 || elem[len(elem)-2] != "manifests" {
		return "", "", false
	}
	return strings.Join(elem[1:len(elem)-2], "/"), elem[len(elem)-1], true
}

// request rebuilds the entry's write as a request. The URL is built as a
// structure (only its Path set, never parsed from a string), so no name can
// turn into a query or fragment, and the entry is checked against the same
// grammar as a live write first.
func (e journalEntry) request() (*http.Request, error) {
	var method string
	switch e.Op {
	case "put":
		method = http.MethodPut
	case "delete":
		method = http.MethodDelete
	default:
		return nil, fmt.Errorf("unknown journal op %q", e.Op)
	}
	if r := CheckManifestWrite(e.Op == "put", e.Repo, e.Ref, e.Body); r != nil {
		return nil, r
	}
	req := &http.Request{
		Method:     method,
		URL:        &url.URL{Path: "/v2/" + e.Repo + "/manifests/" + e.Ref},
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     http.Header{},
		Body:       http.NoBody,
		Host:       "journal.invalid",
	}
	if method == http.MethodPut {
		req.Header.Set("Content-Type", e.ContentType)
		req.Body = io.NopCloser(bytes.NewReader(e.Body))
		req.ContentLength = int64(len(e.Body))
	}
	return req.WithContext(context.Background()), nil
}

// openJournal replays the journal at path into h and opens it for appends.
// A torn last line (a crash mid-append, never acknowledged) is cut off. An
// entry that cannot be replayed (corrupt, outside the grammar, refused by
// the registry) is skipped with a logged error and kept in the file: one bad
// record must not make the cloud unable to restart, nor lose the others.
func openJournal(path string, h http.Handler, blobs *blobIndex, logger logr.Logger) (*journal, int, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, 0, fmt.Errorf("manifest journal: %w", err)
	}
	n, good, err := replay(f, h, blobs, logger)
	if err == nil {
		err = f.Truncate(good)
	}
	if err == nil {
		_, err = f.Seek(good, io.SeekStart)
	}
	if err != nil {
		_ = f.Close()
		return nil, 0, fmt.Errorf("manifest journal %s: %w", path, err)
	}
	return &journal{f: f, blobs: blobs}, n, nil
}

// replay applies every complete entry; good is the offset after the last
// complete line. n counts the entries applied.
func replay(f *os.File, h http.Handler, blobs *blobIndex, logger logr.Logger) (n int, good int64, err error) {
	r := bufio.NewReader(f)
	for {
		line, rerr := r.ReadBytes('\n')
		if errors.Is(rerr, io.EOF) {
			return n, good, nil // a partial line without '\n' was never acknowledged
		}
		if rerr != nil {
			return n, good, rerr
		}
		var e journalEntry
		if err := json.Unmarshal(line, &e); err != nil {
			if _, perr := r.Peek(1); errors.Is(perr, io.EOF) {
				return n, good, nil // torn last line
			}
			logger.Error(err, "Skipping a corrupt manifest journal entry", "journal", f.Name(), "offset", good)
			good += int64(len(line))
			continue
		}
		if err := apply(h, e); err != nil {
			logger.Error(err, "Skipping a manifest journal entry that cannot be replayed",
				"journal", f.Name(), "offset", good, "op", e.Op, "repo", e.Repo, "ref", e.Ref)
		} else {
			n++
			if e.Op == "put" {
				blobs.add(e.Repo, e.Body)
			}
		}
		good += int64(len(line))
	}
}

// apply serves one journal entry's write on h.
func apply(h http.Handler, e journalEntry) error {
	req, err := e.request()
	if err != nil {
		return err
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code/100 != 2 {
		return fmt.Errorf("the registry answered %d: %s", rec.Code, strings.TrimSpace(rec.Body.String()))
	}
	return nil
}

// serveWrite serves a manifest PUT or DELETE and journals it (fsync'ed)
// before the client sees the answer.
func (j *journal) serveWrite(w http.ResponseWriter, req *http.Request, h http.Handler) {
	body, err := io.ReadAll(io.LimitReader(req.Body, maxManifestBytes+1))
	if err != nil {
		writeRegError(w, http.StatusBadRequest, "MANIFEST_INVALID", "reading manifest: "+err.Error())
		return
	}
	if len(body) > maxManifestBytes {
		writeRegError(w, http.StatusRequestEntityTooLarge, "SIZE_INVALID", fmt.Sprintf("manifest larger than %d bytes", maxManifestBytes))
		return
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	repo, ref, _ := splitManifestPath(req.URL.Path)
	// Refused before the registry sees it, so it is neither stored nor
	// journaled (a journaled bad name would be replayed on every restart).
	if r := CheckManifestWrite(req.Method == http.MethodPut, repo, ref, body); r != nil {
		writeRegError(w, r.Status, r.Code, r.Message)
		return
	}

	j.mu.Lock()
	defer j.mu.Unlock()
	if req.Method == http.MethodPut {
		// Indexed before the registry stores it: a pull served the new
		// manifest at once must find its blobs. A put that then fails
		// leaves its digests indexed, which gives nothing a push
		// credential could not give by succeeding.
		j.blobs.add(repo, body)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var e *journalEntry
	switch {
	case req.Method == http.MethodPut && rec.Code == http.StatusCreated:
		e = &journalEntry{Op: "put", Repo: repo, Ref: ref, ContentType: req.Header.Get("Content-Type"), Body: body}
	case req.Method == http.MethodDelete && rec.Code == http.StatusAccepted:
		e = &journalEntry{Op: "delete", Repo: repo, Ref: ref}
	}
	if e != nil {
		if err := j.append(*e); err != nil {
			writeRegError(w, http.StatusInternalServerError, "UNKNOWN", "manifest not saved durably: "+err.Error())
			return
		}
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

func (j *journal) append(e journalEntry) error {
	line, err := json.Marshal(e)
	if err != nil {
		return err
	}
	off, err := j.f.Seek(0, io.SeekCurrent)
	if err != nil {
		return err
	}
	if _, err = j.f.Write(append(line, '\n')); err == nil {
		err = j.f.Sync()
	}
	if err != nil { // leave no torn entry before the next one
		_ = j.f.Truncate(off)
		_, _ = j.f.Seek(off, io.SeekStart)
	}
	return err
}

func (j *journal) close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.f.Close()
}

func writeRegError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]string{{"code": code, "message": msg}}})
}
