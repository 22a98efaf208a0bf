package cli

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/portside-io/portside/pkg/localcloud/client"
)

// cloudCall is what a `portside cloud` verb works with.
type cloudCall struct {
	f *cloudFlags
	c *client.Client
	w io.Writer
}

// one prints a single result: JSON with -o json, else the summary line.
func (c cloudCall) one(v any, summary string) error {
	if c.f.output == "json" || summary == "" {
		enc := json.NewEncoder(c.w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	_, err := fmt.Fprintln(c.w, summary)
	return err
}
