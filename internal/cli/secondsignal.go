package cli

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// exitOnSecondSignal lets a second SIGINT or SIGTERM end a command that is
// cleaning up after the first (which cancels its context): a user who
// presses Ctrl-C again, or a supervisor that sends SIGTERM again, means
// "now", and what the clean-up would have removed is named by msg (a
// command that removes it). Exits with 130, as a shell reports SIGINT.
// stop ends the watch.
func exitOnSecondSignal(w io.Writer, msg string) (stop func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		// Every signal reaches sigs too, the first included.
		for n := 0; ; {
			select {
			case <-sigs:
				if n++; n == 2 {
					fmt.Fprintf(w, "\nsecond signal: exiting without the rest of the clean-up; %s\n", msg)
					os.Exit(130)
				}
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(done)
	}
}
