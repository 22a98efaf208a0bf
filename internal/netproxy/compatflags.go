package netproxy

import (
	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
)

// IgnoredFlags are upstream flags a Portside command accepts and does not
// implement: a drop-in replacement must not fail on a manifest written for
// upstream, and says at start which of them were set.
type IgnoredFlags map[string]struct{}

// RegisterIgnored adds the flags (name → upstream default) to fs; bool ones
// (default "true"/"false") parse without a value, as upstream's do.
func RegisterIgnored(fs *pflag.FlagSet, flags map[string]string, component string) IgnoredFlags {
	ig := IgnoredFlags{}
	usage := "Accepted for compatibility with upstream's " + component + ", and ignored."
	for name, def := range flags {
		if def == "true" || def == "false" {
			fs.Bool(name, def == "true", usage)
		} else {
			fs.String(name, def, usage)
		}
		ig[name] = struct{}{}
	}
	return ig
}

// LogSet logs each ignored flag that fs had set.
func (ig IgnoredFlags) LogSet(fs *pflag.FlagSet, logger logr.Logger) {
	for name := range ig {
		if fs.Changed(name) {
			logger.Info("Ignoring upstream flag Portside does not implement", "flag", "--"+name)
		}
	}
}
