package manager

import (
	"context"
	"fmt"
	"os"
	"sync"

	"github.com/google/uuid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// elect runs run while holding the Lease lockName, until ctx is done (the
// Lease is released) or the Lease is lost (ErrLostLease). run may call fail
// later to stop leading with an error.
func elect(ctx context.Context, o *Options, client kubernetes.Interface, h *health, lockName string, run func(ctx context.Context, fail func(error)) error) error {
	logger := klog.FromContext(ctx).WithValues("lease", lockName)
	id := o.LeaderElectIdentity
	if id == "" {
		host, _ := os.Hostname()
		id = host + "_" + uuid.NewString()
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: lockName, Namespace: o.LeaderElectNamespace},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	var (
		mu     sync.Mutex
		runErr error
	)
	led := false
	leCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	fail := func(err error) {
		mu.Lock()
		if runErr == nil {
			runErr = err
		}
		mu.Unlock()
		cancel()
	}
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   o.LeaseDuration,
		RenewDeadline:   o.RenewDeadline,
		RetryPeriod:     o.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            lockName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				led = true
				logger.Info("Became leader; starting controllers", "identity", id)
				if err := run(ctx, fail); err != nil {
					fail(err)
				}
			},
			OnStoppedLeading: func() {
				if led && ctx.Err() == nil {
					h.leaderStale.Store(true)
				}
			},
			OnNewLeader: func(identity string) {
				if identity != id {
					logger.Info("Standing by", "leader", identity, "identity", id)
				}
			},
		},
	})
	if err != nil {
		return err
	}
	// A standby is healthy and ready: it serves its purpose by waiting.
	h.ready.Store(true)
	elector.Run(leCtx)
	mu.Lock()
	defer mu.Unlock()
	switch {
	case runErr != nil:
		return runErr
	case ctx.Err() != nil:
		logger.Info("Shut down; lease released", "identity", id)
		return nil
	default:
		return fmt.Errorf("%w %s (identity %s)", ErrLostLease, lockName, id)
	}
}
