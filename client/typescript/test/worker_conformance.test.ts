// The worker conformance scenarios (client/testdata/worker_scenarios.json,
// format in client/PROTOCOL.md, "Worker scenarios") against the real server
// through opreg-fault-proxy: one test per scenario, read from the file. Each
// runs the worker (runWorker) on a namespace of its own until the proxy's log
// holds the scenario's `stop_after` line, stops it by aborting its signal, as a
// user would, and checks the proxy's verdict on the calls, then the operation
// by a direct Lookup and what the handlers and the reconcile callback saw.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { OpregClient, runWorker, type WorkerHandler, type WorkerOptions, type WorkerReconcile } from "../src";
import { capturingLogger, sleep } from "./fixtures";
import { startProxy, type FaultProxy } from "./proxy";
import {
  LANGUAGE,
  assertCallsMatched,
  assertReconcileSaw,
  describeLog,
  lookupOperation,
  prepare,
  randomHex,
  readScenarioFile,
  reconcileOf,
  retryPolicyOf,
  serverForScenarios,
  statusName,
  workOf,
  type RetryPolicyJson,
} from "./scenarios";

// ---- the scenario file ----

interface Settings {
  lease_ttl_ms: number;
  poll_interval_ms: number;
  grace_ms: number;
  call_timeout_ms: number;
  handlers: string[];
  retry_policy: RetryPolicyJson;
}

interface Expect {
  calls: string[];
  status: string;
  last_error_class?: string;
  work_runs: number;
  reconcile_saw?: string;
}

interface Scenario extends Partial<Settings> {
  name: string;
  before: string;
  work: string[];
  reconcile?: string;
  faults?: unknown[];
  stop_after: string;
  expect: Expect;
}

const { defaults, scenarios } = readScenarioFile<Settings, Scenario>("worker_scenarios.json");

/** The handler kind that stands for the worker's default handler. */
const DEFAULT_HANDLER = "*";
/** The `before` Claim's lease: it is completed at once, so its length does not matter. */
const BEFORE_LEASE_MS = 30_000;
const STOP_AFTER_POLL_MS = 20;
const STOP_AFTER_TIMEOUT_MS = 10_000;
/** How long past its grace a stopped worker may take to return (its last Completes, a loaded machine). */
const RETURN_SLACK_MS = 5_000;

function settingsOf(scenario: Scenario): Settings {
  return {
    lease_ttl_ms: scenario.lease_ttl_ms ?? defaults.lease_ttl_ms,
    poll_interval_ms: scenario.poll_interval_ms ?? defaults.poll_interval_ms,
    grace_ms: scenario.grace_ms ?? defaults.grace_ms,
    call_timeout_ms: scenario.call_timeout_ms ?? defaults.call_timeout_ms,
    handlers: scenario.handlers ?? defaults.handlers,
    retry_policy: scenario.retry_policy ?? defaults.retry_policy,
  };
}

// ---- the worker ----

/** What the handlers and the reconcile callback saw. */
interface Observed {
  workRuns: number;
  reconcileSaw: string[];
}

/** A handler for each of the scenario's kinds (`*`: the default handler), all running its work in turn. */
function handlersOf(scenario: Scenario, settings: Settings, observed: Observed): Pick<WorkerOptions, "handlers" | "defaultHandler"> {
  const work = workOf(scenario.work, settings.lease_ttl_ms);
  const handler: WorkerHandler = (_operation, lease, signal) => {
    observed.workRuns++;
    return work(lease, signal);
  };
  const kinds = settings.handlers.filter((kind) => kind !== DEFAULT_HANDLER);
  return {
    handlers: Object.fromEntries(kinds.map((kind) => [kind, handler])),
    defaultHandler: settings.handlers.includes(DEFAULT_HANDLER) ? handler : undefined,
  };
}

function workerReconcileOf(scenario: Scenario, observed: Observed): WorkerReconcile | undefined {
  const reconcile = reconcileOf(scenario.reconcile, observed.reconcileSaw);
  if (reconcile === undefined) return undefined;
  return (operation, lease, signal) => reconcile(lease, operation.remoteRef, signal);
}

/** Reads the proxy's log every 20 ms until it holds `line`; false after 10 s without it, or once the worker ended by itself. */
async function logReaches(proxy: FaultProxy, line: string, worker: Ending): Promise<boolean> {
  const started = Date.now();
  while (!proxy.lines().includes(line)) {
    if (worker.how !== undefined || Date.now() - started > STOP_AFTER_TIMEOUT_MS) return false;
    await sleep(STOP_AFTER_POLL_MS);
  }
  return true;
}

/** How the worker's run() ended, once it did: `returned` or `rejected: …`. */
class Ending {
  /** Undefined while run() is running. */
  how: string | undefined;
  readonly settled: Promise<string>;

  constructor(running: Promise<void>) {
    // Observed from the start: a run() that rejects before the stop is a finding, not an unhandled rejection.
    this.settled = running.then(
      () => "returned",
      (error: unknown) => `rejected: ${error instanceof Error ? `${error.name}: ${error.message}` : String(error)}`,
    );
    void this.settled.then((how) => (this.how = how));
  }

  /** How run() ended within `ms`, else `still running after …`. */
  async within(ms: number): Promise<string> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<string>((resolve) => (timer = setTimeout(() => resolve(`still running after ${ms} ms`), ms)));
    try {
      return await Promise.race([this.settled, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }
}

// ---- the runner ----

const scenarioServer = serverForScenarios();

describe("worker conformance", () => {
  for (const scenario of scenarios) {
    test(scenario.name, { timeout: 60_000 }, async () => {
      const { server, direct } = scenarioServer;
      const settings = settingsOf(scenario);
      const namespace = `conformance-${LANGUAGE}-${randomHex()}`;
      const key = `payout:${scenario.name}-${LANGUAGE}-${randomHex()}`;
      const parameters = { amount: 100, scenario: scenario.name };
      const retryPolicy = retryPolicyOf(settings.retry_policy);
      await prepare(direct, scenario.before, { namespace, key, parameters, leaseTtlMs: BEFORE_LEASE_MS, retryPolicy });

      const expect = scenario.expect;
      // Required: without it the proxy would give no verdict, and the calls would go unchecked.
      assert.ok(Array.isArray(expect.calls), `scenario ${scenario.name} has no expect.calls`);
      const proxy = await startProxy(server.address, scenario.faults ?? [], expect.calls);
      const client = new OpregClient(proxy.address);
      const observed: Observed = { workRuns: 0, reconcileSaw: [] };
      const logger = capturingLogger();
      const stop = new AbortController();
      let reachedStopAfter: boolean;
      let ending: string;
      let stoppedAfterMs: number;
      let log: string[];
      try {
        const worker = new Ending(runWorker(client, {
          namespace,
          ...handlersOf(scenario, settings, observed),
          reconcile: workerReconcileOf(scenario, observed),
          leaseTtlMs: settings.lease_ttl_ms,
          pollIntervalMs: settings.poll_interval_ms,
          graceMs: settings.grace_ms,
          callTimeoutMs: settings.call_timeout_ms,
          logger,
          signal: stop.signal,
        }));
        // Stopped even when the line never came: the scenario then fails, once the worker returned.
        reachedStopAfter = await logReaches(proxy, scenario.stop_after, worker);
        const stoppedAt = Date.now();
        stop.abort();
        ending = await worker.within(settings.grace_ms + RETURN_SLACK_MS);
        stoppedAfterMs = Date.now() - stoppedAt;
      } finally {
        stop.abort(); // so that no worker outlives its scenario
        client.close();
        log = await proxy.close();
      }
      const exit = await proxy.exited;
      const operation = await lookupOperation(direct, namespace, key);
      const status = statusName(operation);

      const workerLog = logger.lines.map((l) => `  ${l.level} ${l.message} ${JSON.stringify(l.fields)}`).join("\n") || "  (nothing)";
      const context =
        `scenario ${scenario.name} (namespace ${namespace}, key ${key}): the worker ${ending} ${stoppedAfterMs} ms after the stop; ` +
        `status ${status}, last_error_class ${JSON.stringify(operation?.lastErrorClass)}, work_runs ${observed.workRuns}, ` +
        `reconcile saw ${JSON.stringify(observed.reconcileSaw)}\nworker log:\n${workerLog}\n${describeLog(log)}`;
      if (process.env.OPREG_CONFORMANCE_VERBOSE === "1") console.log(context);

      assert.ok(reachedStopAfter, `the proxy's log never held ${JSON.stringify(scenario.stop_after)} (waited up to ${STOP_AFTER_TIMEOUT_MS} ms); ${context}`);
      assert.equal(ending, "returned", `the stopped worker; ${context}`);
      assertCallsMatched(exit, context);
      assert.equal(status, expect.status, `status; ${context}`);
      if (expect.last_error_class !== undefined) {
        assert.equal(operation?.lastErrorClass, expect.last_error_class, `last_error_class; ${context}`);
      }
      assert.equal(observed.workRuns, expect.work_runs, `work_runs; ${context}`);
      assertReconcileSaw(observed.reconcileSaw, expect.reconcile_saw, context);
    });
  }
});
