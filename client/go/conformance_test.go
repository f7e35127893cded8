package opreg_test

// The run-once conformance scenarios (client/testdata/run_once_scenarios.json,
// format in client/PROTOCOL.md) against the real server through
// opreg-fault-proxy: one subtest per scenario in the file, so a scenario added
// there runs here with no new code.
//
// Per scenario: a fresh key <name>-go-<random> in namespace "conformance";
// the scenario's `before` made directly against the server; a fresh proxy
// with the scenario's faults; RunOnce through the proxy with the scenario's
// settings, work actions and reconcile callback (and, given
// before_complete_after_ms, the before owner's Complete on a goroutine, waited
// for once RunOnce returned); then the result or error
// kind, the operation's status (a direct Lookup) and the reconcile callback
// compared with `expect`. The calls are judged by the proxy alone: it is given
// `expect.calls` as --expect, and its exit status is the verdict.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	opreg "github.com/opreg/opreg/client/go"
	opregv1 "github.com/opreg/opreg/client/go/gen/opreg/v1"
)

const (
	conformanceNamespace = "conformance"
	// No scenario comes near this; a helper that hangs fails instead of blocking the run.
	helperTimeout = 60 * time.Second
)

type scenario struct {
	LeaseTTLMS            *int64              `json:"lease_ttl_ms"`
	DeadlineMS            *int64              `json:"deadline_ms"`
	CallTimeoutMS         *int64              `json:"call_timeout_ms"`
	RetryPolicy           *retryPolicySetting `json:"retry_policy"`
	Name                  string              `json:"name"`
	Before                string              `json:"before"`
	BeforeLeaseTTLMS      int64               `json:"before_lease_ttl_ms"`      // 0: defaultInProgressTTL
	BeforeCompleteAfterMS *int64              `json:"before_complete_after_ms"` // nil: the before lease is left held
	Work                  []string            `json:"work"`
	Reconcile             string              `json:"reconcile"`
	Faults                []json.RawMessage   `json:"faults"`
	Expect                struct {
		Result *struct {
			Value    string `json:"value"`
			Replayed bool   `json:"replayed"`
		} `json:"result"`
		Error        string   `json:"error"`
		Code         string   `json:"code"`
		Replayed     bool     `json:"replayed"`
		Calls        []string `json:"calls"`
		Status       string   `json:"status"`
		ReconcileSaw *string  `json:"reconcile_saw"`
	} `json:"expect"`
}

func (s *scenario) leaseTTL() time.Duration           { return ms(*s.LeaseTTLMS) }
func (s *scenario) deadline() time.Duration           { return ms(*s.DeadlineMS) }
func (s *scenario) callTimeout() time.Duration        { return ms(*s.CallTimeoutMS) }
func (s *scenario) retryPolicy() *opregv1.RetryPolicy { return s.RetryPolicy.policy() }

// loadScenarios reads the run-once scenarios, each over the file's defaults.
func loadScenarios(t *testing.T) []*scenario {
	t.Helper()
	scenarios := loadScenarioFile[scenario](t, "run_once_scenarios.json")
	for _, s := range scenarios {
		if s.LeaseTTLMS == nil || s.DeadlineMS == nil || s.CallTimeoutMS == nil || s.RetryPolicy == nil {
			t.Fatalf("scenario %s: a setting has neither a value nor a default", s.Name)
		}
		if s.BeforeCompleteAfterMS != nil && s.Before != "in_progress" {
			t.Fatalf("scenario %s: before_complete_after_ms needs the before in_progress", s.Name)
		}
	}
	return scenarios
}

// Both scenario files load: every scenario has a name of its own (the
// subtests are named by it) and its settings.
func TestScenarioNamesAreUnique(t *testing.T) {
	loadScenarios(t)
	loadWorkerScenarios(t)
}

func TestConformance(t *testing.T) {
	srv := needServer(t)
	direct := dial(t, srv.address)
	for _, s := range loadScenarios(t) {
		t.Run(s.Name, func(t *testing.T) {
			parallelScenario(t)
			runScenario(t, srv, direct, s)
		})
	}
}

// kindOf is the conformance kind of what RunOnce returned (PROTOCOL.md,
// "Errors and their conformance kinds").
func kindOf(err error) string {
	switch e := err.(type) {
	case *opreg.BusinessFailureError:
		return "business_failure"
	case *opreg.DeadError:
		return "dead"
	case *opreg.HeldError:
		return "held"
	case *opreg.LeaseLostError:
		return "lease_lost"
	case *opreg.OutcomeUnknownError:
		return "outcome_unknown"
	case *opreg.ReconcileRequiredError:
		return "reconcile_required"
	case *opreg.DeadlineExceededError:
		return "deadline_exceeded"
	case *opreg.OutcomeNotRecordedError:
		return "outcome_not_recorded"
	case *opreg.WorkError:
		if errors.As(e.Err, new(unexpectedWorkError)) {
			return "work_error"
		}
	}
	return fmt.Sprintf("not a conformance kind: %T", err)
}

// -- one scenario -----------------------------------------------------------------------

func runScenario(t *testing.T, srv *testServer, direct *opreg.Client, s *scenario) {
	ctx := testContext(t)
	key := fmt.Sprintf("%s-go-%s", s.Name, randomSuffix())
	beforeToken := prepare(ctx, t, direct, beforeAction{
		action: s.Before, namespace: conformanceNamespace, key: key,
		parameters: scenarioParameters(s.Name), leaseTTL: s.leaseTTL(), inProgressTTL: ms(s.BeforeLeaseTTLMS),
		retryPolicy: s.retryPolicy(),
	})
	proxy := startProxy(t, srv.address, s.Faults, s.Expect.Calls)
	started := time.Now()
	beforeCompleted := func() error { return nil }
	if s.BeforeCompleteAfterMS != nil {
		beforeCompleted = completeBeforeAfter(ctx, direct, conformanceNamespace, key, beforeToken, ms(*s.BeforeCompleteAfterMS))
	}
	run := &scenarioRun{}
	result, runErr := func() (*opreg.Result, error) {
		client, err := opreg.Dial(ctx, proxy.address)
		if err != nil {
			return nil, err
		}
		defer client.Close()
		options := []opreg.RunOption{
			opreg.WithLeaseTTL(s.leaseTTL()),
			opreg.WithDeadline(s.deadline()),
			opreg.WithCallTimeout(s.callTimeout()),
			opreg.WithRetryPolicy(s.retryPolicy()),
		}
		if s.Reconcile != "" {
			options = append(options, opreg.WithReconcile(run.reconcile(s.Reconcile)))
		}
		runCtx, cancel := context.WithTimeout(ctx, helperTimeout)
		defer cancel()
		return client.RunOnce(runCtx, conformanceNamespace, key, scenarioParameters(s.Name), run.work(s.Work, s.leaseTTL()), options...)
	}()
	// The helper may return before the delayed Complete is made: it ends
	// before the calls and the status are judged.
	var problems []string
	if err := beforeCompleted(); err != nil {
		problems = append(problems, fmt.Sprintf("the before owner's delayed Complete failed: %v", err))
	}
	log := proxy.finish()
	took := time.Since(started)
	_, status := lookupOperation(ctx, direct, conformanceNamespace, key)

	if want := s.Expect.Result; want != nil {
		switch {
		case runErr != nil:
			problems = append(problems, fmt.Sprintf("expected the result %q (replayed %v), got %s: %v", want.Value, want.Replayed, kindOf(runErr), runErr))
		case string(result.Value) != want.Value || result.Replayed != want.Replayed:
			problems = append(problems, fmt.Sprintf("expected the result %q (replayed %v), got %q (replayed %v)", want.Value, want.Replayed, result.Value, result.Replayed))
		}
	} else {
		switch {
		case runErr == nil:
			problems = append(problems, fmt.Sprintf("expected the error %s, got the result %q", s.Expect.Error, result.Value))
		case kindOf(runErr) != s.Expect.Error:
			problems = append(problems, fmt.Sprintf("expected the error %s, got %s: %v", s.Expect.Error, kindOf(runErr), runErr))
		case s.Expect.Error == "business_failure":
			failure := runErr.(*opreg.BusinessFailureError)
			if failure.Code != s.Expect.Code || failure.Replayed != s.Expect.Replayed {
				problems = append(problems, fmt.Sprintf("expected the business failure %s (replayed %v), got %s (replayed %v)",
					s.Expect.Code, s.Expect.Replayed, failure.Code, failure.Replayed))
			}
		}
	}
	problems = append(problems, callsAndStatusProblems(proxy, s.Expect.Calls, s.Expect.Status, status)...)
	problems = append(problems, run.reconcileProblems(s.Expect.ReconcileSaw)...)
	if len(problems) > 0 {
		failScenario(t, s.Name, conformanceNamespace, key, took, problems, proxy, log)
	}
}
