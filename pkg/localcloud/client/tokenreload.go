package client

import (
	"os"
	"strings"
	"sync"
	"time"
)

// fileToken is a token read from a file and read again when the file
// changes (its size or modification time): the cloud's tokens are
// rotated without a restart (SIGHUP re-reads them), and its clients follow
// at their next request. A file that turns unreadable or bad keeps the
// last good token, so a rotation half done never stops a client.
type fileToken struct {
	path string
	mu   sync.Mutex
	tok  string
	seen fileStamp
}

type fileStamp struct {
	size  int64
	mtime time.Time
}

func stampOf(fi os.FileInfo) fileStamp { return fileStamp{size: fi.Size(), mtime: fi.ModTime()} }

func (f *fileToken) get() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	fi, err := os.Stat(f.path)
	if err != nil {
		return f.tok
	}
	if st := stampOf(fi); st != f.seen || f.tok == "" {
		if tok, err := ReadTokenFile(f.path); err == nil {
			f.tok, f.seen = strings.TrimSpace(tok), st
		}
	}
	return f.tok
}

// NewWithTokenFile returns a client whose bearer token is the content of
// path, read again whenever the file changes. The file must be readable
// now (the error is ReadTokenFile's).
func NewWithTokenFile(endpoint, path string) (*Client, error) {
	tok, err := ReadTokenFile(path)
	if err != nil {
		return nil, err
	}
	c := New(endpoint, tok)
	ft := &fileToken{path: path}
	if fi, err := os.Stat(path); err == nil {
		ft.tok, ft.seen = tok, stampOf(fi)
	}
	c.tokenFile = ft
	return c, nil
}
