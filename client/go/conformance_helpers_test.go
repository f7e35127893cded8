package opreg_test

// What the two conformance runners share (conformance_test.go runs
// client/testdata/run_once_scenarios.json, worker_conformance_test.go
// client/testdata/worker_scenarios.json; the formats are in
// client/PROTOCOL.md): the scenario files, the fault proxy, the work and
// reconcile actions, the `before` preparation, the direct Lookup afterwards,
// and the failure report.

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	opreg "github.com/opreg/opreg/client/go"
	opregv1 "github.com/opreg/opreg/client/go/gen/opreg/v1"
)

const (
	beforeOwner       = "conformance-before"
	proxyStartTimeout = 10 * time.Second
	proxyExitTimeout  = 30 * time.Second // a takeover waits up to 15 s for a lease to lapse
	// At most this many scenarios at once (each mostly waits on timers).
	maxParallelScenarios = 4
	// The in_progress `before`'s lease when the scenario gives no before_lease_ttl_ms.
	defaultInProgressTTL = 30 * time.Second
)

// scenarioSlots bounds the scenarios running at once, over both runners.
var scenarioSlots = make(chan struct{}, maxParallelScenarios)

// parallelScenario makes t a parallel subtest that runs once a slot is free.
func parallelScenario(t *testing.T) {
	t.Parallel()
	scenarioSlots <- struct{}{}
	t.Cleanup(func() { <-scenarioSlots })
}

// loadScenarioFile reads client/testdata/<name>. Each scenario is decoded over
// the file's defaults, so a setting it does not give is the default's. Every
// scenario needs a name of its own: the subtests are named by it.
func loadScenarioFile[T any](t *testing.T, name string) []*T {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(repoRoot, "client", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Defaults  json.RawMessage   `json:"defaults"`
		Scenarios []json.RawMessage `json:"scenarios"`
	}
	if err := json.Unmarshal(text, &file); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(file.Scenarios) == 0 {
		t.Fatalf("%s: no scenarios", name)
	}
	seen := map[string]bool{}
	var scenarios []*T
	for _, raw := range file.Scenarios {
		var named struct {
			Name string `json:"name"`
		}
		s := new(T)
		for _, layer := range []json.RawMessage{file.Defaults, raw} {
			if err := json.Unmarshal(layer, s); err != nil {
				t.Fatalf("%s: %v in %s", name, err, layer)
			}
		}
		if err := json.Unmarshal(raw, &named); err != nil || named.Name == "" || seen[named.Name] {
			t.Fatalf("%s: a scenario has no name or one that appears twice (%q)", name, named.Name)
		}
		seen[named.Name] = true
		scenarios = append(scenarios, s)
	}
	return scenarios
}

type retryPolicySetting struct {
	MaxAttempts      uint32 `json:"max_attempts"`
	InitialBackoffMS int64  `json:"initial_backoff_ms"`
	MaxBackoffMS     int64  `json:"max_backoff_ms"`
	DeadlineMS       int64  `json:"deadline_ms"`
}

func (p *retryPolicySetting) policy() *opregv1.RetryPolicy {
	return opreg.RetryPolicy(p.MaxAttempts, ms(p.InitialBackoffMS), ms(p.MaxBackoffMS), ms(p.DeadlineMS))
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// scenarioParameters are every scenario's operation parameters.
func scenarioParameters(name string) map[string]any {
	return map[string]any{"amount": 100, "scenario": name}
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

// awaitLine reads the log every poll until it holds line; false when it did
// not within the timeout.
func (p *faultProxy) awaitLine(line string, poll, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for !slices.Contains(strings.Split(p.log(), "\n"), line) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(poll)
	}
	return true
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

// hangLimit: hang returns by itself after this long.
const hangLimit = 10 * time.Second

// scenarioRun counts what a scenario's work and reconcile callback saw; the
// worker's may run on its goroutines while the runner reads them.
type scenarioRun struct {
	mu           sync.Mutex
	executions   int
	reconcileSaw []string
}

func (r *scenarioRun) nextAction(actions []string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	action := actions[min(r.executions, len(actions)-1)] // the last one repeats
	r.executions++
	return action
}

// seen is how many times the work began and the remote refs the reconcile callback was given.
func (r *scenarioRun) seen() (executions int, reconcileSaw []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.executions, slices.Clone(r.reconcileSaw)
}

// reconcileProblems: none when want is nil or the reconcile callback was
// called once and given the remote ref want.
func (r *scenarioRun) reconcileProblems(want *string) []string {
	_, saw := r.seen()
	if want == nil || (len(saw) == 1 && saw[0] == *want) {
		return nil
	}
	return []string{fmt.Sprintf("expected the reconcile callback to see %q, it saw %q", *want, saw)}
}

// work runs the actions in turn, one per execution.
func (r *scenarioRun) work(actions []string, leaseTTL time.Duration) opreg.Work {
	return func(ctx context.Context, lease *opreg.Lease) ([]byte, error) {
		switch action := r.nextAction(actions); action {
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
		case "slow":
			time.Sleep(500 * time.Millisecond)
			return []byte("done"), nil
		case "hang":
			awaitCancel(ctx) // the lease is reported lost, or the worker cancels the work
			return []byte("done"), nil
		case "hang_ignoring_lease":
			time.Sleep(2 * leaseTTL)
			return []byte("done"), nil
		default:
			return nil, fmt.Errorf("unknown work action %q", action)
		}
	}
}

// reconcile answers the verdict, after recording the remote ref it was given.
func (r *scenarioRun) reconcile(verdict string) opreg.Reconcile {
	return func(ctx context.Context, lease *opreg.Lease, remoteRef string) (opreg.Reconciliation, error) {
		r.mu.Lock()
		r.reconcileSaw = append(r.reconcileSaw, remoteRef)
		r.mu.Unlock()
		switch verdict {
		case "succeeded":
			return opreg.Reconciled([]byte("reconciled")), nil
		case "failed":
			return opreg.ReconcileFailed("reconciled_failed", "the remote system refused it"), nil
		case "not_applied":
			return opreg.NotApplied(), nil
		case "hang":
			awaitCancel(ctx)
			return opreg.Reconciled([]byte("reconciled")), nil
		}
		return opreg.Reconciliation{}, fmt.Errorf("unknown reconcile verdict %q", verdict)
	}
}

// awaitCancel waits until ctx ends, at most hangLimit.
func awaitCancel(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(hangLimit):
	}
}

// -- before and after -------------------------------------------------------------------

// beforeAction is a scenario's `before`, made directly against the server
// with owner conformance-before.
type beforeAction struct {
	action        string // "" for none
	namespace     string
	key           string
	parameters    map[string]any
	leaseTTL      time.Duration // the lease of a before Claim completed at once
	inProgressTTL time.Duration // in_progress: the lease left held (0: defaultInProgressTTL)
	retryPolicy   *opregv1.RetryPolicy
}

// prepare makes the scenario's `before`: Claim, then (but for in_progress) the
// Complete the action names. The fencing token of the before Claim's lease (0
// for no before).
func prepare(ctx context.Context, t *testing.T, client *opreg.Client, b beforeAction) uint64 {
	t.Helper()
	if b.action == "" {
		return 0
	}
	parameters, err := opreg.Struct(b.parameters)
	if err != nil {
		t.Fatal(err)
	}
	ttl := b.leaseTTL
	if b.action == "in_progress" {
		ttl = cmp.Or(b.inProgressTTL, defaultInProgressTTL)
	}
	claimed, err := retryTransient(ctx, func() (*opregv1.ClaimResponse, error) {
		return client.Claim(ctx, &opregv1.ClaimRequest{
			Namespace:    b.namespace,
			OperationKey: b.key,
			Owner:        beforeOwner,
			Fingerprint:  &opregv1.ClaimRequest_Parameters{Parameters: parameters},
			LeaseTtl:     durationpb.New(ttl),
			RetryPolicy:  b.retryPolicy,
		})
	})
	if err != nil {
		t.Fatalf("before: Claim: %v", err)
	}
	if claimed.GetOutcome() != opregv1.ClaimOutcome_CLAIM_OUTCOME_ACQUIRED {
		t.Fatalf("before: Claim answered %s", claimed.GetOutcome())
	}
	token := claimed.GetLease().GetFencingToken()
	if b.action == "in_progress" {
		return token
	}
	if err := completeBefore(ctx, client, b.namespace, b.key, token, b.action); err != nil {
		t.Fatalf("before: Complete: %v", err)
	}
	return token
}

// completeBefore completes the before owner's lease (token) as the action
// names, directly against the server.
func completeBefore(ctx context.Context, client *opreg.Client, namespace, key string, token uint64, action string) error {
	req := &opregv1.CompleteRequest{Namespace: namespace, OperationKey: key, FencingToken: token}
	switch action {
	case "success":
		req.Outcome = &opregv1.CompleteRequest_Success{Success: &opregv1.Success{Result: []byte("before")}}
	case "failure":
		req.Outcome = &opregv1.CompleteRequest_Failure{Failure: &opregv1.Failure{Code: "before_failed", Message: "recorded before"}}
	case "unknown":
		req.Outcome = &opregv1.CompleteRequest_Unknown{Unknown: &opregv1.UnknownOutcome{RemoteRef: "remote-before", Message: "recorded before"}}
	case "retry_due":
		req.Outcome = &opregv1.CompleteRequest_Retryable{Retryable: &opregv1.RetryableError{
			ErrorClass: "BEFORE", Message: "recorded before", RetryAfter: durationpb.New(time.Millisecond)}}
	default:
		return fmt.Errorf("unknown before action %q", action)
	}
	_, err := retryTransient(ctx, func() (*opregv1.CompleteResponse, error) { return client.Complete(ctx, req) })
	return err
}

// completeBeforeAfter completes the before owner's lease (token) with success,
// directly against the server, after the delay (a scenario's
// before_complete_after_ms), on a goroutine of its own. The function returned
// waits for it to end and returns its error.
func completeBeforeAfter(ctx context.Context, client *opreg.Client, namespace, key string, token uint64, delay time.Duration) (wait func() error) {
	done := make(chan error, 1)
	go func() {
		select {
		case <-time.After(delay):
			done <- completeBefore(ctx, client, namespace, key, token, "success")
		case <-ctx.Done():
			done <- fmt.Errorf("the test ended before the delayed Complete: %w", ctx.Err())
		}
	}()
	return func() error { return <-done }
}

// lookupOperation finds the operation directly; status is its status's name,
// NOT_FOUND when there is none, or why the Lookup failed.
func lookupOperation(ctx context.Context, client *opreg.Client, namespace, key string) (op *opregv1.Operation, status string) {
	found, err := retryTransient(ctx, func() (*opregv1.LookupResponse, error) {
		return client.Lookup(ctx, &opregv1.LookupRequest{Namespace: namespace, OperationKey: key})
	})
	var notFound *opreg.OperationNotFoundError
	if errors.As(err, &notFound) {
		return nil, "NOT_FOUND"
	}
	if err != nil {
		return nil, "Lookup failed: " + err.Error()
	}
	return found.GetOperation(), strings.TrimPrefix(found.GetOperation().GetStatus().String(), "OPERATION_STATUS_")
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

// callsAndStatusProblems checks what every scenario's expect may hold: the
// calls (the proxy's verdict, once it finished) and the status a direct
// Lookup found.
func callsAndStatusProblems(proxy *faultProxy, expectCalls []string, wantStatus, status string) []string {
	var problems []string
	if expectCalls != nil {
		if verdict := proxy.callsVerdict(); verdict != "" {
			problems = append(problems, verdict)
		}
	}
	if wantStatus != "" && status != wantStatus {
		problems = append(problems, fmt.Sprintf("expected the status %s, the Lookup found %s", wantStatus, status))
	}
	return problems
}

// failScenario fails t with the problems found, the proxy's whole log and its stderr.
func failScenario(t *testing.T, name, namespace, key string, took time.Duration, problems []string, proxy *faultProxy, log string) {
	t.Helper()
	text := fmt.Sprintf("scenario %s (key %s/%s, %v):\n- %s\n\nthe proxy's whole log:\n%s",
		name, namespace, key, took.Round(time.Millisecond), strings.Join(problems, "\n- "), orEmpty(log))
	if stderr := strings.TrimSpace(proxy.stderrText()); stderr != "" {
		text += "\n\nthe proxy's stderr:\n" + stderr
	}
	t.Error(text)
}

func orEmpty(text string) string {
	if strings.TrimSpace(text) == "" {
		return "(empty)"
	}
	return strings.TrimRight(text, "\n")
}
