package opreg

// The decisions of the run-once protocol (client/PROTOCOL.md), without I/O:
// what a Claim answer, a work result, a Complete error, a Lookup in doubt and
// a failed Renew each lead to. runonce.go, lease.go and worker.go make the
// calls, sleep and run the renewals; everything they decide is decided here.
// They draw the randomness of the jitter too, so that each decision is a
// function of its inputs: decisions_test.go runs client/testdata/decisions.json
// (one section per decision, named alike in every client) against them.

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	opregv1 "github.com/opreg/opreg/client/go/gen/opreg/v1"
)

// The protocol's defaults (PROTOCOL.md, "Settings and their defaults").
const (
	// DefaultDeadline bounds claiming, waiting and retrying (not the work).
	DefaultDeadline = 120 * time.Second
	// DefaultLeaseTTL is the server's default lease.
	DefaultLeaseTTL = 30 * time.Second
	// DefaultCallTimeout bounds one RPC.
	DefaultCallTimeout = 10 * time.Second
	// DefaultMaxClaimWait: each Claim asks the server to hold it for the rest
	// of the deadline, at most this long, while the operation is IN_PROGRESS
	// or RETRY_LATER; the server answers the moment the operation moves.
	DefaultMaxClaimWait = 30 * time.Second
	// DefaultPollInterval: against a server that does not wait, IN_PROGRESS is
	// claimed again at least this often (the holder may finish before its
	// lease ends).
	DefaultPollInterval = time.Second

	// Complete (and the Lookup that settles a Complete in doubt) gets this
	// many call timeouts of its own, past the overall deadline if need be.
	completeCallTimeouts = 3
	// Transport backoff: full jitter over min(max, initial · 2ⁿ).
	defaultBackoffInitial = 100 * time.Millisecond
	defaultBackoffMax     = 5 * time.Second
)

// runSpec holds the settings of one RunOnce (or of one operation a Worker runs).
type runSpec struct {
	namespace      string
	operationKey   string
	fingerprint    fingerprint
	owner          string
	executionID    string
	leaseTTL       time.Duration
	renewInterval  time.Duration // 0: leaseTTL / 3
	deadline       time.Duration
	callTimeout    time.Duration
	maxClaimWait   time.Duration // 0: never ask the server to wait
	pollInterval   time.Duration
	retryPolicy    *opregv1.RetryPolicy
	compensates    string
	backoffInitial time.Duration
	backoffMax     time.Duration
	reconcile      Reconcile
	// retryTransient: a recorded transient failure (or an unconfirmed report
	// with a reconcile callback) is claimed again. False for the worker, whose
	// queue hands the operation out again.
	retryTransient bool
}

func (s *runSpec) renewEvery() time.Duration {
	if s.renewInterval > 0 {
		return s.renewInterval
	}
	return max(s.leaseTTL/3, 10*time.Millisecond)
}

// fingerprint is what a Claim identifies the parameters by: the Struct, or a
// digest computed here.
type fingerprint struct {
	parameters *structpb.Struct
	digest     []byte
}

// -- backoff -------------------------------------------------------------------

// retryDelay is the wait before retrying after a transient error (the
// attempt-th retry, from 0): full jitter over min(max, initial · 2^attempt),
// but at least the server's RetryInfo delay (0: none) stretched by up to a
// tenth, so that callers told the same delay do not return together. random
// is a uniform draw in [0, 1).
func retryDelay(spec *runSpec, attempt int, retryInfo time.Duration, random float64) time.Duration {
	// Doubled while below the maximum rather than shifted: initial << attempt
	// overflows for a large attempt or initial.
	ceiling := spec.backoffInitial
	for i := 0; i < attempt && ceiling < spec.backoffMax; i++ {
		ceiling *= 2
	}
	ceiling = min(ceiling, spec.backoffMax)
	return max(time.Duration(random*float64(ceiling)), retryInfo+time.Duration(random*float64(retryInfo)/10))
}

// retryInfoOf is the delay err's google.rpc.RetryInfo asked for (0: none).
func retryInfoOf(err error) time.Duration {
	var rpc *RPCError
	if errors.As(err, &rpc) {
		return rpc.RetryDelay
	}
	return 0
}

// serverWait is how long a call sent with remaining time left before its
// deadline asks the server to hold it: the rest of the deadline, at most
// maxWait (a Claim's: maxClaimWait).
func serverWait(maxWait, remaining time.Duration) time.Duration {
	return max(min(remaining, maxWait), 0)
}

// attemptTimeout bounds one attempt of a call sent with remaining time left
// before its deadline: the call timeout, cut to the time left. An attempt that
// asks the server to wait gets the call timeout plus that wait: the server
// may hold it that long before it even begins to answer.
func attemptTimeout(spec *runSpec, remaining, serverWait time.Duration) time.Duration {
	if serverWait > 0 {
		return spec.callTimeout + serverWait
	}
	return min(spec.callTimeout, remaining)
}

// retryWait decides after a failed call: the wait before the next attempt, or
// give up (retry false) when err is not transient or no time is left. A
// patient call (Complete, and the Lookup that settles it: finished work must
// be reported) uses all of its time, its last wait cut short; the others
// (Claim) give up at once when the wait would end at or past the deadline:
// sleeping into a deadline only delays the answer.
func retryWait(spec *runSpec, err error, attempt int, remaining time.Duration, patient bool, random float64) (wait time.Duration, retry bool) {
	if !IsTransient(err) || remaining <= 0 {
		return 0, false
	}
	wait = retryDelay(spec, attempt, retryInfoOf(err), random)
	if wait >= remaining {
		if !patient {
			return 0, false
		}
		wait = remaining
	}
	return wait, true
}

// -- Claim -----------------------------------------------------------------------

type claimStep int

const (
	claimReturn  claimStep = iota // return result / err
	claimWait                     // sleep wait (none after a server's wait), then claim again
	claimExecute                  // run under the lease
)

type claimDecision struct {
	step      claimStep
	reconcile bool // claimExecute: RECONCILE, reconcile under the lease first
	result    *Result
	err       error
	wait      time.Duration
}

// decideClaimAnswer is what to do with Claim's answer (PROTOCOL.md, "Claim").
// remaining is the time left before the overall deadline; random a uniform
// draw in [0, 1) for the jitter of a wait; lastErr what the previous execution
// of this run left (the cause of a DeadlineExceededError).
func decideClaimAnswer(spec *runSpec, resp *opregv1.ClaimResponse, remaining time.Duration, random float64, lastErr error) claimDecision {
	op := resp.GetOperation()
	switch outcome := resp.GetOutcome(); outcome {
	case opregv1.ClaimOutcome_CLAIM_OUTCOME_REPLAYED:
		result, err := replayed(op)
		return claimDecision{step: claimReturn, result: result, err: err}
	case opregv1.ClaimOutcome_CLAIM_OUTCOME_DEAD:
		return claimDecision{step: claimReturn, err: &DeadError{Operation: op}}
	case opregv1.ClaimOutcome_CLAIM_OUTCOME_HELD:
		// Not waited out: an operator froze it, and waiting would hide that.
		return claimDecision{step: claimReturn, err: &HeldError{RetryAfter: resp.GetRetryAfter().AsDuration(), Operation: op}}
	case opregv1.ClaimOutcome_CLAIM_OUTCOME_IN_PROGRESS, opregv1.ClaimOutcome_CLAIM_OUTCOME_RETRY_LATER:
		// A server that waited held the call as long as it was allowed to and
		// answers the moment the operation moves: claim again at once, with a
		// new wait. One that does not wait is polled.
		var wait time.Duration
		next := fmt.Sprintf("the server waited %v", resp.GetWaited().AsDuration().Round(time.Millisecond))
		if resp.GetWaited() == nil {
			wait = pollWait(spec, resp, random)
			next = fmt.Sprintf("next claim in %v", wait.Round(time.Millisecond))
		}
		if wait >= remaining {
			// Sleeping into the deadline would only delay the answer.
			return claimDecision{step: claimReturn, err: &DeadlineExceededError{
				What:        fmt.Sprintf("on %s/%s after %s (%s)", spec.namespace, spec.operationKey, outcomeName(outcome), next),
				LastOutcome: outcome,
				Operation:   op,
				Cause:       lastErr,
			}}
		}
		return claimDecision{step: claimWait, wait: wait}
	case opregv1.ClaimOutcome_CLAIM_OUTCOME_ACQUIRED, opregv1.ClaimOutcome_CLAIM_OUTCOME_RECONCILE:
		if resp.GetLease() == nil {
			return claimDecision{step: claimReturn, err: fmt.Errorf("opreg: Claim answered %s without a lease", outcomeName(outcome))}
		}
		return claimDecision{step: claimExecute, reconcile: outcome == opregv1.ClaimOutcome_CLAIM_OUTCOME_RECONCILE}
	default:
		return claimDecision{step: claimReturn, err: fmt.Errorf("opreg: unexpected Claim outcome %s", outcomeName(outcome))}
	}
}

// pollWait is the wait before claiming an IN_PROGRESS or RETRY_LATER
// operation again on a server that does not wait: retry_after (IN_PROGRESS: at
// most the poll interval, the holder may finish sooner), plus a little jitter
// for callers told the same time.
func pollWait(spec *runSpec, resp *opregv1.ClaimResponse, random float64) time.Duration {
	after := spec.pollInterval
	if resp.GetRetryAfter() != nil {
		after = resp.GetRetryAfter().AsDuration()
	}
	if resp.GetOutcome() == opregv1.ClaimOutcome_CLAIM_OUTCOME_IN_PROGRESS {
		after = min(after, spec.pollInterval)
	}
	after = max(after, 0)
	return after + 5*time.Millisecond + time.Duration(random*float64(min(after/5, time.Second)))
}

// replayed is the answer to REPLAYED: the stored result, or the stored failure.
func replayed(op *opregv1.Operation) (*Result, error) {
	switch op.GetStatus() {
	case opregv1.OperationStatus_OPERATION_STATUS_SUCCEEDED:
		return &Result{Value: op.GetResult(), ResultRef: op.GetResultRef(), Replayed: true, Operation: op}, nil
	case opregv1.OperationStatus_OPERATION_STATUS_FAILED:
		return nil, &BusinessFailureError{Code: op.GetFailure().GetCode(), Message: op.GetFailure().GetMessage(), Replayed: true, Operation: op}
	}
	return nil, fmt.Errorf("opreg: Claim answered REPLAYED with status %s", op.GetStatus())
}

// -- what the work and the reconcile callback return -------------------------------

// reportKind says what an execution reports and why.
type reportKind int

const (
	reportSuccess         reportKind = iota // the work returned a value, or reconcile found it succeeded
	reportBusiness                          // a BusinessError, or reconcile found it failed
	reportTransient                         // a TransientError
	reportUnconfirmed                       // a SentButUnconfirmedError
	reportUnexpected                        // any other error of the work
	reportHandBack                          // RECONCILE without a callback: Complete(unknown, same ref)
	reportReconcileFailed                   // the reconcile callback failed: Complete(unknown, same ref)
)

// report is one Complete to send: exactly one outcome set.
type report struct {
	kind      reportKind
	success   *opregv1.Success
	failure   *opregv1.Failure
	retryable *opregv1.RetryableError
	unknown   *opregv1.UnknownOutcome
}

func (r *report) completeRequest(namespace, key string, token uint64) *opregv1.CompleteRequest {
	req := &opregv1.CompleteRequest{Namespace: namespace, OperationKey: key, FencingToken: token}
	switch {
	case r.success != nil:
		req.Outcome = &opregv1.CompleteRequest_Success{Success: r.success}
	case r.failure != nil:
		req.Outcome = &opregv1.CompleteRequest_Failure{Failure: r.failure}
	case r.retryable != nil:
		req.Outcome = &opregv1.CompleteRequest_Retryable{Retryable: r.retryable}
	case r.unknown != nil:
		req.Outcome = &opregv1.CompleteRequest_Unknown{Unknown: r.unknown}
	}
	return req
}

// recordedAs is the execution outcome the report is recorded as.
func (r *report) recordedAs() opregv1.ExecutionOutcome {
	switch {
	case r.success != nil:
		return opregv1.ExecutionOutcome_EXECUTION_OUTCOME_SUCCEEDED
	case r.failure != nil:
		return opregv1.ExecutionOutcome_EXECUTION_OUTCOME_FAILED
	case r.retryable != nil:
		return opregv1.ExecutionOutcome_EXECUTION_OUTCOME_RETRYABLE
	case r.unknown != nil:
		return opregv1.ExecutionOutcome_EXECUTION_OUTCOME_UNKNOWN
	}
	return opregv1.ExecutionOutcome_EXECUTION_OUTCOME_UNSPECIFIED
}

func (r *report) String() string {
	switch {
	case r.success != nil:
		return "success"
	case r.failure != nil:
		return "business failure"
	case r.retryable != nil:
		return "retryable error"
	case r.unknown != nil:
		return "unknown outcome"
	}
	return "nothing"
}

// isLeaseLoss: the work (or reconcile) saw the lease go (a fenced write
// refused, say): nothing is reported.
func isLeaseLoss(err error) bool {
	var lost *LeaseLostError
	var stale *StaleFencingTokenError
	return errors.As(err, &lost) || errors.As(err, &stale)
}

// workReport is the Complete for what the work returned (PROTOCOL.md, "The
// work returns"). leaseLost: nothing is to be reported.
func workReport(value []byte, resultRef string, err error) (rep *report, leaseLost bool) {
	if err == nil {
		return &report{kind: reportSuccess, success: &opregv1.Success{Result: value, ResultRef: resultRef}}, false
	}
	if isLeaseLoss(err) {
		return nil, true
	}
	var (
		business    *BusinessError
		transient   *TransientError
		unconfirmed *SentButUnconfirmedError
	)
	switch {
	case errors.As(err, &business):
		return &report{kind: reportBusiness, failure: &opregv1.Failure{Code: business.Code, Message: business.Message}}, false
	case errors.As(err, &transient):
		retryable := &opregv1.RetryableError{Message: transient.Message, ErrorClass: transient.Class}
		if retryable.ErrorClass == "" {
			retryable.ErrorClass = "TransientError"
		}
		if transient.RetryAfter > 0 {
			retryable.RetryAfter = durationpb.New(transient.RetryAfter)
		}
		return &report{kind: reportTransient, retryable: retryable}, false
	case errors.As(err, &unconfirmed):
		return &report{kind: reportUnconfirmed, unknown: &opregv1.UnknownOutcome{RemoteRef: unconfirmed.RemoteRef, Message: unconfirmed.Message}}, false
	}
	return &report{kind: reportUnexpected, retryable: &opregv1.RetryableError{ErrorClass: errorClass(err), Message: err.Error()}}, false
}

// errorClass names an unexpected error's type, as operators see it
// (last_error_class): "*fs.PathError" is "fs.PathError".
func errorClass(err error) string {
	return strings.TrimLeft(fmt.Sprintf("%T", err), "*")
}

// reconcileReport is the Complete for a reconcile verdict; nil for NotApplied
// (run the work under the same lease).
func reconcileReport(verdict Reconciliation) (*report, error) {
	switch verdict.verdict {
	case verdictSucceeded:
		return &report{kind: reportSuccess, success: &opregv1.Success{Result: verdict.result, ResultRef: verdict.resultRef}}, nil
	case verdictFailed:
		return &report{kind: reportBusiness, failure: &opregv1.Failure{Code: verdict.code, Message: verdict.message}}, nil
	case verdictNotApplied:
		return nil, nil
	}
	return nil, errors.New("opreg: reconcile returned no verdict: use Reconciled, ReconcileFailed or NotApplied")
}

// reconcileErrorReport: a reconcile callback that failed leaves the outcome unknown.
func reconcileErrorReport(err error, remoteRef string) *report {
	return &report{kind: reportReconcileFailed, unknown: &opregv1.UnknownOutcome{
		RemoteRef: remoteRef,
		Message:   fmt.Sprintf("reconcile failed: %s: %v", errorClass(err), err),
	}}
}

// handBackReport: RECONCILE without a callback hands the lease back at once.
func handBackReport(remoteRef string) *report {
	return &report{kind: reportHandBack, unknown: &opregv1.UnknownOutcome{
		RemoteRef: remoteRef,
		Message:   "reconcile required: no reconcile callback",
	}}
}

// -- Complete ------------------------------------------------------------------------

type completeFailure int

const (
	completeLeaseLost  completeFailure = iota // STALE_FENCING_TOKEN, LEASE_NOT_HELD
	completeDefinitive                        // a refusal that settles it: return it
	completeInDoubt                           // anything else, or Complete's time ran out: Lookup decides
)

// decideCompleteError says what a Complete that failed (after its retries) means.
func decideCompleteError(err error) completeFailure {
	var (
		stale     *StaleFencingTokenError
		notHeld   *LeaseNotHeldError
		completed *AlreadyCompletedError
		invalid   *InvalidArgumentError
		conflict  *ParameterConflictError
	)
	switch {
	case errors.As(err, &stale), errors.As(err, &notHeld):
		return completeLeaseLost
	case errors.As(err, &completed), errors.As(err, &invalid), errors.As(err, &conflict),
		IsNotFound(err), IsCompensationError(err):
		return completeDefinitive
	}
	return completeInDoubt
}

// decideCallInDoubt decides from the Lookup (nil: it failed) whether our report
// was recorded: only exactly the outcome we reported counts; then the
// operation is as if Complete had answered it. SUPERSEDED (taken over) or
// REVOKED (by an operator): the lease was lost.
// Anything else: OutcomeNotRecordedError.
func decideCallInDoubt(found *opregv1.LookupResponse, token uint64, rep *report, cause error) (op *opregv1.Operation, leaseLost bool, err error) {
	var mine *opregv1.Execution
	for _, execution := range found.GetExecutions() {
		if execution.GetFencingToken() == token {
			mine = execution
		}
	}
	switch {
	case mine != nil && (mine.GetOutcome() == opregv1.ExecutionOutcome_EXECUTION_OUTCOME_SUPERSEDED ||
		mine.GetOutcome() == opregv1.ExecutionOutcome_EXECUTION_OUTCOME_REVOKED):
		return nil, true, nil
	case mine != nil && mine.GetOutcome() == rep.recordedAs() && found.GetOperation() != nil:
		return found.GetOperation(), false, nil
	}
	seen := "Lookup failed"
	switch {
	case mine != nil:
		seen = strings.TrimPrefix(mine.GetOutcome().String(), "EXECUTION_OUTCOME_")
	case found != nil:
		seen = "no execution"
	}
	return nil, false, &OutcomeNotRecordedError{FencingToken: token, Seen: seen + " (reported: " + rep.String() + ")", Cause: cause}
}

// afterComplete is what RunOnce does once the report is recorded and the
// operation is op (PROTOCOL.md, "The work returns"): return (result or
// error), or claim again. keep is what the work returned when it failed.
func afterComplete(op *opregv1.Operation, rep *report, keep error, spec *runSpec, token uint64) (again bool, result *Result, err error) {
	status := op.GetStatus()
	switch rep.kind {
	case reportSuccess:
		if status == opregv1.OperationStatus_OPERATION_STATUS_SUCCEEDED {
			return false, &Result{Value: op.GetResult(), ResultRef: op.GetResultRef(), Operation: op}, nil
		}
		return false, nil, fmt.Errorf("opreg: Complete(success) left the operation %s", status)
	case reportBusiness:
		code, message := op.GetFailure().GetCode(), op.GetFailure().GetMessage()
		if code == "" {
			code, message = rep.failure.GetCode(), rep.failure.GetMessage()
		}
		return false, nil, &BusinessFailureError{Code: code, Message: message, Operation: op}
	case reportTransient:
		if status == opregv1.OperationStatus_OPERATION_STATUS_DEAD {
			return false, nil, &DeadError{Operation: op}
		}
		if spec.retryTransient {
			return true, nil, nil // the queue's backoff governs: RETRY_LATER is waited out
		}
		return false, nil, keep
	case reportUnconfirmed:
		if spec.retryTransient && spec.reconcile != nil {
			return true, nil, nil // answers RECONCILE, reconciled at once
		}
		return false, nil, &OutcomeUnknownError{RemoteRef: rep.unknown.GetRemoteRef(), FencingToken: token, Operation: op, Cause: keep}
	case reportUnexpected:
		// The caller's to see; the queue keeps the retry.
		return false, nil, &WorkError{Err: keep}
	case reportHandBack:
		return false, nil, &ReconcileRequiredError{RemoteRef: rep.unknown.GetRemoteRef(), Operation: op}
	case reportReconcileFailed:
		return false, nil, &WorkError{Err: keep, Reconcile: true}
	}
	return false, nil, fmt.Errorf("opreg: unexpected report %v", rep.kind)
}

// -- the lease -------------------------------------------------------------------------

// trustedUntil: a lease granted or renewed by a call sent at sent is trusted
// until sent + TTL − TTL/10 (the server's lease began no earlier).
func trustedUntil(sent time.Time, ttl time.Duration) time.Time {
	return sent.Add(ttl - ttl/10)
}

// claimLeaseStart is when a lease granted by Claim began at the earliest: the
// send of the Claim's first attempt (a retry after a lost answer resumes the
// lease that attempt was granted), plus the server's wait when the answer came
// to that first attempt itself. An answer to a retry adds nothing: an earlier,
// lost attempt may have been granted the lease after a shorter wait.
func claimLeaseStart(firstSent time.Time, answeredFirst bool, waited time.Duration) time.Time {
	if !answeredFirst {
		return firstSent
	}
	return firstSent.Add(max(waited, 0))
}

// renewTimeout bounds one Renew by the call timeout and the lease's trust.
func renewTimeout(now, trusted time.Time, callTimeout time.Duration) time.Duration {
	return max(min(callTimeout, trusted.Sub(now)), time.Millisecond)
}

// decideRenewFailure: after the attempt-th failed Renew in a row (from 0),
// the lease is lost (any error that is not transient, or no time left before
// its trust ends), or the renewal is retried after wait: the backoff of
// retryDelay (random, a uniform draw in [0, 1), its jitter), never past the
// trust (trustedLeft).
func decideRenewFailure(spec *runSpec, err error, attempt int, trustedLeft time.Duration, random float64) (lost bool, wait time.Duration) {
	if !IsTransient(err) || trustedLeft <= 0 {
		return true, 0
	}
	return false, min(retryDelay(spec, attempt, retryInfoOf(err), random), trustedLeft)
}

func outcomeName(outcome opregv1.ClaimOutcome) string {
	return strings.TrimPrefix(outcome.String(), "CLAIM_OUTCOME_")
}
