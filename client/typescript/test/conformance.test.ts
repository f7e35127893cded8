// The run-once conformance scenarios (client/testdata/run_once_scenarios.json,
// format in client/PROTOCOL.md) against the real server through
// opreg-fault-proxy: one test per scenario, read from the file, so a scenario
// added there runs here with no new code. The proxy judges the calls it saw
// against `expect.calls` (its `--expect`); the runner reads its exit status.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import {
  BusinessError,
  NotFoundError,
  OperationStatus,
  OpregClient,
  Reconciled,
  SentButUnconfirmedError,
  TransientError,
  durationFromMillis,
  type Lease,
  type Reconcile,
  type RetryPolicyOptions,
  type RunOnceResult,
  type Work,
} from "../src";
import { kindOf, UnexpectedWorkError } from "./kinds";
import { startProxy } from "./proxy";
import { REPO_ROOT, startServer, type TestServer } from "./server";

// ---- the scenario file ----

interface RetryPolicyJson {
  max_attempts: number;
  initial_backoff_ms: number;
  max_backoff_ms: number;
  deadline_ms: number;
}

interface Settings {
  lease_ttl_ms: number;
  deadline_ms: number;
  call_timeout_ms: number;
  retry_policy: RetryPolicyJson;
}

interface Expect {
  result?: { value: string; replayed: boolean };
  error?: string;
  code?: string;
  replayed?: boolean;
  calls: string[];
  status: string;
  reconcile_saw?: string;
}

interface Scenario extends Partial<Settings> {
  name: string;
  before?: string;
  work: string[];
  reconcile?: string;
  faults?: unknown[];
  expect: Expect;
}

const FILE = join(REPO_ROOT, "client", "testdata", "run_once_scenarios.json");
const { defaults, scenarios } = JSON.parse(readFileSync(FILE, "utf8")) as { defaults: Settings; scenarios: Scenario[] };

const NAMESPACE = "conformance";
const BEFORE_OWNER = "conformance-before";

// ---- the actions ----

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
  });

function workOf(actions: string[], leaseTtlMs: number, thrown: unknown[]): Work {
  let execution = 0;
  return async (_lease: Lease, signal: AbortSignal) => {
    const action = actions[Math.min(execution, actions.length - 1)];
    execution++;
    switch (action) {
      case "succeed":
        return "done";
      case "fail_business":
        throw new BusinessError("insufficient_funds", "balance too low");
      case "fail_transient":
        throw new TransientError("downstream unavailable");
      case "fail_unexpected": {
        const error = new UnexpectedWorkError("no opreg kind");
        thrown.push(error);
        throw error;
      }
      case "report_unknown":
        throw new SentButUnconfirmedError("remote-1", "sent, no answer");
      case "hang":
        await sleep(10_000, signal); // until the lease is reported lost
        return "done";
      case "hang_ignoring_lease":
        await sleep(2 * leaseTtlMs);
        return "done";
      default:
        throw new Error(`unknown work action ${action}`);
    }
  };
}

function reconcileOf(verdict: string | undefined, saw: string[]): Reconcile | undefined {
  if (verdict === undefined) return undefined;
  return async (_lease, remoteRef) => {
    saw.push(remoteRef);
    switch (verdict) {
      case "succeeded":
        return Reconciled.succeeded("reconciled");
      case "failed":
        return Reconciled.failed("reconciled_failed", "reconciled as failed");
      case "not_applied":
        return Reconciled.notApplied();
      default:
        throw new Error(`unknown reconcile verdict ${verdict}`);
    }
  };
}

function retryPolicyOf(policy: RetryPolicyJson): RetryPolicyOptions {
  return {
    maxAttempts: policy.max_attempts,
    initialBackoffMs: policy.initial_backoff_ms,
    maxBackoffMs: policy.max_backoff_ms,
    deadlineMs: policy.deadline_ms,
  };
}

// ---- `before`, directly against the server ----

async function prepare(client: OpregClient, what: string, key: string, parameters: Record<string, unknown>, settings: Settings) {
  const retryPolicy = retryPolicyOf(settings.retry_policy);
  const claimed = await client.claim({
    namespace: NAMESPACE,
    operationKey: key,
    parameters,
    owner: BEFORE_OWNER,
    leaseTtl: durationFromMillis(what === "in_progress" ? 30_000 : settings.lease_ttl_ms),
    retryPolicy: {
      maxAttempts: retryPolicy.maxAttempts,
      initialBackoff: durationFromMillis(retryPolicy.initialBackoffMs),
      maxBackoff: durationFromMillis(retryPolicy.maxBackoffMs),
      deadline: durationFromMillis(retryPolicy.deadlineMs),
    },
  });
  assert.ok(claimed.lease !== undefined, `before: the Claim was not ACQUIRED (${claimed.outcome})`);
  const complete = { namespace: NAMESPACE, operationKey: key, fencingToken: claimed.lease.fencingToken };
  switch (what) {
    case "success":
      await client.complete({ ...complete, success: { result: Buffer.from("before") } });
      return;
    case "failure":
      await client.complete({ ...complete, failure: { code: "before_failed", message: "failed before" } });
      return;
    case "unknown":
      await client.complete({ ...complete, unknown: { remoteRef: "remote-before", message: "unknown before" } });
      return;
    case "in_progress":
      return;
    default:
      throw new Error(`unknown before ${what}`);
  }
}

async function statusOf(client: OpregClient, key: string): Promise<string> {
  try {
    const found = await client.lookup({ namespace: NAMESPACE, operationKey: key });
    const status = found.operation?.status ?? OperationStatus.OPERATION_STATUS_UNSPECIFIED;
    return OperationStatus[status].replace(/^OPERATION_STATUS_/, "");
  } catch (error) {
    if (error instanceof NotFoundError) return "NOT_FOUND";
    throw error;
  }
}

// ---- the runner ----

let server: TestServer;
let direct: OpregClient;

before(async () => {
  server = await startServer();
  direct = new OpregClient(server.address, { defaultTimeoutMs: 10_000 });
});

after(async () => {
  direct?.close();
  await server?.stop();
});

describe("run-once conformance", () => {
  assert.ok(scenarios.length > 0, `no scenarios in ${FILE}`);
  for (const scenario of scenarios) {
    test(scenario.name, { timeout: 90_000 }, async () => {
      const settings: Settings = {
        lease_ttl_ms: scenario.lease_ttl_ms ?? defaults.lease_ttl_ms,
        deadline_ms: scenario.deadline_ms ?? defaults.deadline_ms,
        call_timeout_ms: scenario.call_timeout_ms ?? defaults.call_timeout_ms,
        retry_policy: scenario.retry_policy ?? defaults.retry_policy,
      };
      const key = `${scenario.name}-typescript-${randomUUID().slice(0, 8)}`;
      const parameters = { amount: 100, scenario: scenario.name };
      if (scenario.before !== undefined) await prepare(direct, scenario.before, key, parameters, settings);

      const expect = scenario.expect;
      // Required: without it the proxy would give no verdict, and the calls would go unchecked.
      assert.ok(Array.isArray(expect.calls), `scenario ${scenario.name} has no expect.calls`);
      const proxy = await startProxy(server.address, scenario.faults ?? [], expect.calls);
      const client = new OpregClient(proxy.address);
      const thrown: unknown[] = [];
      const saw: string[] = [];
      let result: RunOnceResult | undefined;
      let error: unknown;
      let log: string[];
      const started = Date.now();
      try {
        result = await client.runOnce(NAMESPACE, key, parameters, workOf(scenario.work, settings.lease_ttl_ms, thrown), {
          leaseTtlMs: settings.lease_ttl_ms,
          timeoutMs: settings.deadline_ms,
          callTimeoutMs: settings.call_timeout_ms,
          retryPolicy: retryPolicyOf(settings.retry_policy),
          reconcile: reconcileOf(scenario.reconcile, saw),
        });
      } catch (e) {
        error = e;
      } finally {
        client.close();
        log = await proxy.close();
      }
      const elapsed = Date.now() - started;
      const exit = await proxy.exited;
      const status = await statusOf(direct, key);

      const got =
        result !== undefined
          ? `result ${JSON.stringify({ value: result.text, replayed: result.replayed })}`
          : `error ${kindOf(error)}${error instanceof BusinessError ? ` ${JSON.stringify({ code: error.code, replayed: error.replayed })}` : ""}` +
            (error instanceof Error ? ` (${error.message})` : "");
      const context = `scenario ${scenario.name} (key ${key}, ${elapsed} ms): ${got}\nproxy log:\n${log.map((l) => `  ${l}`).join("\n") || "  (empty)"}`;
      if (process.env.OPREG_CONFORMANCE_VERBOSE === "1") console.log(`${context}\nstatus ${status}`);

      if (expect.result !== undefined) {
        assert.ok(result !== undefined, `expected a result; ${context}`);
        assert.deepEqual({ value: result.text, replayed: result.replayed }, expect.result, context);
      } else {
        assert.ok(expect.error !== undefined, `scenario ${scenario.name} expects neither a result nor an error`);
        assert.equal(result, undefined, `expected error ${expect.error}; ${context}`);
        assert.equal(kindOf(error), expect.error, context);
        if (expect.error === "work_error") assert.ok(thrown.includes(error), `not the work's own error; ${context}`);
        if (expect.code !== undefined) assert.equal((error as BusinessError).code, expect.code, context);
        if (expect.replayed !== undefined) assert.equal((error as BusinessError).replayed, expect.replayed, context);
      }
      // The calls are the proxy's to judge (PROTOCOL.md, "The fault proxy"): exit code 0 when they matched.
      assert.ok(
        exit.code === 0,
        `the proxy's verdict: ${exit.lastLine ?? "(none)"} (${exit.status})` +
          (exit.stderr.trim() === "" ? "" : `\nproxy stderr:\n${exit.stderr.trimEnd()}`) +
          `\n${context}`,
      );
      assert.equal(status, expect.status, `status; ${context}`);
      if (expect.reconcile_saw !== undefined) {
        assert.ok(saw.length > 0, `the reconcile callback was not called; ${context}`);
        assert.deepEqual([...new Set(saw)], [expect.reconcile_saw], `reconcile_saw; ${context}`);
      }
    });
  }
});
