package opreg

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	opregv1 "github.com/opreg/opreg/client/go/gen/opreg/v1"
)

// Work is what RunOnce runs under the lease. It returns the result to record,
// or an error: a [*BusinessError] (recorded failure), a [*TransientError]
// (recorded retryable, claimed again), a [*SentButUnconfirmedError] (recorded
// unknown), or any other error (recorded retryable, returned as a
// [*WorkError]). ctx is cancelled when the lease is lost (context.Cause is
// then a [*LeaseLostError]) or the caller's ctx ends.
type Work func(ctx context.Context, lease *Lease) ([]byte, error)

// Reconcile finds out what became of an attempt whose outcome is unknown
// (Claim answered RECONCILE), given its remote ref, under the reconcile lease.
// It returns [Reconciled], [ReconcileFailed] or [NotApplied]; an error leaves
// the outcome unknown (recorded again) and is returned as a [*WorkError].
type Reconcile func(ctx context.Context, lease *Lease, remoteRef string) (Reconciliation, error)

// Reconciliation is a reconcile verdict.
type Reconciliation struct {
	verdict   verdict
	result    []byte
	resultRef string
	code      string
	message   string
}

type verdict int

const (
	verdictNone verdict = iota
	verdictSucceeded
	verdictFailed
	verdictNotApplied
)

// Reconciled: the attempt took effect with this result; it is recorded.
func Reconciled(result []byte) Reconciliation {
	return Reconciliation{verdict: verdictSucceeded, result: result}
}

// ReconciledWithRef: as [Reconciled], with a result ref.
func ReconciledWithRef(result []byte, resultRef string) Reconciliation {
	return Reconciliation{verdict: verdictSucceeded, result: result, resultRef: resultRef}
}

// ReconcileFailed: the attempt ended in a business failure; it is recorded.
func ReconcileFailed(code, message string) Reconciliation {
	return Reconciliation{verdict: verdictFailed, code: code, message: message}
}

// NotApplied: the attempt did not take effect; the work runs under the same lease.
func NotApplied() Reconciliation { return Reconciliation{verdict: verdictNotApplied} }

// Result is a recorded success. Replayed is true when an earlier execution
// recorded it (Claim answered REPLAYED) and the work did not run.
type Result struct {
	Value     []byte
	ResultRef string
	Replayed  bool
	Operation *opregv1.Operation
}

// Digest is a parameters digest computed by the caller ([ParametersDigest]):
// pass it to RunOnce instead of the parameters to send only the digest.
type Digest []byte

// RunOption configures one RunOnce (or a [Worker]'s operations, where it applies).
type RunOption func(*runSpec)

// WithReconcile gives the callback that settles unknown outcomes (RECONCILE).
// Without it, RECONCILE hands the lease back and returns [*ReconcileRequiredError],
// and an unconfirmed report returns [*OutcomeUnknownError].
func WithReconcile(reconcile Reconcile) RunOption {
	return func(s *runSpec) { s.reconcile = reconcile }
}

// WithOwner names this process or task (default host/pid/random, one per call).
func WithOwner(owner string) RunOption { return func(s *runSpec) { s.owner = owner } }

// WithExecutionID records the scheduler's run id in the history.
func WithExecutionID(id string) RunOption { return func(s *runSpec) { s.executionID = id } }

// WithLeaseTTL is the lease length (default 30 s).
func WithLeaseTTL(ttl time.Duration) RunOption { return func(s *runSpec) { s.leaseTTL = ttl } }

// WithRenewInterval is how often the lease is renewed (default TTL / 3).
func WithRenewInterval(every time.Duration) RunOption {
	return func(s *runSpec) { s.renewInterval = every }
}

// WithDeadline bounds claiming, waiting and retrying (default 120 s). The
// work is not cut by it, and Complete gets time of its own past it.
func WithDeadline(deadline time.Duration) RunOption {
	return func(s *runSpec) { s.deadline = deadline }
}

// WithCallTimeout bounds one RPC (default 10 s).
func WithCallTimeout(timeout time.Duration) RunOption {
	return func(s *runSpec) { s.callTimeout = timeout }
}

// WithMaxClaimWait is the longest each Claim asks the server to hold it while
// the operation is IN_PROGRESS or RETRY_LATER (default 30 s; the rest of the
// deadline when shorter). 0: never ask, and poll instead.
func WithMaxClaimWait(wait time.Duration) RunOption {
	return func(s *runSpec) { s.maxClaimWait = wait }
}

// WithPollInterval: against a server that does not wait, an operation another
// execution holds is claimed again at least this often (default 1 s).
func WithPollInterval(every time.Duration) RunOption {
	return func(s *runSpec) { s.pollInterval = every }
}

// WithRetryPolicy is the retry policy registered with the operation (first
// Claim only; server defaults otherwise).
func WithRetryPolicy(policy *opregv1.RetryPolicy) RunOption {
	return func(s *runSpec) { s.retryPolicy = policy }
}

// WithCompensates names the operation (same namespace) this one compensates.
func WithCompensates(originalKey string) RunOption {
	return func(s *runSpec) { s.compensates = originalKey }
}

// WithTransportBackoff sets the backoff of transient errors: full jitter over
// min(maximum, initial · 2ⁿ) (default 100 ms and 5 s).
func WithTransportBackoff(initial, maximum time.Duration) RunOption {
	return func(s *runSpec) { s.backoffInitial, s.backoffMax = initial, maximum }
}

// RetryPolicy builds a RetryPolicy (all four fields are required by the server).
func RetryPolicy(maxAttempts uint32, initialBackoff, maxBackoff, deadline time.Duration) *opregv1.RetryPolicy {
	return &opregv1.RetryPolicy{
		MaxAttempts:    maxAttempts,
		InitialBackoff: durationpb.New(initialBackoff),
		MaxBackoff:     durationpb.New(maxBackoff),
		Deadline:       durationpb.New(deadline),
	}
}

func newRunSpec(namespace, key string, options []RunOption) *runSpec {
	spec := &runSpec{
		namespace:      namespace,
		operationKey:   key,
		leaseTTL:       DefaultLeaseTTL,
		deadline:       DefaultDeadline,
		callTimeout:    DefaultCallTimeout,
		maxClaimWait:   DefaultMaxClaimWait,
		pollInterval:   DefaultPollInterval,
		backoffInitial: defaultBackoffInitial,
		backoffMax:     defaultBackoffMax,
		retryTransient: true,
	}
	for _, option := range options {
		option(spec)
	}
	if spec.owner == "" {
		spec.owner = DefaultOwner()
	}
	return spec
}

// DefaultOwner is a fresh owner naming this process and one run: host/pid/random.
func DefaultOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "host"
	}
	var suffix [6]byte
	_, _ = crand.Read(suffix[:])
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(suffix[:]))
}

// RunOnce runs work at most once per recorded outcome of the operation
// (namespace, key), by the run-once protocol (client/PROTOCOL.md):
//
//   - REPLAYED returns the stored [Result] (Replayed true) or the stored
//     [*BusinessFailureError]; IN_PROGRESS and RETRY_LATER wait (each Claim
//     asks the server to hold it until the operation moves; a server that
//     does not wait is polled) and claim again within the deadline (else
//     [*DeadlineExceededError]); DEAD returns [*DeadError], HELD
//     [*HeldError]; RECONCILE calls the reconcile callback ([WithReconcile];
//     without one: [*ReconcileRequiredError]).
//   - While work runs its lease is renewed (every TTL/3); when a renewal is
//     refused, or none succeeded before the lease's local expiry, work's ctx
//     is cancelled and [*LeaseLostError] returned, with no Complete.
//   - What work returns is recorded (see [Work]), Complete retried with the
//     same token for its own time and, in doubt, settled by a Lookup
//     ([*OutcomeNotRecordedError] when our report is not found).
//
// parameters is a JSON object (a map, a struct, a *structpb.Struct), sent as a
// Struct, or a [Digest]. Cancelling ctx stops everything: the renewals end and
// the lease lapses at its TTL; nothing more is reported.
func (c *Client) RunOnce(ctx context.Context, namespace, key string, parameters any, work Work, options ...RunOption) (*Result, error) {
	if work == nil {
		return nil, errors.New("opreg: RunOnce needs work")
	}
	spec := newRunSpec(namespace, key, options)
	switch p := parameters.(type) {
	case Digest:
		spec.fingerprint.digest = p
	default:
		s, err := Struct(parameters)
		if err != nil {
			return nil, err
		}
		spec.fingerprint.parameters = s
	}
	until := time.Now().Add(spec.deadline)
	var lastErr error
	for {
		var sent time.Time
		var answeredFirst bool
		resp, err := retryCall(ctx, spec, until, "Claim", false, spec.maxClaimWait, func(callCtx context.Context, try callAttempt) (*opregv1.ClaimResponse, error) {
			if try.first {
				// A Claim whose answer was lost is resumed by the next one: the
				// lease is measured from the first send.
				sent = time.Now()
			}
			answeredFirst = try.first // once retryCall returns, the attempt it answered
			return c.Claim(callCtx, spec.claimRequest(try.serverWait))
		})
		var deadline *DeadlineExceededError
		if errors.As(err, &deadline) && deadline.Cause == nil {
			deadline.Cause = lastErr // what the last execution left, e.g. a transient failure
		}
		if err != nil {
			return nil, err
		}
		decision := decideClaimAnswer(spec, resp, time.Until(until), rand.Float64(), lastErr)
		switch decision.step {
		case claimReturn:
			return decision.result, decision.err
		case claimWait:
			if err := sleep(ctx, decision.wait); err != nil {
				return nil, err
			}
			continue
		}
		executed := c.execute(ctx, spec, &attempt{
			lease:       resp.GetLease(),
			operation:   resp.GetOperation(),
			reconciling: decision.reconcile,
			sent:        claimLeaseStart(sent, answeredFirst, resp.GetWaited().AsDuration()),
			until:       until,
		}, work)
		if !executed.again {
			return executed.result, executed.err
		}
		lastErr = executed.keep
	}
}

// claimRequest is the Claim to send, asking the server to wait that long (0: not at all).
func (s *runSpec) claimRequest(wait time.Duration) *opregv1.ClaimRequest {
	req := &opregv1.ClaimRequest{
		Namespace:    s.namespace,
		OperationKey: s.operationKey,
		Owner:        s.owner,
		ExecutionId:  s.executionID,
		LeaseTtl:     durationpb.New(s.leaseTTL),
		RetryPolicy:  s.retryPolicy,
		Compensates:  s.compensates,
	}
	if s.fingerprint.digest != nil {
		req.Fingerprint = &opregv1.ClaimRequest_ParametersDigest{ParametersDigest: s.fingerprint.digest}
	} else {
		parameters := s.fingerprint.parameters
		if parameters == nil {
			parameters = &structpb.Struct{}
		}
		req.Fingerprint = &opregv1.ClaimRequest_Parameters{Parameters: parameters}
	}
	if wait > 0 {
		req.Wait = durationpb.New(wait)
	}
	return req
}

// attempt is one lease handed out (by Claim or ClaimDue) to execute under.
type attempt struct {
	lease       *opregv1.Lease
	operation   *opregv1.Operation
	reconciling bool
	sent        time.Time // when the lease began at the earliest (claimLeaseStart; for ClaimDue its send)
	until       time.Time // the overall deadline (zero for the worker's operations)
}

// executed is what became of an attempt.
type executed struct {
	again    bool // claim again
	result   *Result
	err      error
	keep     error              // what the work returned when it failed
	report   *report            // what was reported (nil: nothing)
	recorded *opregv1.Operation // the operation once the report was recorded
}

// execute runs the attempt under its lease, renewed meanwhile: the reconcile
// callback first when RECONCILE, then the work (unless the verdict settled
// it), then Complete (and the Lookup in doubt).
func (c *Client) execute(ctx context.Context, spec *runSpec, a *attempt, work Work) executed {
	return c.executeLease(ctx, spec, a, newLease(c, spec, a), work)
}

func (c *Client) executeLease(ctx context.Context, spec *runSpec, a *attempt, lease *Lease, work Work) executed {
	workCtx, cancelWork := context.WithCancelCause(ctx)
	defer cancelWork(nil)
	lease.onLost(func(lost *LeaseLostError) { cancelWork(lost) })
	stopRenewals := c.startRenewals(ctx, spec, lease)
	defer stopRenewals()

	var rep *report
	var keep error
	if a.reconciling {
		if spec.reconcile == nil {
			// Hand the lease back at once rather than sit on it until it lapses.
			rep = handBackReport(a.operation.GetRemoteRef())
		} else {
			verdict, err := spec.reconcile(workCtx, lease, a.operation.GetRemoteRef())
			if ctx.Err() != nil {
				return executed{err: context.Cause(ctx)}
			}
			if lost := lease.Err(); lost != nil {
				return executed{err: lost}
			}
			if err != nil {
				if isLeaseLoss(err) {
					return executed{err: lease.lose(err)}
				}
				rep, keep = reconcileErrorReport(err, a.operation.GetRemoteRef()), err
			} else if rep, err = reconcileReport(verdict); err != nil {
				rep, keep = reconcileErrorReport(err, a.operation.GetRemoteRef()), err
			}
		}
	}
	if rep == nil {
		value, err := work(workCtx, lease)
		if ctx.Err() != nil {
			return executed{err: context.Cause(ctx)}
		}
		if lost := lease.Err(); lost != nil {
			return executed{err: lost} // fencing: only the current holder reports
		}
		var leaseLost bool
		if rep, leaseLost = workReport(value, lease.ResultRef(), err); leaseLost {
			return executed{err: lease.lose(err)}
		}
		keep = err
	}
	if !time.Now().Before(lease.trustedUntil()) {
		lease.lose(errLocalExpiry) // the renewals may not have noticed yet
	}
	if lost := lease.Err(); lost != nil {
		return executed{err: lost, keep: keep}
	}
	op, err := c.completeReport(ctx, spec, lease, rep, a.until)
	if err != nil {
		return executed{err: err, keep: keep, report: rep}
	}
	again, result, err := afterComplete(op, rep, keep, spec, lease.FencingToken())
	return executed{again: again, result: result, err: err, keep: keep, report: rep, recorded: op}
}

// completeReport sends the report with the lease's token, again on transient
// errors (the same report with the same token is idempotent) for Complete's
// own time: the rest of the overall deadline (until), and at least
// completeCallTimeouts call timeouts, past the deadline if need be; a failure
// in doubt is settled by a Lookup with executions.
func (c *Client) completeReport(ctx context.Context, spec *runSpec, lease *Lease, rep *report, until time.Time) (*opregv1.Operation, error) {
	req := rep.completeRequest(lease.Namespace(), lease.OperationKey(), lease.FencingToken())
	own := time.Now().Add(completeCallTimeouts * spec.callTimeout)
	if until.After(own) {
		own = until
	}
	resp, err := retryCall(ctx, spec, own, "Complete", true, 0, func(callCtx context.Context, _ callAttempt) (*opregv1.CompleteResponse, error) {
		return c.Complete(callCtx, req)
	})
	if err == nil {
		return resp.GetOperation(), nil
	}
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	switch decideCompleteError(err) {
	case completeLeaseLost:
		return nil, lease.lose(err)
	case completeDefinitive:
		return nil, err
	}
	lookupUntil := time.Now().Add(completeCallTimeouts * spec.callTimeout)
	found, lookupErr := retryCall(ctx, spec, lookupUntil, "Lookup after Complete", true, 0, func(callCtx context.Context, _ callAttempt) (*opregv1.LookupResponse, error) {
		return c.Lookup(callCtx, &opregv1.LookupRequest{Namespace: lease.Namespace(), OperationKey: lease.OperationKey(), IncludeExecutions: true})
	})
	if lookupErr != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		found = nil
	}
	op, leaseLost, settleErr := decideCallInDoubt(found, lease.FencingToken(), rep, err)
	if leaseLost {
		return nil, lease.lose(err)
	}
	return op, settleErr
}

// callAttempt is one attempt of a call retryCall makes.
type callAttempt struct {
	first      bool          // the first attempt
	serverWait time.Duration // how long to ask the server to wait (0: not at all)
}

// retryCall makes call until it answers, a non-transient error comes back, or
// until passes (then a *DeadlineExceededError whose cause is the last error);
// see retryWait for patient. Each attempt asks the server to wait for the time
// left, at most maxServerWait (0: a call that does not wait), and is bounded
// by attemptTimeout.
func retryCall[T any](ctx context.Context, spec *runSpec, until time.Time, what string, patient bool, maxServerWait time.Duration, call func(ctx context.Context, try callAttempt) (T, error)) (T, error) {
	var zero T
	var last error
	for attempt := 0; ; attempt++ {
		remaining := time.Until(until)
		if remaining <= 0 {
			return zero, &DeadlineExceededError{What: fmt.Sprintf("before %s succeeded on %s/%s", what, spec.namespace, spec.operationKey), Cause: last}
		}
		wait := serverWait(maxServerWait, remaining)
		callCtx, cancel := context.WithTimeout(ctx, attemptTimeout(spec, remaining, wait))
		value, err := call(callCtx, callAttempt{first: attempt == 0, serverWait: wait})
		cancel()
		if err == nil {
			return value, nil
		}
		if ctx.Err() != nil {
			return zero, context.Cause(ctx)
		}
		last = err
		wait, retry := retryWait(spec, err, attempt, time.Until(until), patient, rand.Float64())
		if !retry {
			if IsTransient(err) {
				return zero, &DeadlineExceededError{What: fmt.Sprintf("before %s succeeded on %s/%s", what, spec.namespace, spec.operationKey), Cause: err}
			}
			return zero, err
		}
		if err := sleep(ctx, wait); err != nil {
			return zero, err
		}
	}
}

// sleep waits d, or until ctx ends (its cause then).
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// errLocalExpiry is the cause of a lease lost because no renewal succeeded
// before its local expiry.
var errLocalExpiry = errors.New("no renewal succeeded before the lease's local expiry")
