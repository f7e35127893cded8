package opreg

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	opregv1 "github.com/opreg/opreg/client/go/gen/opreg/v1"
)

// NoHandlerClass is the error class recorded for an operation whose kind has
// no handler (and the worker no default): it is recorded retryable, so it
// comes back, e.g. to a worker that has the handler.
const NoHandlerClass = "NO_HANDLER"

// maxClaimDueLimit is the most operations one ClaimDue hands out.
const maxClaimDueLimit = 1000

// unwindTimeout: how long work cancelled at the end of the grace period gets
// to return before Run returns anyway.
const unwindTimeout = 5 * time.Second

// ErrWorkerStopped is the cause of the leases whose work the worker cancelled
// when its grace period ran out: nothing is completed under them.
var ErrWorkerStopped = errors.New("opreg: the worker stopped and its grace period ran out")

// Worker runs the due operations of one namespace (ClaimDue: due retries,
// expired leases, unknown outcomes), each on its own goroutine, by the
// run-once rules: renewals, loss, Complete, Lookup in doubt. An operation it
// was handed is never claimed again by the worker itself: a recorded retry is
// handed out again by a later ClaimDue.
//
// The handler is picked by the operation's kind (its key up to the first
// ':'): Handlers[kind], else Default; lease.Operation() carries the
// parameters. What it returns is recorded as RunOnce records its work's.
// RECONCILE operations go to Reconcile (without one they are left alone, and
// handed out again once their reconcile lease expires).
type Worker struct {
	Client    *Client
	Namespace string
	Handlers  map[string]Work
	Default   Work
	Reconcile Reconcile

	// Owner of every lease (default: DefaultOwner()).
	Owner       string
	ExecutionID string
	// MaxInFlight operations at once (default 8).
	MaxInFlight int
	// LeaseTTL (default 30 s), RenewInterval (default TTL / 3), CallTimeout (default 10 s).
	LeaseTTL      time.Duration
	RenewInterval time.Duration
	CallTimeout   time.Duration
	// PollInterval: the wait (give or take a fifth) after ClaimDue handed out nothing (default 1 s).
	PollInterval time.Duration
	// Grace: once Run's ctx ends, in-flight operations get this long to finish
	// (default 30 s); then their leases are marked lost and their work cancelled.
	Grace time.Duration
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// OnFinished, if set, is called once per operation run.
	OnFinished func(Finished)
}

// Finished is what became of one operation a Worker ran.
type Finished struct {
	// Operation as ClaimDue handed it out.
	Operation *opregv1.Operation
	// Recorded is the operation after the report was recorded (nil: nothing was).
	Recorded *opregv1.Operation
	Result   *Result
	// Err: what RunOnce would have returned (a recorded transient failure is
	// the work's *TransientError).
	Err error
}

// KindOf is the kind a Worker picks the handler by: the operation key up to
// its first ':' (the whole key when it has none).
func KindOf(operationKey string) string {
	kind, _, _ := strings.Cut(operationKey, ":")
	return kind
}

// Run pulls and runs due operations until ctx ends; then the operations in
// flight get the grace period to finish, and Run returns nil. It returns
// early with the error of a ClaimDue that failed other than transiently.
func (w *Worker) Run(ctx context.Context) error {
	if w.Client == nil || w.Namespace == "" {
		return errors.New("opreg: a Worker needs a Client and a Namespace")
	}
	if len(w.Handlers) == 0 && w.Default == nil {
		return errors.New("opreg: give the Worker handlers by kind, a default handler, or both")
	}
	spec := w.spec()
	logger := w.Logger
	if logger == nil {
		logger = slog.Default()
	}
	maxInFlight := w.MaxInFlight
	if maxInFlight <= 0 {
		maxInFlight = 8
	}
	grace := w.Grace
	if grace <= 0 {
		grace = 30 * time.Second
	}

	// The executions outlive ctx by the grace period.
	execCtx, cancelExec := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelExec()
	var (
		mu       sync.Mutex
		inFlight = map[*Lease]struct{}{}
		wg       sync.WaitGroup
		freed    = make(chan struct{}, 1)
	)
	free := func() int {
		mu.Lock()
		defer mu.Unlock()
		return min(maxInFlight-len(inFlight), maxClaimDueLimit)
	}
	drain := func() {
		finished := make(chan struct{})
		go func() { wg.Wait(); close(finished) }()
		select {
		case <-finished:
			return
		case <-time.After(grace):
		}
		mu.Lock()
		leases := make([]*Lease, 0, len(inFlight))
		for lease := range inFlight {
			leases = append(leases, lease)
		}
		mu.Unlock()
		logger.Warn("opreg worker: operations still running after the grace period; cancelling their work",
			"namespace", w.Namespace, "count", len(leases), "grace", grace)
		for _, lease := range leases {
			lease.lose(ErrWorkerStopped)
		}
		select {
		case <-finished:
		case <-time.After(unwindTimeout):
			logger.Warn("opreg worker: cancelled operations did not return; their leases are no longer renewed",
				"namespace", w.Namespace)
		}
	}

	failures := 0
	for {
		for free() <= 0 {
			select {
			case <-ctx.Done():
				drain()
				return nil
			case <-freed:
			}
		}
		if ctx.Err() != nil {
			drain()
			return nil
		}
		sent := time.Now() // the leases end at the latest lease TTL after this
		// Not cut by the stop (execCtx, not ctx): the server may have leased
		// operations to us already, and those are run within the grace
		// rather than dropped until their leases lapse.
		callCtx, cancel := context.WithTimeout(execCtx, spec.callTimeout)
		resp, err := w.Client.ClaimDue(callCtx, &opregv1.ClaimDueRequest{
			Namespace:   spec.namespace,
			Owner:       spec.owner,
			ExecutionId: spec.executionID,
			LeaseTtl:    durationpb.New(spec.leaseTTL),
			Limit:       uint32(free()),
		})
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				drain()
				return nil
			}
			if !IsTransient(err) {
				drain()
				return err
			}
			wait := retryDelay(spec, failures, retryInfoOf(err), rand.Float64())
			failures++
			logger.Warn("opreg worker: ClaimDue failed; trying again", "namespace", w.Namespace, "error", err, "in", wait)
			_ = sleep(ctx, wait)
			continue
		}
		failures = 0
		for _, due := range resp.GetOperations() {
			lease, a, operationSpec, work := w.plan(spec, due, sent, logger)
			if lease == nil {
				continue
			}
			mu.Lock()
			inFlight[lease] = struct{}{}
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				done := w.Client.executeLease(execCtx, operationSpec, a, lease, work)
				mu.Lock()
				delete(inFlight, lease)
				mu.Unlock()
				select {
				case freed <- struct{}{}:
				default:
				}
				w.finished(logger, due.GetOperation(), done)
			}()
		}
		if len(resp.GetOperations()) == 0 {
			poll := spec.pollInterval
			_ = sleep(ctx, time.Duration(float64(poll)*(0.8+0.4*rand.Float64())))
		}
	}
}

func (w *Worker) spec() *runSpec {
	spec := newRunSpec(w.Namespace, "", []RunOption{WithOwner(w.Owner), WithExecutionID(w.ExecutionID)})
	if w.LeaseTTL > 0 {
		spec.leaseTTL = w.LeaseTTL
	}
	spec.renewInterval = w.RenewInterval
	if w.CallTimeout > 0 {
		spec.callTimeout = w.CallTimeout
	}
	if w.PollInterval > 0 {
		spec.pollInterval = w.PollInterval
	}
	spec.reconcile = w.Reconcile
	spec.retryTransient = false
	return spec
}

// plan is how to run what ClaimDue handed out; a nil lease to leave it alone.
func (w *Worker) plan(base *runSpec, due *opregv1.DueOperation, sent time.Time, logger *slog.Logger) (*Lease, *attempt, *runSpec, Work) {
	op := due.GetOperation()
	switch due.GetOutcome() {
	case opregv1.ClaimOutcome_CLAIM_OUTCOME_ACQUIRED:
	case opregv1.ClaimOutcome_CLAIM_OUTCOME_RECONCILE:
		if w.Reconcile == nil {
			logger.Warn("opreg worker: the last outcome is unknown and this worker has no Reconcile; left alone until its reconcile lease expires",
				"namespace", op.GetNamespace(), "key", op.GetOperationKey(), "remote_ref", op.GetRemoteRef())
			return nil, nil, nil, nil
		}
	default:
		logger.Error("opreg worker: ClaimDue handed out an operation with an unexpected outcome; left alone",
			"namespace", op.GetNamespace(), "key", op.GetOperationKey(), "outcome", outcomeName(due.GetOutcome()))
		return nil, nil, nil, nil
	}
	if due.GetLease() == nil {
		logger.Error("opreg worker: ClaimDue handed out an operation without a lease", "key", op.GetOperationKey())
		return nil, nil, nil, nil
	}
	spec := *base
	spec.operationKey = op.GetOperationKey()
	a := &attempt{
		lease:       due.GetLease(),
		operation:   op,
		reconciling: due.GetOutcome() == opregv1.ClaimOutcome_CLAIM_OUTCOME_RECONCILE,
		sent:        sent,
	}
	kind := KindOf(op.GetOperationKey())
	work, ok := w.Handlers[kind]
	if !ok {
		work = w.Default
	}
	if work == nil {
		work = func(context.Context, *Lease) ([]byte, error) {
			return nil, &TransientError{Class: NoHandlerClass, Message: fmt.Sprintf("no handler for kind %q", kind)}
		}
	}
	return newLease(w.Client, &spec, a), a, &spec, work
}

func (w *Worker) finished(logger *slog.Logger, op *opregv1.Operation, done executed) {
	where := []any{"namespace", op.GetNamespace(), "key", op.GetOperationKey()}
	var lost *LeaseLostError
	switch {
	case done.recorded != nil && done.err == nil:
		logger.Info("opreg worker: recorded "+done.report.String(), append(where, "status", done.recorded.GetStatus().String())...)
	case done.recorded != nil:
		logger.Info("opreg worker: recorded "+done.report.String(), append(where, "status", done.recorded.GetStatus().String(), "error", done.err)...)
	case errors.As(done.err, &lost):
		logger.Warn("opreg worker: the lease was lost; nothing recorded", append(where, "error", done.err)...)
	default:
		logger.Error("opreg worker: the outcome was not recorded", append(where, "error", done.err)...)
	}
	if w.OnFinished != nil {
		w.OnFinished(Finished{Operation: op, Recorded: done.recorded, Result: done.result, Err: done.err})
	}
}
