// Package syncbuf is a bytes.Buffer that a child process (its stdout and
// stderr) writes while a test or a supervisor reads it.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is safe for concurrent Write and String.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
