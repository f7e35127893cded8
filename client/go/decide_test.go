package opreg

// The pure decisions of decide.go, table by table (client/PROTOCOL.md).

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
	notHeld     = refusal(codes.FailedPrecondition, "LEASE_NOT_HELD")
)

func TestDecideClaim(t *testing.T) {
	spec := testSpec()
	succeeded := &opregv1.Operation{Status: opregv1.OperationStatus_OPERATION_STATUS_SUCCEEDED, Result: []byte("r")}
	failed := &opregv1.Operation{Status: opregv1.OperationStatus_OPERATION_STATUS_FAILED, Failure: &opregv1.Failure{Code: "c"}}
	lease := &opregv1.Lease{FencingToken: 1}

	d := decideClaim(&opregv1.ClaimResponse{Outcome: opregv1.ClaimOutcome_CLAIM_OUTCOME_REPLAYED, Operation: succeeded}, spec, time.Minute, nil)
	if d.step != claimReturn || d.err != nil || !d.result.Replayed || string(d.result.Value) != "r" {
		t.Errorf("REPLAYED SUCCEEDED: %+v", d)
	}
	d = decideClaim(&opregv1.ClaimResponse{Outcome: opregv1.ClaimOutcome_CLAIM_OUTCOME_REPLAYED, Operation: failed}, spec, time.Minute, nil)
	var business *BusinessFailureError
	if !errors.As(d.err, &business) || !business.Replayed || business.Code != "c" {
		t.Errorf("REPLAYED FAILED: %+v", d)
	}
	d = decideClaim(&opregv1.ClaimResponse{Outcome: opregv1.ClaimOutcome_CLAIM_OUTCOME_DEAD}, spec, time.Minute, nil)
	if _, ok := d.err.(*DeadError); !ok {
		t.Errorf("DEAD: %+v", d)
	}
	d = decideClaim(&opregv1.ClaimResponse{Outcome: opregv1.ClaimOutcome_CLAIM_OUTCOME_HELD, RetryAfter: durationpb.New(time.Hour)}, spec, time.Minute, nil)
	if held, ok := d.err.(*HeldError); !ok || held.RetryAfter != time.Hour {
		t.Errorf("HELD is not waited out: %+v", d)
	}
	// IN_PROGRESS polls at least every poll interval, whatever retry_after says.
	d = decideClaim(&opregv1.ClaimResponse{Outcome: opregv1.ClaimOutcome_CLAIM_OUTCOME_IN_PROGRESS, RetryAfter: durationpb.New(30 * time.Second)}, spec, time.Minute, nil)
	if d.step != claimWait || d.wait < spec.pollInterval || d.wait > spec.pollInterval+time.Second/5+5*time.Millisecond {
		t.Errorf("IN_PROGRESS: %+v", d)
	}
	d = decideClaim(&opregv1.ClaimResponse{Outcome: opregv1.ClaimOutcome_CLAIM_OUTCOME_RETRY_LATER, RetryAfter: durationpb.New(50 * time.Millisecond)}, spec, time.Minute, nil)
	if d.step != claimWait || d.wait < 50*time.Millisecond || d.wait > 70*time.Millisecond {
		t.Errorf("RETRY_LATER: %+v", d)
	}
	// A wait that ends past the deadline is the deadline at once.
	cause := errors.New("the last work error")
	d = decideClaim(&opregv1.ClaimResponse{Outcome: opregv1.ClaimOutcome_CLAIM_OUTCOME_RETRY_LATER, RetryAfter: durationpb.New(time.Second)}, spec, 500*time.Millisecond, cause)
	var deadline *DeadlineExceededError
	if !errors.As(d.err, &deadline) || deadline.LastOutcome != opregv1.ClaimOutcome_CLAIM_OUTCOME_RETRY_LATER || !errors.Is(d.err, cause) {
		t.Errorf("RETRY_LATER past the deadline: %+v", d)
	}
	for _, outcome := range []opregv1.ClaimOutcome{opregv1.ClaimOutcome_CLAIM_OUTCOME_ACQUIRED, opregv1.ClaimOutcome_CLAIM_OUTCOME_RECONCILE} {
		if d := decideClaim(&opregv1.ClaimResponse{Outcome: outcome, Lease: lease}, spec, time.Minute, nil); d.step != claimExecute {
			t.Errorf("%v: %+v", outcome, d)
		}
		if d := decideClaim(&opregv1.ClaimResponse{Outcome: outcome}, spec, time.Minute, nil); d.step != claimReturn || d.err == nil {
			t.Errorf("%v without a lease: %+v", outcome, d)
		}
	}
	if d := decideClaim(&opregv1.ClaimResponse{}, spec, time.Minute, nil); d.err == nil {
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

func TestClassifyCompleteError(t *testing.T) {
	cases := map[string]struct {
		err  error
		want completeFailure
	}{
		"STALE_FENCING_TOKEN":   {stale, completeLeaseLost},
		"LEASE_NOT_HELD":        {notHeld, completeLeaseLost},
		"ALREADY_COMPLETED":     {refusal(codes.FailedPrecondition, "ALREADY_COMPLETED"), completeDefinitive},
		"INVALID_ARGUMENT":      {refusal(codes.InvalidArgument, "INVALID_ARGUMENT"), completeDefinitive},
		"OPERATION_NOT_FOUND":   {refusal(codes.NotFound, "OPERATION_NOT_FOUND"), completeDefinitive},
		"PARAMETER_CONFLICT":    {refusal(codes.AlreadyExists, "PARAMETER_CONFLICT"), completeDefinitive},
		"NOTHING_TO_COMPENSATE": {refusal(codes.FailedPrecondition, "NOTHING_TO_COMPENSATE"), completeDefinitive},
		"INTERNAL":              {refusal(codes.Internal, "INTERNAL"), completeInDoubt},
		"PERMISSION_DENIED":     {refusal(codes.PermissionDenied, "PERMISSION_DENIED"), completeInDoubt},
		"time ran out":          {&DeadlineExceededError{Cause: unavailable}, completeInDoubt},
	}
	for name, c := range cases {
		if got := classifyCompleteError(c.err); got != c.want {
			t.Errorf("%s: %v, want %v", name, got, c.want)
		}
	}
}

func TestSettleInDoubt(t *testing.T) {
	success := &report{kind: reportSuccess, success: &opregv1.Success{}}
	op := &opregv1.Operation{Status: opregv1.OperationStatus_OPERATION_STATUS_SUCCEEDED}
	execution := func(token uint64, outcome opregv1.ExecutionOutcome) *opregv1.Execution {
		return &opregv1.Execution{FencingToken: token, Outcome: outcome}
	}
	lookup := func(executions ...*opregv1.Execution) *opregv1.LookupResponse {
		return &opregv1.LookupResponse{Operation: op, Executions: executions}
	}
	got, lost, err := settleInDoubt(lookup(execution(1, opregv1.ExecutionOutcome_EXECUTION_OUTCOME_SUPERSEDED), execution(2, opregv1.ExecutionOutcome_EXECUTION_OUTCOME_SUCCEEDED)), 2, success, unavailable)
	if got != op || lost || err != nil {
		t.Errorf("exactly our report: %v %v %v", got, lost, err)
	}
	for _, ended := range []opregv1.ExecutionOutcome{opregv1.ExecutionOutcome_EXECUTION_OUTCOME_SUPERSEDED, opregv1.ExecutionOutcome_EXECUTION_OUTCOME_REVOKED} {
		if _, lost, _ := settleInDoubt(lookup(execution(2, ended)), 2, success, unavailable); !lost {
			t.Errorf("%v is the lease lost", ended)
		}
	}
	for name, found := range map[string]*opregv1.LookupResponse{
		"RUNNING":         lookup(execution(2, opregv1.ExecutionOutcome_EXECUTION_OUTCOME_RUNNING)),
		"another outcome": lookup(execution(2, opregv1.ExecutionOutcome_EXECUTION_OUTCOME_FAILED)),
		"no execution":    lookup(execution(1, opregv1.ExecutionOutcome_EXECUTION_OUTCOME_SUCCEEDED)),
		"Lookup failed":   nil,
	} {
		_, lost, err := settleInDoubt(found, 2, success, unavailable)
		var unrecorded *OutcomeNotRecordedError
		if lost || !errors.As(err, &unrecorded) || !errors.Is(err, unavailable) {
			t.Errorf("%s: lost %v, %v", name, lost, err)
		}
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
	trusted := sent.Add(time.Second)
	for _, err := range []error{stale, notHeld, refusal(codes.PermissionDenied, "PERMISSION_DENIED"), refusal(codes.NotFound, "OPERATION_NOT_FOUND")} {
		if lost, _ := decideRenewFailure(err, sent, trusted, 0); !lost {
			t.Errorf("Renew refused with %v: the lease is lost", err)
		}
	}
	if lost, wait := decideRenewFailure(unavailable, sent, trusted, 5*time.Second); lost || wait != time.Second {
		t.Errorf("transient: retried, never past the local expiry (%v, %v)", lost, wait)
	}
	if lost, _ := decideRenewFailure(unavailable, trusted, trusted, 0); !lost {
		t.Error("transient at the local expiry: lost")
	}
}

func TestRetryWait(t *testing.T) {
	spec := testSpec()
	if _, retry := retryWait(spec, stale, 0, time.Minute, true); retry {
		t.Error("only transient errors are retried")
	}
	if wait, retry := retryWait(spec, unavailable, 0, time.Minute, false); !retry || wait > spec.backoffInitial {
		t.Errorf("first backoff %v", wait)
	}
	if _, retry := retryWait(spec, unavailable, 20, time.Millisecond, false); retry {
		t.Error("Claim gives up when the wait would pass the deadline")
	}
	if wait, retry := retryWait(spec, unavailable, 20, 10*time.Millisecond, true); !retry || wait > 10*time.Millisecond {
		t.Errorf("Complete uses all of its time (%v, %v)", wait, retry)
	}
	busy, _ := status.New(codes.Unavailable, "busy").WithDetails(
		&errdetails.ErrorInfo{Reason: "OPERATION_BUSY", Domain: ErrorDomain},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(200 * time.Millisecond)})
	if wait := transportWait(FromError(busy.Err()), 0); wait < 200*time.Millisecond || wait > 220*time.Millisecond {
		t.Errorf("RetryInfo stretched by up to a tenth: %v", wait)
	}
	for attempt := 0; attempt < 40; attempt++ {
		if wait := fullJitter(100*time.Millisecond, 5*time.Second, attempt); wait < 0 || wait > 5*time.Second {
			t.Fatalf("full jitter %v at attempt %d", wait, attempt)
		}
	}
}
