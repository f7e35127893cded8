package opreg

import (
	"fmt"
	"time"

	opregv1 "github.com/opreg/opreg/client/go/gen/opreg/v1"
)

// What the work (and the reconcile callback) returns to say how it failed.
// Any other error is recorded retryable and returned wrapped in a [WorkError].

// BusinessError is a terminal business failure (e.g. insufficient funds) the
// work returns: recorded with Complete(failure) and replayed like a success.
type BusinessError struct {
	Code    string
	Message string
}

func (e *BusinessError) Error() string {
	if e.Message == "" {
		return "business failure " + e.Code
	}
	return "business failure " + e.Code + ": " + e.Message
}

// TransientError is a failure worth another attempt: recorded with
// Complete(retryable), then claimed again (the queue's backoff governs).
// RetryAfter (optional) is downstream pushback: the next attempt is due then.
// Class is recorded as the error class (default "TransientError").
type TransientError struct {
	Class      string
	Message    string
	RetryAfter time.Duration
}

func (e *TransientError) Error() string {
	return "transient failure: " + e.Message
}

// SentButUnconfirmedError says the work's request may have taken effect (a
// timeout after it left, say): recorded with Complete(unknown, RemoteRef) and
// reconciled before anything runs again.
type SentButUnconfirmedError struct {
	RemoteRef string
	Message   string
}

func (e *SentButUnconfirmedError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("sent but unconfirmed (remote ref %q)", e.RemoteRef)
	}
	return fmt.Sprintf("sent but unconfirmed (remote ref %q): %s", e.RemoteRef, e.Message)
}

// The errors RunOnce returns; each names its conformance kind
// (client/PROTOCOL.md, "Errors and their conformance kinds").

// BusinessFailureError [business_failure]: the business failure the work just
// recorded (Replayed false) or one recorded earlier (Replayed true).
type BusinessFailureError struct {
	Code      string
	Message   string
	Replayed  bool
	Operation *opregv1.Operation
}

func (e *BusinessFailureError) Error() string {
	replayed := ""
	if e.Replayed {
		replayed = " (recorded earlier)"
	}
	return fmt.Sprintf("opreg: business failure %s%s: %s", e.Code, replayed, e.Message)
}

// DeadError [dead]: the retry budget or deadline is spent; an operator decides.
type DeadError struct {
	Operation *opregv1.Operation
}

func (e *DeadError) Error() string {
	op := e.Operation
	text := fmt.Sprintf("opreg: %s/%s is DEAD after %d attempt(s)", op.GetNamespace(), op.GetOperationKey(), op.GetAttempts())
	if op.GetLastErrorClass() != "" {
		text += fmt.Sprintf("; last error %s: %s", op.GetLastErrorClass(), op.GetLastErrorMessage())
	}
	return text
}

// HeldError [held]: an operator froze the operation. Claim again after
// RetryAfter, or ask the operator.
type HeldError struct {
	RetryAfter time.Duration
	Operation  *opregv1.Operation
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("opreg: %s/%s is held by an operator; claim again after %v or ask the operator",
		e.Operation.GetNamespace(), e.Operation.GetOperationKey(), e.RetryAfter)
}

// LeaseLostError [lease_lost]: the lease was lost (refused renewal, takeover,
// no renewal before the local expiry, Complete refused as stale or not held).
// Nothing was, or will be, reported under it. Cause is what showed the loss.
type LeaseLostError struct {
	Namespace    string
	OperationKey string
	FencingToken uint64
	Cause        error
}

func (e *LeaseLostError) Error() string {
	return fmt.Sprintf("opreg: the lease %d on %s/%s was lost: %v", e.FencingToken, e.Namespace, e.OperationKey, e.Cause)
}

func (e *LeaseLostError) Unwrap() error { return e.Cause }

// OutcomeUnknownError [outcome_unknown]: the work reported sent-but-unconfirmed,
// that is recorded (UNKNOWN), and there is no reconcile callback to find out
// what happened. A later RunOnce with one (or an operator) settles it.
type OutcomeUnknownError struct {
	RemoteRef    string
	FencingToken uint64
	Operation    *opregv1.Operation
	Cause        error
}

func (e *OutcomeUnknownError) Error() string {
	return fmt.Sprintf("opreg: the outcome of %s/%s (execution %d) is unknown (remote ref %q) and no reconcile callback was given",
		e.Operation.GetNamespace(), e.Operation.GetOperationKey(), e.FencingToken, e.RemoteRef)
}

func (e *OutcomeUnknownError) Unwrap() error { return e.Cause }

// ReconcileRequiredError [reconcile_required]: Claim answered RECONCILE (the
// last outcome is unknown) and no reconcile callback was given; the lease was
// handed back with Complete(unknown).
type ReconcileRequiredError struct {
	RemoteRef string
	Operation *opregv1.Operation
}

func (e *ReconcileRequiredError) Error() string {
	return fmt.Sprintf("opreg: the last outcome of %s/%s is unknown (remote ref %q) and no reconcile callback was given",
		e.Operation.GetNamespace(), e.Operation.GetOperationKey(), e.RemoteRef)
}

// DeadlineExceededError [deadline_exceeded]: the overall deadline passed while
// claiming, waiting for another holder or a scheduled retry, or retrying
// transient errors. LastOutcome is the last Claim outcome seen (UNSPECIFIED if
// none); Cause the last transient error or work error.
type DeadlineExceededError struct {
	What        string
	LastOutcome opregv1.ClaimOutcome
	Operation   *opregv1.Operation
	Cause       error
}

func (e *DeadlineExceededError) Error() string {
	text := "opreg: deadline exceeded " + e.What
	if e.Cause != nil {
		text += ": " + e.Cause.Error()
	}
	return text
}

func (e *DeadlineExceededError) Unwrap() error { return e.Cause }

// OutcomeNotRecordedError [outcome_not_recorded]: the work finished but its
// report could not be recorded, nor found recorded by a Lookup: the lease
// will lapse and the operation will be claimed again.
type OutcomeNotRecordedError struct {
	FencingToken uint64
	// Seen is what the Lookup showed of the execution ("RUNNING", "no
	// execution", "Lookup failed", ...).
	Seen  string
	Cause error
}

func (e *OutcomeNotRecordedError) Error() string {
	return fmt.Sprintf("opreg: the outcome of execution %d was not recorded: Complete failed (%v) and Lookup shows %s",
		e.FencingToken, e.Cause, e.Seen)
}

func (e *OutcomeNotRecordedError) Unwrap() error { return e.Cause }

// WorkError [work_error]: the work (or the reconcile callback, Reconcile true)
// returned an error of no opreg kind. The work's error was recorded retryable
// (the reconcile's leaves the outcome unknown), so the queue keeps the retry.
// It unwraps to that error.
type WorkError struct {
	Err       error
	Reconcile bool
}

func (e *WorkError) Error() string {
	if e.Reconcile {
		return "opreg: the reconcile callback failed: " + e.Err.Error()
	}
	return "opreg: the work failed: " + e.Err.Error()
}

func (e *WorkError) Unwrap() error { return e.Err }
