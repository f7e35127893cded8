package opreg

// Every vector of client/testdata/decisions.json (its `about` says the
// format), one subtest per vector named by its name: the decisions of
// client/PROTOCOL.md as every client makes them, tested on decide.go's
// functions with no server. Where this client and a vector disagree, the
// client is wrong.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	opregv1 "github.com/opreg/opreg/client/go/gen/opreg/v1"
)

type decisionVectors struct {
	About    []string `json:"about"`
	Settings struct {
		BackoffInitialMS float64 `json:"backoff_initial_ms"`
		BackoffMaxMS     float64 `json:"backoff_max_ms"`
		PollIntervalMS   float64 `json:"poll_interval_ms"`
		MaxClaimWaitMS   float64 `json:"max_claim_wait_ms"`
	} `json:"settings"`
	TransientError []struct {
		Name   string      `json:"name"`
		Error  errorVector `json:"error"`
		Expect bool        `json:"expect"`
	} `json:"transient_error"`
	RetryDelay []struct {
		Name        string  `json:"name"`
		Attempt     int     `json:"attempt"`
		RetryInfoMS float64 `json:"retry_info_ms"`
		Random      float64 `json:"random"`
		ExpectMS    float64 `json:"expect_ms"`
	} `json:"retry_delay"`
	ClaimAnswer []struct {
		Name   string `json:"name"`
		Answer struct {
			Outcome string `json:"outcome"`
			Status  string `json:"status"`
			Result  string `json:"result"`
			Failure *struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"failure"`
			Lease        bool     `json:"lease"`
			RetryAfterMS *float64 `json:"retry_after_ms"`
			WaitedMS     *float64 `json:"waited_ms"` // absent: a server that does not wait
			RemoteRef    string   `json:"remote_ref"`
		} `json:"answer"`
		RemainingMS *float64 `json:"remaining_ms"`
		Random      float64  `json:"random"`
		Expect      struct {
			Step      string  `json:"step"`
			Reconcile bool    `json:"reconcile"`
			Value     string  `json:"value"`
			Replayed  bool    `json:"replayed"`
			WaitMS    float64 `json:"wait_ms"`
			Error     string  `json:"error"`
			Code      string  `json:"code"`
		} `json:"expect"`
	} `json:"claim_answer"`
	CompleteError []struct {
		Name   string      `json:"name"`
		Error  errorVector `json:"error"`
		Expect string      `json:"expect"`
	} `json:"complete_error"`
	RenewFailure []struct {
		Name          string      `json:"name"`
		Error         errorVector `json:"error"`
		Attempt       int         `json:"attempt"`
		TrustedLeftMS float64     `json:"trusted_left_ms"`
		Random        float64     `json:"random"`
		Expect        struct {
			Lost   bool     `json:"lost"`
			WaitMS *float64 `json:"wait_ms"`
		} `json:"expect"`
	} `json:"renew_failure"`
	CallInDoubt []struct {
		Name     string `json:"name"`
		Reported string `json:"reported"`
		Token    uint64 `json:"token"`
		Lookup   *struct {
			Status     string `json:"status"`
			Executions []struct {
				Token   uint64 `json:"token"`
				Outcome string `json:"outcome"`
			} `json:"executions"`
		} `json:"lookup"`
		Expect string `json:"expect"`
	} `json:"call_in_doubt"`
}

// errorVector is a failed call: its gRPC code (by name), the ErrorInfo reason
// ("": no ErrorInfo, as a transport error has none) and metadata, a RetryInfo
// delay (0: none) and the status message.
type errorVector struct {
	Code         codes.Code        `json:"code"`
	Reason       string            `json:"reason"`
	Metadata     map[string]string `json:"metadata"`
	RetryDelayMS float64           `json:"retry_delay_ms"`
	Message      string            `json:"message"`
}

// err is what a call that failed with the vector's status returns: a real
// gRPC status, decoded by FromError as every failed call is.
func (v errorVector) err(t *testing.T) error {
	t.Helper()
	st := status.New(v.Code, v.Message)
	var err error
	if v.Reason != "" {
		if st, err = st.WithDetails(&errdetails.ErrorInfo{Reason: v.Reason, Domain: ErrorDomain, Metadata: v.Metadata}); err != nil {
			t.Fatal(err)
		}
	}
	if v.RetryDelayMS > 0 {
		if st, err = st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(millis(v.RetryDelayMS))}); err != nil {
			t.Fatal(err)
		}
	}
	return FromError(st.Err())
}

func millis(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

func loadDecisionVectors(t *testing.T) *decisionVectors {
	t.Helper()
	text, err := os.ReadFile(filepath.Join("..", "testdata", "decisions.json"))
	if err != nil {
		t.Fatal(err)
	}
	// A field this test does not read would go untested: refuse it.
	decoder := json.NewDecoder(bytes.NewReader(text))
	decoder.DisallowUnknownFields()
	var vectors decisionVectors
	if err := decoder.Decode(&vectors); err != nil {
		t.Fatalf("decisions.json: %v", err)
	}
	for section, n := range map[string]int{
		"transient_error": len(vectors.TransientError),
		"retry_delay":     len(vectors.RetryDelay),
		"claim_answer":    len(vectors.ClaimAnswer),
		"complete_error":  len(vectors.CompleteError),
		"renew_failure":   len(vectors.RenewFailure),
		"call_in_doubt":   len(vectors.CallInDoubt),
	} {
		if n == 0 {
			t.Fatalf("decisions.json: no %s vectors", section)
		}
	}
	return &vectors
}

// enumValue is the value of a proto enum named without its prefix
// (ACQUIRED for CLAIM_OUTCOME_ACQUIRED).
func enumValue(t *testing.T, values map[string]int32, prefix, name string) int32 {
	t.Helper()
	value, ok := values[prefix+name]
	if !ok {
		t.Fatalf("no %s%s", prefix, name)
	}
	return value
}

// withinAMillisecond: a computed wait matches the vector's within 1 ms.
func withinAMillisecond(got time.Duration, wantMS float64) bool {
	diff := got - millis(wantMS)
	return diff >= -time.Millisecond && diff <= time.Millisecond
}

// raisedKind is the conformance kind (PROTOCOL.md, "Errors and their
// conformance kinds") of an error a Claim answer raises.
func raisedKind(err error) string {
	switch err.(type) {
	case *BusinessFailureError:
		return "business_failure"
	case *DeadError:
		return "dead"
	case *HeldError:
		return "held"
	case *DeadlineExceededError:
		return "deadline_exceeded"
	}
	return fmt.Sprintf("not a conformance kind: %T", err)
}

func TestDecisions(t *testing.T) {
	vectors := loadDecisionVectors(t)
	spec := newRunSpec("decisions", "key", nil)
	spec.backoffInitial = millis(vectors.Settings.BackoffInitialMS)
	spec.backoffMax = millis(vectors.Settings.BackoffMaxMS)
	spec.pollInterval = millis(vectors.Settings.PollIntervalMS)
	spec.maxClaimWait = millis(vectors.Settings.MaxClaimWaitMS)
	if spec.maxClaimWait != DefaultMaxClaimWait {
		t.Errorf("DefaultMaxClaimWait is %v, the protocol's %v", DefaultMaxClaimWait, spec.maxClaimWait)
	}

	t.Run("transient_error", func(t *testing.T) {
		for _, v := range vectors.TransientError {
			t.Run(v.Name, func(t *testing.T) {
				if got := IsTransient(v.Error.err(t)); got != v.Expect {
					t.Errorf("IsTransient = %v, want %v", got, v.Expect)
				}
			})
		}
	})

	t.Run("retry_delay", func(t *testing.T) {
		for _, v := range vectors.RetryDelay {
			t.Run(v.Name, func(t *testing.T) {
				if got := retryDelay(spec, v.Attempt, millis(v.RetryInfoMS), v.Random); !withinAMillisecond(got, v.ExpectMS) {
					t.Errorf("retryDelay = %v, want %v ms", got, v.ExpectMS)
				}
			})
		}
	})

	t.Run("claim_answer", func(t *testing.T) {
		for _, v := range vectors.ClaimAnswer {
			t.Run(v.Name, func(t *testing.T) {
				answer := v.Answer
				op := &opregv1.Operation{
					Status:    opregv1.OperationStatus(enumValue(t, opregv1.OperationStatus_value, "OPERATION_STATUS_", answer.Status)),
					RemoteRef: answer.RemoteRef,
				}
				if answer.Result != "" {
					op.Result = []byte(answer.Result)
				}
				if answer.Failure != nil {
					op.Failure = &opregv1.Failure{Code: answer.Failure.Code, Message: answer.Failure.Message}
				}
				resp := &opregv1.ClaimResponse{
					Outcome:   opregv1.ClaimOutcome(enumValue(t, opregv1.ClaimOutcome_value, "CLAIM_OUTCOME_", answer.Outcome)),
					Operation: op,
				}
				if answer.Lease {
					resp.Lease = &opregv1.Lease{FencingToken: 1}
				}
				if answer.RetryAfterMS != nil {
					resp.RetryAfter = durationpb.New(millis(*answer.RetryAfterMS))
				}
				if answer.WaitedMS != nil {
					resp.Waited = durationpb.New(millis(*answer.WaitedMS))
				}
				remaining := spec.deadline // a first Claim: the whole deadline
				if v.RemainingMS != nil {
					remaining = millis(*v.RemainingMS)
				}
				d := decideClaimAnswer(spec, resp, remaining, v.Random, nil)
				want := v.Expect
				switch want.Step {
				case "execute":
					if d.step != claimExecute || d.reconcile != want.Reconcile {
						t.Errorf("want execute (reconcile %v), got %+v", want.Reconcile, d)
					}
				case "return":
					if d.step != claimReturn || d.err != nil || d.result == nil ||
						string(d.result.Value) != want.Value || d.result.Replayed != want.Replayed {
						t.Errorf("want return %q (replayed %v), got %+v", want.Value, want.Replayed, d)
					}
				case "wait":
					if d.step != claimWait || !withinAMillisecond(d.wait, want.WaitMS) {
						t.Errorf("want wait %v ms, got %+v", want.WaitMS, d)
					}
				case "raise":
					if d.step != claimReturn || d.result != nil || raisedKind(d.err) != want.Error {
						t.Errorf("want raise %s, got %s: %+v", want.Error, raisedKind(d.err), d)
					}
					var business *BusinessFailureError
					if errors.As(d.err, &business) && (business.Code != want.Code || business.Replayed != want.Replayed) {
						t.Errorf("want business failure %s (replayed %v), got %s (replayed %v)", want.Code, want.Replayed, business.Code, business.Replayed)
					}
				default:
					t.Fatalf("unknown step %q", want.Step)
				}
			})
		}
	})

	t.Run("complete_error", func(t *testing.T) {
		decisions := map[string]completeFailure{
			"lease_lost": completeLeaseLost,
			"raise":      completeDefinitive,
			"in_doubt":   completeInDoubt,
		}
		for _, v := range vectors.CompleteError {
			t.Run(v.Name, func(t *testing.T) {
				want, ok := decisions[v.Expect]
				if !ok {
					t.Fatalf("unknown decision %q", v.Expect)
				}
				if got := decideCompleteError(v.Error.err(t)); got != want {
					for name, decision := range decisions {
						if decision == got {
							t.Errorf("decideCompleteError = %s, want %s", name, v.Expect)
						}
					}
				}
			})
		}
	})

	t.Run("renew_failure", func(t *testing.T) {
		for _, v := range vectors.RenewFailure {
			t.Run(v.Name, func(t *testing.T) {
				lost, wait := decideRenewFailure(spec, v.Error.err(t), v.Attempt, millis(v.TrustedLeftMS), v.Random)
				switch {
				case v.Expect.Lost != (v.Expect.WaitMS == nil):
					t.Fatalf("a vector is lost or waits: %+v", v.Expect)
				case lost != v.Expect.Lost:
					t.Errorf("lost = %v (wait %v), want %v", lost, wait, v.Expect.Lost)
				case !lost && !withinAMillisecond(wait, *v.Expect.WaitMS):
					t.Errorf("wait = %v, want %v ms", wait, *v.Expect.WaitMS)
				}
			})
		}
	})

	t.Run("call_in_doubt", func(t *testing.T) {
		reports := map[string]*report{
			"success":   {kind: reportSuccess, success: &opregv1.Success{}},
			"failure":   {kind: reportBusiness, failure: &opregv1.Failure{Code: "c"}},
			"retryable": {kind: reportTransient, retryable: &opregv1.RetryableError{}},
			"unknown":   {kind: reportUnconfirmed, unknown: &opregv1.UnknownOutcome{}},
		}
		for _, v := range vectors.CallInDoubt {
			t.Run(v.Name, func(t *testing.T) {
				rep, ok := reports[v.Reported]
				if !ok {
					t.Fatalf("unknown report %q", v.Reported)
				}
				var found *opregv1.LookupResponse
				if v.Lookup != nil {
					found = &opregv1.LookupResponse{Operation: &opregv1.Operation{
						Status: opregv1.OperationStatus(enumValue(t, opregv1.OperationStatus_value, "OPERATION_STATUS_", v.Lookup.Status)),
					}}
					for _, e := range v.Lookup.Executions {
						found.Executions = append(found.Executions, &opregv1.Execution{
							FencingToken: e.Token,
							Outcome:      opregv1.ExecutionOutcome(enumValue(t, opregv1.ExecutionOutcome_value, "EXECUTION_OUTCOME_", e.Outcome)),
						})
					}
				}
				op, lost, err := decideCallInDoubt(found, v.Token, rep, nil)
				var unrecorded *OutcomeNotRecordedError
				switch v.Expect {
				case "recorded":
					if op == nil || op != found.GetOperation() || lost || err != nil {
						t.Errorf("want recorded (the Lookup's operation), got %v, lost %v, %v", op, lost, err)
					}
				case "lease_lost":
					if op != nil || !lost || err != nil {
						t.Errorf("want lease_lost, got %v, lost %v, %v", op, lost, err)
					}
				case "not_recorded":
					if op != nil || lost || !errors.As(err, &unrecorded) {
						t.Errorf("want not_recorded, got %v, lost %v, %v", op, lost, err)
					}
				default:
					t.Fatalf("unknown decision %q", v.Expect)
				}
			})
		}
	})
}
