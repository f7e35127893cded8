package opreg_test

// The run-once conformance scenarios (client/testdata/run_once_scenarios.json,
// format in client/PROTOCOL.md) against the real server through
// opreg-fault-proxy: one subtest per scenario in the file, so a scenario added
// there runs here with no new code.
//
// Per scenario: a fresh key <name>-go-<random> in namespace "conformance";
// the scenario's `before` made directly against the server; a fresh proxy
// with the scenario's faults; RunOnce through the proxy with the scenario's
// settings, work actions and reconcile callback; then the result or error
// kind, the operation's status (a direct Lookup) and the reconcile callback
// compared with `expect`. The calls are judged by the proxy alone: it is given
// `expect.calls` as --expect, and its exit status is the verdict.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	opreg "github.com/opreg/opreg/client/go"
	opregv1 "github.com/opreg/opreg/client/go/gen/opreg/v1"
)

const (
	conformanceNamespace = "conformance"
	beforeOwner          = "conformance-before"
	// No scenario comes near this; a helper that hangs fails instead of blocking the run.
	helperTimeout     = 60 * time.Second
	proxyStartTimeout = 10 * time.Second
	proxyExitTimeout  = 30 * time.Second // a takeover waits up to 15 s for a lease to lapse
	// At most this many scenarios at once (each mostly waits on timers).
	maxParallelScenarios = 4
)

type scenarioFile struct {
	Defaults  scenarioSettings  `json:"defaults"`
	Scenarios []json.RawMessage `json:"scenarios"`
}

type retryPolicySetting struct {
	MaxAttempts      uint32 `json:"max_attempts"`
	InitialBackoffMS int64  `json:"initial_backoff_ms"`
	MaxBackoffMS     int64  `json:"max_backoff_ms"`
	DeadlineMS       int64  `json:"deadline_ms"`
}

type scenarioSettings struct {
	LeaseTTLMS    *int64              `json:"lease_ttl_ms"`
	DeadlineMS    *int64              `json:"deadline_ms"`
	CallTimeoutMS *int64              `json:"call_timeout_ms"`
	RetryPolicy   *retryPolicySetting `json:"retry_policy"`
}

type scenario struct {
	scenarioSettings
	Name      string            `json:"name"`
	Before    string            `json:"before"`
	Work      []string          `json:"work"`
	Reconcile string            `json:"reconcile"`
	Faults    []json.RawMessage `json:"faults"`
	Expect    struct {
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

func (s *scenario) leaseTTL() time.Duration    { return ms(*s.LeaseTTLMS) }
func (s *scenario) deadline() time.Duration    { return ms(*s.DeadlineMS) }
func (s *scenario) callTimeout() time.Duration { return ms(*s.CallTimeoutMS) }

func (s *scenario) retryPolicy() *opregv1.RetryPolicy {
	p := s.RetryPolicy
	return opreg.RetryPolicy(p.MaxAttempts, ms(p.InitialBackoffMS), ms(p.MaxBackoffMS), ms(p.DeadlineMS))
}

func (s *scenario) parameters() map[string]any {
	return map[string]any{"amount": 100, "scenario": s.Name}
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// loadScenarios reads the file; each scenario's missing settings come from the defaults.
func loadScenarios(t *testing.T) []*scenario {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(repoRoot, "client", "testdata", "run_once_scenarios.json"))
	if err != nil {
		t.Fatal(err)
	}
	var file scenarioFile
	if err := json.Unmarshal(text, &file); err != nil {
		t.Fatal(err)
	}
	var scenarios []*scenario
	for _, raw := range file.Scenarios {
		s := &scenario{}
		if err := json.Unmarshal(raw, s); err != nil {
			t.Fatal(err)
		}
		if s.LeaseTTLMS == nil {
			s.LeaseTTLMS = file.Defaults.LeaseTTLMS
		}
		if s.DeadlineMS == nil {
			s.DeadlineMS = file.Defaults.DeadlineMS
		}
		if s.CallTimeoutMS == nil {
			s.CallTimeoutMS = file.Defaults.CallTimeoutMS
		}
		if s.RetryPolicy == nil {
			s.RetryPolicy = file.Defaults.RetryPolicy
		}
		if s.LeaseTTLMS == nil || s.DeadlineMS == nil || s.CallTimeoutMS == nil || s.RetryPolicy == nil {
			t.Fatalf("scenario %s: a setting has neither a value nor a default", s.Name)
		}
		scenarios = append(scenarios, s)
	}
	return scenarios
}

func TestScenarioNamesAreUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range loadScenarios(t) {
		if seen[s.Name] {
			t.Errorf("scenario %q appears twice", s.Name)
		}
		seen[s.Name] = true
	}
	if len(seen) == 0 {
		t.Fatal("no scenarios")
	}
}

func TestConformance(t *testing.T) {
	srv := needServer(t)
	direct := dial(t, srv.address)
	slots := make(chan struct{}, maxParallelScenarios)
	for _, s := range loadScenarios(t) {
		t.Run(s.Name, func(t *testing.T) {
			t.Parallel()
			slots <- struct{}{}
			defer func() { <-slots }()
			runScenario(t, srv, direct, s)
		})
	}
}

// -- the fault proxy -------------------------------------------------------------

type faultProxy struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	address string
	logPath string
	stderr  *strings.Builder
	// The last line of stdout after "listening ...": given --expect, the
	// verdict on the calls. Set before exited is closed.
	lastLine string
	exited   chan struct{}
}

func proxyBinary() string {
	if bin := os.Getenv("OPREG_FAULT_PROXY_BIN"); bin != "" {
		return bin
	}
	return filepath.Join(repoRoot, "target", "debug", "opreg-fault-proxy")
}

// startProxy starts a proxy with the fault rules; expectCalls, when not nil,
// go to it as --expect, and its exit status then says whether the calls it saw
// matched (callsVerdict).
func startProxy(t *testing.T, upstream string, faults []json.RawMessage, expectCalls []string) *faultProxy {
	t.Helper()
	binary := proxyBinary()
	if _, err := os.Stat(binary); err != nil {
		t.Fatalf("no opreg-fault-proxy at %s: build it (cargo build -p opreg-conformance) or set OPREG_FAULT_PROXY_BIN", binary)
	}
	if faults == nil {
		faults = []json.RawMessage{}
	}
	faultText, err := json.Marshal(faults)
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{logPath: filepath.Join(t.TempDir(), "calls.log"), stderr: &strings.Builder{}, exited: make(chan struct{})}
	args := []string{"--upstream", "http://" + upstream, "--faults", string(faultText), "--log", p.logPath}
	if expectCalls != nil {
		expectText, err := json.Marshal(expectCalls)
		if err != nil {
			t.Fatal(err)
		}
		args = append(args, "--expect", string(expectText))
	}
	p.cmd = exec.Command(binary, args...)
	p.cmd.Stderr = &lockedWriter{w: p.stderr}
	setParentDeathSignal(p.cmd)
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	first := make(chan string, 1)
	go func() {
		// All of stdout is read before Wait (which closes the pipe), so the
		// verdict, the last line, is never lost.
		reader := bufio.NewReader(stdout)
		line, err := reader.ReadString('\n')
		first <- strings.TrimSpace(line)
		for err == nil {
			line, err = reader.ReadString('\n')
			if line = strings.TrimSpace(line); line != "" {
				p.lastLine = line
			}
		}
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	select {
	case line := <-first:
		if !strings.HasPrefix(line, "listening ") {
			p.kill()
			t.Fatalf("opreg-fault-proxy did not print 'listening HOST:PORT' (got %q):\n%s", line, p.stderrText())
		}
		p.address = strings.TrimSpace(strings.TrimPrefix(line, "listening "))
	case <-time.After(proxyStartTimeout):
		p.kill()
		t.Fatalf("opreg-fault-proxy printed nothing within %v:\n%s", proxyStartTimeout, p.stderrText())
	}
	return p
}

// finish closes the proxy's stdin; it exits once the calls in flight are
// logged (and, given --expect, judged). The log's text.
func (p *faultProxy) finish() string {
	_ = p.stdin.Close()
	select {
	case <-p.exited:
	case <-time.After(proxyExitTimeout):
		p.kill()
		return p.log() + fmt.Sprintf("\n(the proxy did not exit within %v after its stdin closed: killed)", proxyExitTimeout)
	}
	return p.log()
}

// callsVerdict, once finish has returned: "" if the proxy exited 0 (given
// --expect: the calls matched), else its exit status and its last line (the
// verdict "calls mismatched: expected ..., saw ...").
func (p *faultProxy) callsVerdict() string {
	if state := p.cmd.ProcessState; state != nil && state.Success() {
		return ""
	}
	verdict := p.lastLine
	if verdict == "" {
		verdict = "(it printed no verdict)"
	}
	return fmt.Sprintf("the proxy's verdict on the calls (%v): %s", p.cmd.ProcessState, verdict)
}

func (p *faultProxy) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

func (p *faultProxy) log() string {
	text, _ := os.ReadFile(p.logPath)
	return string(text)
}

func (p *faultProxy) stderrText() string {
	if w, ok := p.cmd.Stderr.(*lockedWriter); ok {
		return w.String()
	}
	return ""
}

type lockedWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.String()
}

// -- the work and the reconcile callback ----------------------------------------------

// unexpectedWorkError is what fail_unexpected returns: an error of no opreg kind.
type unexpectedWorkError struct{}

func (unexpectedWorkError) Error() string { return "a bug in the work" }

type scenarioRun struct {
	mu           sync.Mutex
	executions   int
	reconcileSaw []string
}

func (r *scenarioRun) nextAction(s *scenario) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	action := s.Work[min(r.executions, len(s.Work)-1)] // the last one repeats
	r.executions++
	return action
}

func (r *scenarioRun) work(s *scenario) opreg.Work {
	return func(ctx context.Context, lease *opreg.Lease) ([]byte, error) {
		switch action := r.nextAction(s); action {
		case "succeed":
			return []byte("done"), nil
		case "fail_business":
			return nil, &opreg.BusinessError{Code: "insufficient_funds", Message: "the balance is below the amount"}
		case "fail_transient":
			return nil, &opreg.TransientError{Message: "the downstream service is unavailable"}
		case "fail_unexpected":
			return nil, unexpectedWorkError{}
		case "report_unknown":
			return nil, &opreg.SentButUnconfirmedError{RemoteRef: "remote-1", Message: "timed out after the request was sent"}
		case "hang":
			select { // until the lease is reported lost
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
			}
			return []byte("done"), nil
		case "hang_ignoring_lease":
			time.Sleep(2 * s.leaseTTL())
			return []byte("done"), nil
		default:
			return nil, fmt.Errorf("unknown work action %q", action)
		}
	}
}

func (r *scenarioRun) reconcile(s *scenario) opreg.Reconcile {
	return func(ctx context.Context, lease *opreg.Lease, remoteRef string) (opreg.Reconciliation, error) {
		r.mu.Lock()
		r.reconcileSaw = append(r.reconcileSaw, remoteRef)
		r.mu.Unlock()
		switch s.Reconcile {
		case "succeeded":
			return opreg.Reconciled([]byte("reconciled")), nil
		case "failed":
			return opreg.ReconcileFailed("reconciled_failed", "the remote system refused it"), nil
		case "not_applied":
			return opreg.NotApplied(), nil
		}
		return opreg.Reconciliation{}, fmt.Errorf("unknown reconcile verdict %q", s.Reconcile)
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

// before makes the scenario's `before` directly against the server.
func before(ctx context.Context, t *testing.T, client *opreg.Client, s *scenario, key string) {
	t.Helper()
	if s.Before == "" {
		return
	}
	parameters, err := opreg.Struct(s.parameters())
	if err != nil {
		t.Fatal(err)
	}
	ttl := s.leaseTTL()
	if s.Before == "in_progress" {
		ttl = 30 * time.Second
	}
	claimed, err := retryTransient(ctx, func() (*opregv1.ClaimResponse, error) {
		return client.Claim(ctx, &opregv1.ClaimRequest{
			Namespace:    conformanceNamespace,
			OperationKey: key,
			Owner:        beforeOwner,
			Fingerprint:  &opregv1.ClaimRequest_Parameters{Parameters: parameters},
			LeaseTtl:     durationpb.New(ttl),
			RetryPolicy:  s.retryPolicy(),
		})
	})
	if err != nil {
		t.Fatalf("before: Claim: %v", err)
	}
	if claimed.GetOutcome() != opregv1.ClaimOutcome_CLAIM_OUTCOME_ACQUIRED {
		t.Fatalf("before: Claim answered %s", claimed.GetOutcome())
	}
	req := &opregv1.CompleteRequest{Namespace: conformanceNamespace, OperationKey: key, FencingToken: claimed.GetLease().GetFencingToken()}
	switch s.Before {
	case "in_progress":
		return
	case "success":
		req.Outcome = &opregv1.CompleteRequest_Success{Success: &opregv1.Success{Result: []byte("before")}}
	case "failure":
		req.Outcome = &opregv1.CompleteRequest_Failure{Failure: &opregv1.Failure{Code: "before_failed", Message: "recorded before"}}
	case "unknown":
		req.Outcome = &opregv1.CompleteRequest_Unknown{Unknown: &opregv1.UnknownOutcome{RemoteRef: "remote-before", Message: "recorded before"}}
	default:
		t.Fatalf("unknown before action %q", s.Before)
	}
	if _, err := retryTransient(ctx, func() (*opregv1.CompleteResponse, error) { return client.Complete(ctx, req) }); err != nil {
		t.Fatalf("before: Complete: %v", err)
	}
}

func statusOf(ctx context.Context, client *opreg.Client, key string) string {
	found, err := retryTransient(ctx, func() (*opregv1.LookupResponse, error) {
		return client.Lookup(ctx, &opregv1.LookupRequest{Namespace: conformanceNamespace, OperationKey: key})
	})
	var notFound *opreg.OperationNotFoundError
	if errors.As(err, &notFound) {
		return "NOT_FOUND"
	}
	if err != nil {
		return "Lookup failed: " + err.Error()
	}
	return strings.TrimPrefix(found.GetOperation().GetStatus().String(), "OPERATION_STATUS_")
}

// retryTransient makes the harness's own direct calls (the scenario's before
// and the final Lookup) robust to a loaded machine: transient errors are
// tried again for up to 20 s. The helper under test has its own retries.
func retryTransient[T any](ctx context.Context, call func() (T, error)) (T, error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		value, err := call()
		if err == nil || !opreg.IsTransient(err) || time.Now().After(deadline) {
			return value, err
		}
		select {
		case <-ctx.Done():
			return value, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func runScenario(t *testing.T, srv *testServer, direct *opreg.Client, s *scenario) {
	ctx := testContext(t)
	key := fmt.Sprintf("%s-go-%s", s.Name, randomSuffix())
	before(ctx, t, direct, s, key)
	proxy := startProxy(t, srv.address, s.Faults, s.Expect.Calls)
	started := time.Now()
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
			options = append(options, opreg.WithReconcile(run.reconcile(s)))
		}
		runCtx, cancel := context.WithTimeout(ctx, helperTimeout)
		defer cancel()
		return client.RunOnce(runCtx, conformanceNamespace, key, s.parameters(), run.work(s), options...)
	}()
	log := proxy.finish()
	took := time.Since(started)
	status := statusOf(ctx, direct, key)

	var problems []string
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
	if s.Expect.Calls != nil {
		if verdict := proxy.callsVerdict(); verdict != "" {
			problems = append(problems, verdict)
		}
	}
	if s.Expect.Status != "" && status != s.Expect.Status {
		problems = append(problems, fmt.Sprintf("expected the status %s, the Lookup found %s", s.Expect.Status, status))
	}
	if want := s.Expect.ReconcileSaw; want != nil && (len(run.reconcileSaw) != 1 || run.reconcileSaw[0] != *want) {
		problems = append(problems, fmt.Sprintf("expected the reconcile callback to see %q, it saw %q", *want, run.reconcileSaw))
	}
	if len(problems) > 0 {
		text := fmt.Sprintf("scenario %s (key %s/%s, %v):\n- %s\n\nthe proxy's whole log:\n%s",
			s.Name, conformanceNamespace, key, took.Round(time.Millisecond), strings.Join(problems, "\n- "), orEmpty(log))
		if stderr := strings.TrimSpace(proxy.stderrText()); stderr != "" {
			text += "\n\nthe proxy's stderr:\n" + stderr
		}
		t.Error(text)
	}
}

func orEmpty(text string) string {
	if strings.TrimSpace(text) == "" {
		return "(empty)"
	}
	return strings.TrimRight(text, "\n")
}
