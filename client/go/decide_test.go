package opreg

// The pure decisions of decide.go beyond client/testdata/decisions.json
// (decisions_test.go runs its vectors): what the work and the reconcile
// callback report, what follows a recorded report, the lease's times, and the
// edges of the decisions the vectors do not reach.

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	opregv1 "github.com/opreg/opreg/client/go/gen/opreg/v1"
)

func testSpec() *runSpec {
	spec := newRunSpec("ns", "key", nil)
	spec.callTimeout = time.Second
	return spec
}

func refusal(code codes.Code, reason string) error {
	st, err := status.New(code, "refused").WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain})
	if err != nil {
		panic(err)
	}
	return FromError(st.Err())
}

var (
	unavailable = FromError(status.Error(codes.Unavailable, "connection refused"))
	stale       = refusal(codes.Aborted, "STALE_FENCING_TOKEN")
)

// What decisions.json does not say: a deadline carries what the last execution
// left, and answers no server should give are errors, not guesses.
func TestDecideClaimAnswer(t *testing.T) {
	spec := testSpec()
	cause := errors.New("the last work error")
	d := decideClaimAnswer(spec, &opregv1.ClaimResponse{Outcome: opregv1.ClaimOutcome_CLAIM_OUTCOME_RETRY_LATER, RetryAfter: durationpb.New(time.Second)}, 500*time.Millisecond, 0.5, cause)
	var deadline *DeadlineExceededError
	if !errors.As(d.err, &deadline) || deadline.LastOutcome != opregv1.ClaimOutcome_CLAIM_OUTCOME_RETRY_LATER || !errors.Is(d.err, cause) {
		t.Errorf("RETRY_LATER past the deadline: %+v", d)
	}
	for _, outcome := range []opregv1.ClaimOutcome{opregv1.ClaimOutcome_CLAIM_OUTCOME_ACQUIRED, opregv1.ClaimOutcome_CLAIM_OUTCOME_RECONCILE} {
		if d := decideClaimAnswer(spec, &opregv1.ClaimResponse{Outcome: outcome}, time.Minute, 0.5, nil); d.step != claimReturn || d.err == nil {
			t.Errorf("%v without a lease: %+v", outcome, d)
		}
	}
	if d := decideClaimAnswer(spec, &opregv1.ClaimResponse{}, time.Minute, 0.5, nil); d.err == nil {
		t.Errorf("UNSPECIFIED: %+v", d)
	}
}

type oddError struct{}

func (oddError) Error() string { return "odd" }

func TestWorkReport(t *testing.T) {
	rep, lost := workReport([]byte("v"), "ref", nil)
	if lost || rep.kind != reportSuccess || string(rep.success.GetResult()) != "v" || rep.success.GetResultRef() != "ref" {
		t.Errorf("success: %+v", rep)
	}
	rep, _ = workReport(nil, "", &BusinessError{Code: "insufficient_funds"})
	if rep.kind != reportBusiness || rep.failure.GetCode() != "insufficient_funds" {
		t.Errorf("business: %+v", rep)
	}
	rep, _ = workReport(nil, "", &TransientError{Message: "m", RetryAfter: time.Second})
	if rep.kind != reportTransient || rep.retryable.GetErrorClass() != "TransientError" || rep.retryable.GetRetryAfter().AsDuration() != time.Second {
		t.Errorf("transient: %+v", rep)
	}
	wrapped := errors.Join(errors.New("context"), &SentButUnconfirmedError{RemoteRef: "r-1"})
	rep, _ = workReport(nil, "", wrapped)
	if rep.kind != reportUnconfirmed || rep.unknown.GetRemoteRef() != "r-1" {
		t.Errorf("a wrapped unconfirmed: %+v", rep)
	}
	rep, _ = workReport(nil, "", oddError{})
	if rep.kind != reportUnexpected || rep.retryable.GetErrorClass() != "opreg.oddError" {
		t.Errorf("unexpected: %+v", rep.retryable)
	}
	for _, err := range []error{stale, &LeaseLostError{}} {
		if _, lost := workReport(nil, "", err); !lost {
			t.Errorf("%T from the work is a lease loss", err)
		}
	}
}

func TestReconcileReport(t *testing.T) {
	if rep, err := reconcileReport(Reconciled([]byte("x"))); err != nil || string(rep.success.GetResult()) != "x" {
		t.Errorf("succeeded: %+v %v", rep, err)
	}
	if rep, err := reconcileReport(ReconcileFailed("c", "m")); err != nil || rep.failure.GetCode() != "c" {
		t.Errorf("failed: %+v %v", rep, err)
	}
	if rep, err := reconcileReport(NotApplied()); err != nil || rep != nil {
		t.Errorf("not applied: %+v %v", rep, err)
	}
	if _, err := reconcileReport(Reconciliation{}); err == nil {
		t.Error("the zero Reconciliation is no verdict")
	}
	if rep := reconcileErrorReport(oddError{}, "r"); rep.unknown.GetRemoteRef() != "r" {
		t.Errorf("a failed reconcile keeps the remote ref: %+v", rep)
	}
}

// Complete's error once its time ran out is the deadline, wrapping the last
// transient error: in doubt, as that error is (decisions.json).
func TestDecideCompleteErrorAfterItsTime(t *testing.T) {
	if got := decideCompleteError(&DeadlineExceededError{Cause: unavailable}); got != completeInDoubt {
		t.Errorf("time ran out: %v, want in doubt", got)
	}
}

// An outcome not recorded says what the Complete failed with.
func TestDecideCallInDoubtKeepsTheCause(t *testing.T) {
	success := &report{kind: reportSuccess, success: &opregv1.Success{}}
	_, _, err := decideCallInDoubt(nil, 2, success, unavailable)
	var unrecorded *OutcomeNotRecordedError
	if !errors.As(err, &unrecorded) || !errors.Is(err, unavailable) {
		t.Errorf("the Lookup failed: %v", err)
	}
}

func TestAfterComplete(t *testing.T) {
	spec := testSpec()
	status := func(s opregv1.OperationStatus) *opregv1.Operation { return &opregv1.Operation{Status: s} }
	transient := &TransientError{Message: "later"}
	transientReport, _ := workReport(nil, "", transient)
	unconfirmedReport, _ := workReport(nil, "", &SentButUnconfirmedError{RemoteRef: "r"})
	unexpectedReport, _ := workReport(nil, "", oddError{})

	if again, _, err := afterComplete(status(opregv1.OperationStatus_OPERATION_STATUS_RETRY_SCHEDULED), transientReport, transient, spec, 1); !again || err != nil {
		t.Errorf("transient: claim again (%v, %v)", again, err)
	}
	if _, _, err := afterComplete(status(opregv1.OperationStatus_OPERATION_STATUS_DEAD), transientReport, transient, spec, 1); !errors.As(err, new(*DeadError)) {
		t.Errorf("transient and DEAD: %v", err)
	}
	if _, _, err := afterComplete(status(opregv1.OperationStatus_OPERATION_STATUS_UNKNOWN), unconfirmedReport, nil, spec, 1); !errors.As(err, new(*OutcomeUnknownError)) {
		t.Errorf("unconfirmed without reconcile: %v", err)
	}
	if _, _, err := afterComplete(status(opregv1.OperationStatus_OPERATION_STATUS_DEAD), unexpectedReport, oddError{}, spec, 1); !errors.As(err, new(*WorkError)) || !errors.As(err, new(oddError)) {
		t.Errorf("unexpected: the work's error, even when DEAD: %v", err)
	}
	if _, _, err := afterComplete(status(opregv1.OperationStatus_OPERATION_STATUS_UNKNOWN), handBackReport("r"), nil, spec, 1); !errors.As(err, new(*ReconcileRequiredError)) {
		t.Errorf("hand back: %v", err)
	}
	withReconcile := testSpec()
	withReconcile.reconcile = func(context.Context, *Lease, string) (Reconciliation, error) { return NotApplied(), nil }
	if again, _, _ := afterComplete(status(opregv1.OperationStatus_OPERATION_STATUS_UNKNOWN), unconfirmedReport, nil, withReconcile, 1); !again {
		t.Error("unconfirmed with reconcile: claim again")
	}
	// The worker's operations are never claimed again.
	worker := testSpec()
	worker.retryTransient = false
	if again, _, err := afterComplete(status(opregv1.OperationStatus_OPERATION_STATUS_RETRY_SCHEDULED), transientReport, transient, worker, 1); again || err != transient {
		t.Errorf("worker transient: %v %v", again, err)
	}
	_, _, err := afterComplete(&opregv1.Operation{Status: opregv1.OperationStatus_OPERATION_STATUS_FAILED, Failure: &opregv1.Failure{Code: "c"}},
		&report{kind: reportBusiness, failure: &opregv1.Failure{Code: "c"}}, nil, spec, 1)
	var business *BusinessFailureError
	if !errors.As(err, &business) || business.Replayed || business.Code != "c" {
		t.Errorf("business: %v", err)
	}
}

func TestTheLease(t *testing.T) {
	sent := time.Now()
	if got := trustedUntil(sent, 30*time.Second); got != sent.Add(27*time.Second) {
		t.Errorf("trusted until %v after the send", got.Sub(sent))
	}
	if got := renewTimeout(sent, sent.Add(300*time.Millisecond), time.Second); got != 300*time.Millisecond {
		t.Errorf("renew timeout %v", got)
	}
	if got := claimLeaseStart(sent, true, 1200*time.Millisecond); got != sent.Add(1200*time.Millisecond) {
		t.Errorf("an answer to the first attempt: the lease began %v after its send", got.Sub(sent))
	}
	if got := claimLeaseStart(sent, false, 1200*time.Millisecond); got != sent {
		t.Errorf("an answer to a retry: the lease began %v after the first send", got.Sub(sent))
	}
}

// Each Claim asks the server to wait for the rest of the deadline, at most
// maxClaimWait, and its timeout grows by that wait; a call that does not wait
// keeps the call timeout, cut to the time left.
func TestServerWait(t *testing.T) {
	spec := testSpec()
	for _, c := range []struct{ remaining, wait, timeout time.Duration }{
		{time.Minute, 30 * time.Second, 31 * time.Second},
		{800 * time.Millisecond, 800 * time.Millisecond, 1800 * time.Millisecond},
		{-time.Millisecond, 0, -time.Millisecond},
	} {
		wait := serverWait(spec.maxClaimWait, c.remaining)
		if timeout := attemptTimeout(spec, c.remaining, wait); wait != c.wait || timeout != c.timeout {
			t.Errorf("%v left: wait %v, timeout %v; want %v, %v", c.remaining, wait, timeout, c.wait, c.timeout)
		}
	}
	if wait := serverWait(0, time.Minute); wait != 0 || attemptTimeout(spec, 300*time.Millisecond, wait) != 300*time.Millisecond {
		t.Errorf("a call that does not wait: wait %v", wait)
	}
}

// retryWait is retryDelay (decisions.json) within a call's time: Claim gives
// up rather than sleep into its deadline, Complete and its Lookup use all of
// their time.
func TestRetryWait(t *testing.T) {
	spec := testSpec()
	if _, retry := retryWait(spec, stale, 0, time.Minute, true, 0.5); retry {
		t.Error("only transient errors are retried")
	}
	if wait, retry := retryWait(spec, unavailable, 0, time.Minute, false, 0.5); !retry || wait != spec.backoffInitial/2 {
		t.Errorf("the first backoff: %v (retry %v)", wait, retry)
	}
	if _, retry := retryWait(spec, unavailable, 20, time.Second, false, 0.5); retry {
		t.Error("Claim gives up when the wait would end past the deadline")
	}
	if wait, retry := retryWait(spec, unavailable, 20, time.Second, true, 0.5); !retry || wait != time.Second {
		t.Errorf("Complete uses all of its time: %v (retry %v)", wait, retry)
	}
	if _, retry := retryWait(spec, unavailable, 0, 0, true, 0.5); retry {
		t.Error("no time left: not even Complete retries")
	}
}
