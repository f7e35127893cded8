package opreg

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	opregv1 "github.com/opreg/opreg/client/go/gen/opreg/v1"
)

// Lease is the lease an execution holds, handed to the work and the reconcile
// callback. Done is closed (and the work's ctx cancelled) once the lease is
// lost: a renewal was refused, another execution took over, or no renewal
// succeeded before its local expiry. Then stop: nothing will be reported
// under it, and RunOnce returns a [*LeaseLostError].
type Lease struct {
	client       *Client
	namespace    string
	operationKey string
	owner        string
	fencingToken uint64
	attempt      uint32
	takeover     bool
	reconciling  bool
	remoteRef    string
	operation    *opregv1.Operation

	mu        sync.Mutex
	expiresAt time.Time
	trusted   time.Time // the local expiry: trusted until then
	resultRef string
	lost      chan struct{}
	lostErr   *LeaseLostError
	callbacks []func(*LeaseLostError)
}

func newLease(c *Client, spec *runSpec, a *attempt) *Lease {
	return &Lease{
		client:       c,
		namespace:    spec.namespace,
		operationKey: spec.operationKey,
		owner:        a.lease.GetOwner(),
		fencingToken: a.lease.GetFencingToken(),
		attempt:      a.lease.GetAttempt(),
		takeover:     a.lease.GetTakeover(),
		reconciling:  a.reconciling,
		remoteRef:    a.operation.GetRemoteRef(),
		operation:    a.operation,
		expiresAt:    a.lease.GetExpiresAt().AsTime(),
		// Measured from the send of the call that granted it: a slow answer
		// shortens the trusted time rather than lengthening it.
		trusted: trustedUntil(a.sent, spec.leaseTTL),
		lost:    make(chan struct{}),
	}
}

// Namespace of the operation.
func (l *Lease) Namespace() string { return l.namespace }

// OperationKey of the operation.
func (l *Lease) OperationKey() string { return l.operationKey }

// Owner the lease is held by.
func (l *Lease) Owner() string { return l.owner }

// FencingToken to present to protected resources (FencedWrite or your own).
func (l *Lease) FencingToken() uint64 { return l.fencingToken }

// Attempt is the attempt this execution runs as.
func (l *Lease) Attempt() uint32 { return l.attempt }

// Takeover is true when this lease took over an expired one.
func (l *Lease) Takeover() bool { return l.takeover }

// Reconciling is true for a reconcile lease (Claim answered RECONCILE).
func (l *Lease) Reconciling() bool { return l.reconciling }

// RemoteRef is the remote ref of the unknown outcome being reconciled.
func (l *Lease) RemoteRef() string { return l.remoteRef }

// Operation is the operation as Claim (or ClaimDue, with its parameters) handed it out.
func (l *Lease) Operation() *opregv1.Operation { return l.operation }

// ExpiresAt is the server's expiry of the lease, as last granted or renewed.
func (l *Lease) ExpiresAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expiresAt
}

// Done is closed once the lease is lost.
func (l *Lease) Done() <-chan struct{} { return l.lost }

// Lost reports whether the lease was lost.
func (l *Lease) Lost() bool {
	select {
	case <-l.lost:
		return true
	default:
		return false
	}
}

// Err is the [*LeaseLostError] once the lease is lost, else nil.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lostErr == nil {
		return nil
	}
	return l.lostErr
}

// SetResultRef sets the result ref recorded with the work's successful result.
func (l *Lease) SetResultRef(ref string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.resultRef = ref
}

// ResultRef is what SetResultRef set.
func (l *Lease) ResultRef() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.resultRef
}

// FencedWrite writes a protected resource with this lease's token. A refusal
// (another execution took over) marks the lease lost and returns a
// [*LeaseLostError].
func (l *Lease) FencedWrite(ctx context.Context, resource string, value []byte) (*opregv1.FencedWriteResponse, error) {
	if err := l.Err(); err != nil {
		return nil, err
	}
	resp, err := l.client.FencedWrite(ctx, &opregv1.FencedWriteRequest{
		Namespace:    l.namespace,
		Resource:     resource,
		OperationKey: l.operationKey,
		FencingToken: l.fencingToken,
		Value:        value,
	})
	if isLeaseLoss(err) {
		return nil, l.lose(err)
	}
	return resp, err
}

// lose marks the lease lost (once; later causes are ignored) and returns the error.
func (l *Lease) lose(cause error) *LeaseLostError {
	l.mu.Lock()
	if l.lostErr != nil {
		lost := l.lostErr
		l.mu.Unlock()
		return lost
	}
	l.lostErr = &LeaseLostError{Namespace: l.namespace, OperationKey: l.operationKey, FencingToken: l.fencingToken, Cause: cause}
	close(l.lost)
	callbacks := l.callbacks
	l.mu.Unlock()
	for _, callback := range callbacks {
		callback(l.lostErr)
	}
	return l.lostErr
}

// onLost calls callback when the lease is lost (at once if it already is).
func (l *Lease) onLost(callback func(*LeaseLostError)) {
	l.mu.Lock()
	if l.lostErr != nil {
		lost := l.lostErr
		l.mu.Unlock()
		callback(lost)
		return
	}
	l.callbacks = append(l.callbacks, callback)
	l.mu.Unlock()
}

func (l *Lease) trustedUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.trusted
}

func (l *Lease) renewed(lease *opregv1.Lease, trusted time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if lease.GetExpiresAt() != nil {
		l.expiresAt = lease.GetExpiresAt().AsTime()
	}
	l.trusted = trusted
}

// startRenewals renews the lease every renew interval until the returned
// stop is called (it cancels a Renew in flight and waits for the renewals to
// end) or the lease is lost. Any Renew error that is not transient loses the
// lease; transient ones are retried with backoff, never past the local
// expiry; a lease not renewed by its local expiry is lost too. Cancelling ctx
// ends the renewals.
func (c *Client) startRenewals(ctx context.Context, spec *runSpec, lease *Lease) (stop func()) {
	renewCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.renewUntilLost(renewCtx, spec, lease)
	}()
	return func() {
		cancel()
		<-done
	}
}

// renewUntilLost renews until ctx ends (stop, or the caller's cancellation:
// then what a Renew in flight answers no longer matters) or the lease is lost.
func (c *Client) renewUntilLost(ctx context.Context, spec *runSpec, lease *Lease) {
	req := &opregv1.RenewRequest{
		Namespace:    lease.namespace,
		OperationKey: lease.operationKey,
		Owner:        lease.owner,
		FencingToken: lease.fencingToken,
		LeaseTtl:     durationpb.New(spec.leaseTTL),
	}
	wait := spec.renewEvery()
	failures := 0
	for {
		trusted := lease.trustedUntil()
		timer := time.NewTimer(max(min(wait, time.Until(trusted)), 0))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-lease.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		sent := time.Now()
		if !sent.Before(trusted) {
			lease.lose(errLocalExpiry)
			return
		}
		callCtx, cancel := context.WithTimeout(ctx, renewTimeout(sent, trusted, spec.callTimeout))
		resp, err := c.Renew(callCtx, req)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			lease.renewed(resp.GetLease(), trustedUntil(sent, spec.leaseTTL))
			failures, wait = 0, spec.renewEvery()
			continue
		}
		lost, retryIn := decideRenewFailure(spec, err, failures, time.Until(trusted), rand.Float64())
		failures++
		if lost {
			if IsTransient(err) {
				lease.lose(errLocalExpiry)
			} else {
				lease.lose(err)
			}
			return
		}
		wait = retryIn
	}
}
