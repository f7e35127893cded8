package opreg_test

// The client's calls, typed errors, RunOnce and the Worker against the real
// server (one per run, see main_test.go).

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/durationpb"

	opreg "github.com/opreg/opreg/client/go"
	opregv1 "github.com/opreg/opreg/client/go/gen/opreg/v1"
)

var params = map[string]any{"amount": 100, "account": "A"}

func namespace() string { return "go-" + randomSuffix() }

func claimRequest(t *testing.T, ns, key, owner string, parameters map[string]any) *opregv1.ClaimRequest {
	t.Helper()
	s, err := opreg.Struct(parameters)
	if err != nil {
		t.Fatal(err)
	}
	return &opregv1.ClaimRequest{Namespace: ns, OperationKey: key, Owner: owner, Fingerprint: &opregv1.ClaimRequest_Parameters{Parameters: s}}
}

func TestClaimRenewFencedWriteCompleteLookup(t *testing.T) {
	client := dial(t, needServer(t).address)
	ctx, ns := testContext(t), namespace()

	claimed, err := client.Claim(ctx, claimRequest(t, ns, "debit:1", "owner-a", params))
	if err != nil {
		t.Fatal(err)
	}
	if claimed.GetOutcome() != opregv1.ClaimOutcome_CLAIM_OUTCOME_ACQUIRED || claimed.GetLease().GetFencingToken() == 0 {
		t.Fatalf("Claim: %v", claimed)
	}
	token := claimed.GetLease().GetFencingToken()
	renewed, err := client.Renew(ctx, &opregv1.RenewRequest{Namespace: ns, OperationKey: "debit:1", Owner: "owner-a", FencingToken: token, LeaseTtl: durationpb.New(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if !renewed.GetLease().GetExpiresAt().AsTime().After(claimed.GetLease().GetExpiresAt().AsTime()) {
		t.Errorf("Renew did not extend the lease: %v", renewed)
	}
	written, err := client.FencedWrite(ctx, &opregv1.FencedWriteRequest{Namespace: ns, Resource: "balance:A", OperationKey: "debit:1", FencingToken: token, Value: []byte("90")})
	if err != nil {
		t.Fatal(err)
	}
	if written.GetFence() != token || written.GetVersion() != 1 {
		t.Errorf("FencedWrite: %v", written)
	}
	resource, err := client.GetResource(ctx, &opregv1.GetResourceRequest{Namespace: ns, Resource: "balance:A"})
	if err != nil {
		t.Fatal(err)
	}
	if string(resource.GetValue()) != "90" || resource.GetOperationKey() != "debit:1" {
		t.Errorf("GetResource: %v", resource)
	}
	completed, err := client.Complete(ctx, &opregv1.CompleteRequest{Namespace: ns, OperationKey: "debit:1", FencingToken: token,
		Outcome: &opregv1.CompleteRequest_Success{Success: &opregv1.Success{Result: []byte("ok")}}})
	if err != nil {
		t.Fatal(err)
	}
	if completed.GetOperation().GetStatus() != opregv1.OperationStatus_OPERATION_STATUS_SUCCEEDED {
		t.Errorf("Complete: %v", completed)
	}
	found, err := client.Lookup(ctx, &opregv1.LookupRequest{Namespace: ns, OperationKey: "debit:1", IncludeExecutions: true, IncludeParameters: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(found.GetExecutions()) != 1 || found.GetExecutions()[0].GetOutcome() != opregv1.ExecutionOutcome_EXECUTION_OUTCOME_SUCCEEDED ||
		found.GetOperation().GetParameters().GetFields()["account"].GetStringValue() != "A" {
		t.Errorf("Lookup: %v", found)
	}
	digest, _ := opreg.ParametersDigest(params)
	if !bytes.Equal(found.GetOperation().GetParametersDigest(), digest) {
		t.Errorf("the server's digest %x is not ours %x", found.GetOperation().GetParametersDigest(), digest)
	}
	again, err := client.Claim(ctx, claimRequest(t, ns, "debit:1", "owner-b", params))
	if err != nil || again.GetOutcome() != opregv1.ClaimOutcome_CLAIM_OUTCOME_REPLAYED || string(again.GetOperation().GetResult()) != "ok" {
		t.Errorf("Claim after success: %v, %v", again, err)
	}
}

func TestTypedErrorsFromTheServer(t *testing.T) {
	client := dial(t, needServer(t).address)
	ctx, ns := testContext(t), namespace()
	if _, err := client.Claim(ctx, claimRequest(t, ns, "k", "a", map[string]any{"amount": 100, "account": "A"})); err != nil {
		t.Fatal(err)
	}
	_, err := client.Claim(ctx, claimRequest(t, ns, "k", "a", map[string]any{"amount": 101, "account": "A"}))
	var conflict *opreg.ParameterConflictError
	if !errors.As(err, &conflict) {
		t.Fatalf("a changed amount: %T %v", err, err)
	}
	stored, _ := opreg.ParametersDigest(map[string]any{"amount": 100, "account": "A"})
	requested, _ := opreg.ParametersDigest(map[string]any{"amount": 101, "account": "A"})
	if !slices.Equal(conflict.DifferingFields(), []string{"amount"}) || !bytes.Equal(conflict.StoredDigest(), stored) || !bytes.Equal(conflict.RequestDigest(), requested) {
		t.Errorf("PARAMETER_CONFLICT metadata: %v %x %x", conflict.DifferingFields(), conflict.StoredDigest(), conflict.RequestDigest())
	}
	if conflict.Reason != opregv1.ErrorReason_ERROR_REASON_PARAMETER_CONFLICT || opreg.IsTransient(err) {
		t.Errorf("reason %v", conflict.Reason)
	}

	_, err = client.Lookup(ctx, &opregv1.LookupRequest{Namespace: ns, OperationKey: "nothing"})
	var notFound *opreg.OperationNotFoundError
	if !errors.As(err, &notFound) || !opreg.IsNotFound(err) {
		t.Errorf("Lookup of nothing: %T %v", err, err)
	}
	_, err = client.Claim(ctx, &opregv1.ClaimRequest{Namespace: ns, OperationKey: "k2"})
	var invalid *opreg.InvalidArgumentError
	if !errors.As(err, &invalid) {
		t.Errorf("a Claim without owner or fingerprint: %T %v", err, err)
	}
}

// A takeover makes the first holder's token stale, for FencedWrite and Complete alike.
func TestStaleFencingToken(t *testing.T) {
	client := dial(t, needServer(t).address)
	ctx, ns := testContext(t), namespace()
	first := claimRequest(t, ns, "k", "first", params)
	first.LeaseTtl = durationpb.New(time.Second)
	claimed, err := client.Claim(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	second, err := client.Claim(ctx, claimRequest(t, ns, "k", "second", params))
	if err != nil || !second.GetLease().GetTakeover() {
		t.Fatalf("takeover: %v %v", second, err)
	}
	if _, err := client.FencedWrite(ctx, &opregv1.FencedWriteRequest{Namespace: ns, Resource: "r", OperationKey: "k", FencingToken: second.GetLease().GetFencingToken(), Value: []byte("2")}); err != nil {
		t.Fatal(err)
	}
	_, err = client.FencedWrite(ctx, &opregv1.FencedWriteRequest{Namespace: ns, Resource: "r", OperationKey: "k", FencingToken: claimed.GetLease().GetFencingToken(), Value: []byte("1")})
	var stale *opreg.StaleFencingTokenError
	if !errors.As(err, &stale) {
		t.Fatalf("a write with the old token: %T %v", err, err)
	}
	if presented, ok := stale.PresentedToken(); ok && presented != claimed.GetLease().GetFencingToken() {
		t.Errorf("presentedToken %d", presented)
	}
	_, err = client.Complete(ctx, &opregv1.CompleteRequest{Namespace: ns, OperationKey: "k", FencingToken: claimed.GetLease().GetFencingToken(),
		Outcome: &opregv1.CompleteRequest_Success{Success: &opregv1.Success{}}})
	if !errors.As(err, &stale) {
		t.Errorf("a Complete with the old token: %T %v", err, err)
	}
}

func TestBatchClaimDecodesEachError(t *testing.T) {
	client := dial(t, needServer(t).address)
	ctx, ns := testContext(t), namespace()
	answer, err := client.BatchClaim(ctx, &opregv1.BatchClaimRequest{Claims: []*opregv1.ClaimRequest{
		claimRequest(t, ns, "b", "o", map[string]any{"n": 1}),
		claimRequest(t, ns, "b", "o", map[string]any{"n": 2}),
	}})
	if err != nil {
		t.Fatal(err)
	}
	results := answer.GetResults()
	if len(results) != 2 || results[0].GetClaim().GetOutcome() != opregv1.ClaimOutcome_CLAIM_OUTCOME_ACQUIRED {
		t.Fatalf("BatchClaim: %v", answer)
	}
	if err := opreg.ErrorFromStatus(results[1].GetError()); !errors.As(err, new(*opreg.ParameterConflictError)) {
		t.Errorf("the second claim: %T %v", err, err)
	}
}

func TestRunOnceRecordsThenReplaysByDigest(t *testing.T) {
	client := dial(t, needServer(t).address)
	ctx, ns := testContext(t), namespace()
	runs := 0
	work := func(ctx context.Context, lease *opreg.Lease) ([]byte, error) {
		runs++
		if _, err := lease.FencedWrite(ctx, "ledger", []byte("entry")); err != nil {
			return nil, err
		}
		lease.SetResultRef("ledger-9")
		return []byte("debited"), nil
	}
	first, err := client.RunOnce(ctx, ns, "debit:order-42", params, work)
	if err != nil {
		t.Fatal(err)
	}
	if first.Replayed || string(first.Value) != "debited" || first.ResultRef != "ledger-9" {
		t.Errorf("first: %+v", first)
	}
	digest, err := opreg.ParametersDigest(params)
	if err != nil {
		t.Fatal(err)
	}
	again, err := client.RunOnce(ctx, ns, "debit:order-42", opreg.Digest(digest), work)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Replayed || string(again.Value) != "debited" || runs != 1 {
		t.Errorf("again: %+v after %d runs", again, runs)
	}
	_, err = client.RunOnce(ctx, ns, "debit:order-42", map[string]any{"amount": 1}, work)
	if !errors.As(err, new(*opreg.ParameterConflictError)) {
		t.Errorf("other parameters: %T %v", err, err)
	}
}

// Cancelling RunOnce's ctx cancels the work's and reports nothing: the lease lapses.
func TestRunOnceCancelled(t *testing.T) {
	client := dial(t, needServer(t).address)
	ctx, ns := testContext(t), namespace()
	runCtx, cancel := context.WithCancel(ctx)
	_, err := client.RunOnce(runCtx, ns, "k", params, func(ctx context.Context, lease *opreg.Lease) ([]byte, error) {
		cancel()
		<-ctx.Done()
		return []byte("too late"), nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %T %v", err, err)
	}
	found, err := client.Lookup(ctx, &opregv1.LookupRequest{Namespace: ns, OperationKey: "k"})
	if err != nil || found.GetOperation().GetStatus() != opregv1.OperationStatus_OPERATION_STATUS_IN_PROGRESS {
		t.Errorf("after the cancellation: %v %v", found, err)
	}
}

func TestHeldByAnOperator(t *testing.T) {
	client := dial(t, needServer(t).address)
	ctx, ns := testContext(t), namespace()
	if _, err := client.Claim(ctx, claimRequest(t, ns, "k", "a", params)); err != nil {
		t.Fatal(err)
	}
	if _, err := client.HoldOperation(ctx, &opregv1.HoldOperationRequest{Namespace: ns, OperationKey: "k", Operator: "ops", Reason: "investigating"}); err != nil {
		t.Fatal(err)
	}
	_, err := client.RunOnce(ctx, ns, "k", params, func(context.Context, *opreg.Lease) ([]byte, error) { return nil, nil })
	if !errors.As(err, new(*opreg.HeldError)) {
		t.Errorf("RunOnce on a held operation: %T %v", err, err)
	}
	listed, err := client.ListOperations(ctx, &opregv1.ListOperationsRequest{Namespace: ns, HeldOnly: true})
	if err != nil || len(listed.GetOperations()) != 1 {
		t.Errorf("ListOperations: %v %v", listed, err)
	}
	_, err = client.RequeueOperation(ctx, &opregv1.RequeueOperationRequest{Namespace: ns, OperationKey: "k", Operator: "ops", Reason: "not dead"})
	var transition *opreg.InvalidTransitionError
	if !errors.As(err, &transition) {
		t.Errorf("requeue of a held IN_PROGRESS operation: %T %v", err, err)
	}
	if _, err := client.ReleaseOperation(ctx, &opregv1.ReleaseOperationRequest{Namespace: ns, OperationKey: "k", Operator: "ops", Reason: "done"}); err != nil {
		t.Error(err)
	}
}

// The worker runs a due retry and reconciles an unknown outcome, each exactly
// once, and returns once its ctx ends.
func TestWorkerRunsDueOperations(t *testing.T) {
	client := dial(t, needServer(t).address)
	ctx, ns := testContext(t), namespace()
	// A retry due 0.1 s from now, and an unknown outcome.
	claimed, err := client.Claim(ctx, claimRequest(t, ns, "debit:1", "seed", params))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Complete(ctx, &opregv1.CompleteRequest{Namespace: ns, OperationKey: "debit:1", FencingToken: claimed.GetLease().GetFencingToken(),
		Outcome: &opregv1.CompleteRequest_Retryable{Retryable: &opregv1.RetryableError{ErrorClass: "Seed", RetryAfter: durationpb.New(100 * time.Millisecond)}}}); err != nil {
		t.Fatal(err)
	}
	claimed, err = client.Claim(ctx, claimRequest(t, ns, "refund:2", "seed", params))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Complete(ctx, &opregv1.CompleteRequest{Namespace: ns, OperationKey: "refund:2", FencingToken: claimed.GetLease().GetFencingToken(),
		Outcome: &opregv1.CompleteRequest_Unknown{Unknown: &opregv1.UnknownOutcome{RemoteRef: "psp-7"}}}); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	finished := map[string]opreg.Finished{}
	var sawRef string
	runCtx, stop := context.WithCancel(ctx)
	worker := &opreg.Worker{
		Client:    client,
		Namespace: ns,
		Handlers: map[string]opreg.Work{
			"debit": func(ctx context.Context, lease *opreg.Lease) ([]byte, error) {
				if lease.Operation().GetParameters().GetFields()["account"].GetStringValue() != "A" {
					return nil, errors.New("no parameters")
				}
				return []byte("debited"), nil
			},
		},
		Reconcile: func(ctx context.Context, lease *opreg.Lease, remoteRef string) (opreg.Reconciliation, error) {
			sawRef = remoteRef
			return opreg.Reconciled([]byte("refunded")), nil
		},
		PollInterval: 50 * time.Millisecond,
		OnFinished: func(f opreg.Finished) {
			mu.Lock()
			defer mu.Unlock()
			finished[f.Operation.GetOperationKey()] = f
			if len(finished) == 2 {
				stop()
			}
		},
	}
	done := make(chan error, 1)
	go func() { done <- worker.Run(runCtx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		stop()
		t.Fatalf("the worker did not run both operations: %v", finished)
	}
	for key, want := range map[string]string{"debit:1": "debited", "refund:2": "refunded"} {
		f := finished[key]
		if f.Err != nil || f.Result == nil || string(f.Result.Value) != want {
			t.Errorf("%s: %+v", key, f)
		}
	}
	if sawRef != "psp-7" {
		t.Errorf("reconcile saw %q", sawRef)
	}
}

// The W3C trace context of the span in the call's ctx travels as traceparent
// (the fault proxy logs it).
func TestTraceparentIsSent(t *testing.T) {
	srv := needServer(t)
	proxy := startProxy(t, srv.address, nil, nil)
	client := dial(t, proxy.address)
	traceID, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	spanID, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(testContext(t), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: traceID, SpanID: spanID, TraceFlags: trace.FlagsSampled,
	}))
	_, err := client.Lookup(ctx, &opregv1.LookupRequest{Namespace: namespace(), OperationKey: "traced"})
	if !opreg.IsNotFound(err) {
		t.Errorf("Lookup: %v", err)
	}
	_, _ = client.Lookup(testContext(t), &opregv1.LookupRequest{Namespace: namespace(), OperationKey: "untraced"})
	log := proxy.finish()
	want := "# Lookup traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if !strings.Contains(log, want) || strings.Count(log, "traceparent=") != 1 {
		t.Errorf("the proxy's log has no %q (or more than one traceparent):\n%s", want, log)
	}
}

// Stopping the worker: in-flight work gets the grace period, then its lease is
// marked lost (its ctx cancelled, ErrWorkerStopped the cause) and nothing is
// recorded. An operation of a kind without a handler is recorded retryable
// (NO_HANDLER).
func TestWorkerStopsAfterTheGracePeriod(t *testing.T) {
	client := dial(t, needServer(t).address)
	ctx, ns := testContext(t), namespace()
	for _, key := range []string{"hang:1", "unknown-kind:2"} {
		claimed, err := client.Claim(ctx, claimRequest(t, ns, key, "seed", params))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := client.Complete(ctx, &opregv1.CompleteRequest{Namespace: ns, OperationKey: key, FencingToken: claimed.GetLease().GetFencingToken(),
			Outcome: &opregv1.CompleteRequest_Retryable{Retryable: &opregv1.RetryableError{ErrorClass: "Seed", RetryAfter: durationpb.New(50 * time.Millisecond)}}}); err != nil {
			t.Fatal(err)
		}
	}
	started := make(chan struct{})
	var mu sync.Mutex
	var finished []opreg.Finished
	var cause error
	runCtx, stop := context.WithCancel(ctx)
	worker := &opreg.Worker{
		Client:    client,
		Namespace: ns,
		Handlers: map[string]opreg.Work{
			"hang": func(ctx context.Context, lease *opreg.Lease) ([]byte, error) {
				close(started)
				<-ctx.Done()
				mu.Lock()
				cause = context.Cause(ctx)
				mu.Unlock()
				return []byte("too late"), nil
			},
		},
		PollInterval: 50 * time.Millisecond,
		Grace:        200 * time.Millisecond,
		OnFinished: func(f opreg.Finished) {
			mu.Lock()
			defer mu.Unlock()
			finished = append(finished, f)
		},
	}
	done := make(chan error, 1)
	go func() { done <- worker.Run(runCtx) }()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler did not start")
	}
	// Let the other operation be recorded, then stop.
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(finished)
		mu.Unlock()
		if n == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !errors.Is(cause, opreg.ErrWorkerStopped) {
		t.Errorf("the hanging work's ctx ended with %v", cause)
	}
	byKey := map[string]opreg.Finished{}
	for _, f := range finished {
		byKey[f.Operation.GetOperationKey()] = f
	}
	var transient *opreg.TransientError
	if f := byKey["unknown-kind:2"]; !errors.As(f.Err, &transient) || transient.Class != opreg.NoHandlerClass || f.Recorded.GetStatus() != opregv1.OperationStatus_OPERATION_STATUS_RETRY_SCHEDULED {
		t.Errorf("no handler: %+v", f)
	}
	if f := byKey["hang:1"]; !errors.As(f.Err, new(*opreg.LeaseLostError)) || f.Recorded != nil {
		t.Errorf("cancelled: %+v", f)
	}
	found, err := client.Lookup(ctx, &opregv1.LookupRequest{Namespace: ns, OperationKey: "hang:1"})
	if err != nil || found.GetOperation().GetStatus() != opregv1.OperationStatus_OPERATION_STATUS_IN_PROGRESS {
		t.Errorf("nothing recorded for the cancelled work: %v %v", found, err)
	}
}
