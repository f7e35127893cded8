package opreg_test

// The worker conformance scenarios (client/testdata/worker_scenarios.json,
// format in client/PROTOCOL.md, "Worker scenarios") against the real server
// through opreg-fault-proxy: one subtest per scenario in the file, so a
// scenario added there runs here with no new code.
//
// Per scenario: a namespace conformance-go-<random> of its own and the key
// payout:<name>-go-<random>; the scenario's `before` made directly against
// the server; a fresh proxy with the scenario's faults; a Worker through the
// proxy with the scenario's settings, handlers and reconcile callback, stopped
// (its ctx cancelled) once the proxy's log holds `stop_after`; then the
// proxy's verdict on the calls, the operation (a direct Lookup), how many
// times the work began and what the reconcile callback saw compared with
// `expect`.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	opreg "github.com/opreg/opreg/client/go"
)

const (
	// The proxy's log is read this often for the scenario's stop_after line,
	// for at most stopAfterTimeout.
	stopAfterPoll    = 20 * time.Millisecond
	stopAfterTimeout = 10 * time.Second
	// Once stopped, the worker returns within its grace and this: the 5 s its
	// cancelled work gets to unwind, and a ClaimDue in flight.
	stopSlack = 8 * time.Second
	// The before Claim's lease; its Complete ends it before the worker starts.
	beforeLeaseTTL = 30 * time.Second
)

type workerScenario struct {
	Name           string             `json:"name"`
	LeaseTTLMS     int64              `json:"lease_ttl_ms"`
	PollIntervalMS int64              `json:"poll_interval_ms"`
	GraceMS        int64              `json:"grace_ms"`
	CallTimeoutMS  int64              `json:"call_timeout_ms"`
	Handlers       []string           `json:"handlers"`
	RetryPolicy    retryPolicySetting `json:"retry_policy"`
	Before         string             `json:"before"`
	Work           []string           `json:"work"`
	Reconcile      string             `json:"reconcile"`
	Faults         []json.RawMessage  `json:"faults"`
	StopAfter      string             `json:"stop_after"`
	Expect         struct {
		Calls          []string `json:"calls"`
		Status         string   `json:"status"`
		LastErrorClass *string  `json:"last_error_class"`
		WorkRuns       *int     `json:"work_runs"`
		ReconcileSaw   *string  `json:"reconcile_saw"`
	} `json:"expect"`
}

func (s *workerScenario) leaseTTL() time.Duration { return ms(s.LeaseTTLMS) }
func (s *workerScenario) grace() time.Duration    { return ms(s.GraceMS) }

// loadWorkerScenarios reads the worker scenarios, each over the file's defaults.
func loadWorkerScenarios(t *testing.T) []*workerScenario {
	t.Helper()
	scenarios := loadScenarioFile[workerScenario](t, "worker_scenarios.json")
	for _, s := range scenarios {
		if s.LeaseTTLMS <= 0 || s.PollIntervalMS <= 0 || s.GraceMS <= 0 || s.CallTimeoutMS <= 0 ||
			len(s.Handlers) == 0 || s.StopAfter == "" {
			t.Fatalf("scenario %s: a setting has neither a value nor a default", s.Name)
		}
	}
	return scenarios
}

func TestWorkerConformance(t *testing.T) {
	srv := needServer(t)
	direct := dial(t, srv.address)
	for _, s := range loadWorkerScenarios(t) {
		t.Run(s.Name, func(t *testing.T) {
			parallelScenario(t)
			runWorkerScenario(t, srv, direct, s)
		})
	}
}

func runWorkerScenario(t *testing.T, srv *testServer, direct *opreg.Client, s *workerScenario) {
	ctx := testContext(t)
	namespace := "conformance-go-" + randomSuffix()
	key := fmt.Sprintf("payout:%s-go-%s", s.Name, randomSuffix())
	prepare(ctx, t, direct, beforeAction{
		action: s.Before, namespace: namespace, key: key,
		parameters: scenarioParameters(s.Name), leaseTTL: beforeLeaseTTL, retryPolicy: s.RetryPolicy.policy(),
	})
	proxy := startProxy(t, srv.address, s.Faults, s.Expect.Calls)
	started := time.Now()
	run := &scenarioRun{}
	workerLog := &lockedWriter{w: &strings.Builder{}}
	problems := runWorkerUntilStopAfter(ctx, s, proxy, namespace, run, workerLog)
	log := proxy.finish()
	took := time.Since(started)
	op, status := lookupOperation(ctx, direct, namespace, key)

	problems = append(problems, callsAndStatusProblems(proxy, s.Expect.Calls, s.Expect.Status, status)...)
	if want := s.Expect.LastErrorClass; want != nil && op.GetLastErrorClass() != *want {
		problems = append(problems, fmt.Sprintf("expected the last error class %q, the Lookup found %q", *want, op.GetLastErrorClass()))
	}
	if workRuns, _ := run.seen(); s.Expect.WorkRuns != nil && workRuns != *s.Expect.WorkRuns {
		problems = append(problems, fmt.Sprintf("expected the work to begin %d time(s), it began %d", *s.Expect.WorkRuns, workRuns))
	}
	problems = append(problems, run.reconcileProblems(s.Expect.ReconcileSaw)...)
	if len(problems) > 0 {
		t.Log("the worker's log:\n" + orEmpty(workerLog.String()))
		failScenario(t, s.Name, namespace, key, took, problems, proxy, log)
	}
}

// runWorkerUntilStopAfter runs the scenario's worker through the proxy until
// the proxy's log holds stop_after, then stops it as a user would (cancelling
// Run's ctx) and waits for Run to return; the problems met on the way.
func runWorkerUntilStopAfter(ctx context.Context, s *workerScenario, proxy *faultProxy, namespace string, run *scenarioRun, logTo io.Writer) []string {
	client, err := opreg.Dial(ctx, proxy.address)
	if err != nil {
		return []string{fmt.Sprintf("Dial through the proxy: %v", err)}
	}
	// Closed last: a worker that did not return then fails its calls instead of outliving the test.
	defer client.Close()
	runCtx, stop := context.WithCancel(ctx)
	returned := make(chan error, 1)
	go func() { returned <- s.worker(client, namespace, run, logTo).Run(runCtx) }()

	var problems []string
	if !proxy.awaitLine(s.StopAfter, stopAfterPoll, stopAfterTimeout) {
		problems = append(problems, fmt.Sprintf("the proxy's log did not hold %q within %v", s.StopAfter, stopAfterTimeout))
	}
	stop()
	select {
	case err := <-returned:
		if err != nil {
			problems = append(problems, fmt.Sprintf("the worker returned the error %v", err))
		}
	case <-time.After(s.grace() + stopSlack):
		problems = append(problems, fmt.Sprintf("the worker did not return within %v of its stop", s.grace()+stopSlack))
	}
	return problems
}

// worker is the scenario's Worker: the work for each kind in handlers ("*":
// the default handler), the reconcile callback if the scenario has one, and
// the scenario's settings; it logs to logTo.
func (s *workerScenario) worker(client *opreg.Client, namespace string, run *scenarioRun, logTo io.Writer) *opreg.Worker {
	w := &opreg.Worker{
		Client:       client,
		Namespace:    namespace,
		Handlers:     map[string]opreg.Work{},
		LeaseTTL:     s.leaseTTL(),
		PollInterval: ms(s.PollIntervalMS),
		Grace:        s.grace(),
		CallTimeout:  ms(s.CallTimeoutMS),
		Logger:       slog.New(slog.NewTextHandler(logTo, nil)),
	}
	work := run.work(s.Work, s.leaseTTL())
	for _, kind := range s.Handlers {
		if kind == "*" {
			w.Default = work
		} else {
			w.Handlers[kind] = work
		}
	}
	if s.Reconcile != "" {
		w.Reconcile = run.reconcile(s.Reconcile)
	}
	return w
}
