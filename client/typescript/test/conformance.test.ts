// The run-once conformance scenarios (client/testdata/run_once_scenarios.json,
// format in client/PROTOCOL.md) against the real server through
// opreg-fault-proxy: one test per scenario, read from the file, so a scenario
// added there runs here with no new code. The proxy judges the calls it saw
// against `expect.calls` (its `--expect`); the runner reads its exit status.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { BusinessError, OpregClient, type Lease, type RunOnceResult } from "../src";
import { kindOf } from "./kinds";
import { startProxy } from "./proxy";
import {
  LANGUAGE,
  assertCallsMatched,
  assertReconcileSaw,
  completeBeforeAfter,
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
  /** The lease `before: in_progress` holds (default 30 s). */
  before_lease_ttl_ms?: number;
  /** That long after the helper starts, the `before` owner completes its lease with success. */
  before_complete_after_ms?: number;
  work: string[];
  reconcile?: string;
  faults?: unknown[];
  expect: Expect;
}

const { defaults, scenarios } = readScenarioFile<Settings, Scenario>("run_once_scenarios.json");

const NAMESPACE = "conformance";

// ---- the runner ----

const scenarioServer = serverForScenarios();

describe("run-once conformance", () => {
  for (const scenario of scenarios) {
    test(scenario.name, { timeout: 90_000 }, async () => {
      const { server, direct } = scenarioServer;
      const settings: Settings = {
        lease_ttl_ms: scenario.lease_ttl_ms ?? defaults.lease_ttl_ms,
        deadline_ms: scenario.deadline_ms ?? defaults.deadline_ms,
        call_timeout_ms: scenario.call_timeout_ms ?? defaults.call_timeout_ms,
        retry_policy: scenario.retry_policy ?? defaults.retry_policy,
      };
      const key = `${scenario.name}-${LANGUAGE}-${randomHex()}`;
      const parameters = { amount: 100, scenario: scenario.name };
      const retryPolicy = retryPolicyOf(settings.retry_policy);
      let beforeLease: Lease | undefined;
      if (scenario.before !== undefined) {
        beforeLease = await prepare(direct, scenario.before, {
          namespace: NAMESPACE,
          key,
          parameters,
          leaseTtlMs: settings.lease_ttl_ms,
          inProgressLeaseTtlMs: scenario.before_lease_ttl_ms,
          retryPolicy,
        });
      }
      const completeAfterMs = scenario.before_complete_after_ms;
      assert.ok(
        completeAfterMs === undefined || beforeLease !== undefined,
        `scenario ${scenario.name}: before_complete_after_ms without before`,
      );

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
      const completing =
        completeAfterMs === undefined
          ? undefined
          : completeBeforeAfter(direct, { namespace: NAMESPACE, key }, beforeLease as Lease, completeAfterMs);
      try {
        result = await client.runOnce(NAMESPACE, key, parameters, workOf(scenario.work, settings.lease_ttl_ms, thrown), {
          leaseTtlMs: settings.lease_ttl_ms,
          timeoutMs: settings.deadline_ms,
          callTimeoutMs: settings.call_timeout_ms,
          retryPolicy,
          reconcile: reconcileOf(scenario.reconcile, saw),
        });
      } catch (e) {
        error = e;
      } finally {
        client.close();
        log = await proxy.close();
      }
      const elapsed = Date.now() - started;
      // The scenario is judged once the before owner's Complete is in; its failure fails the scenario.
      await completing;
      const exit = await proxy.exited;
      const status = statusName(await lookupOperation(direct, NAMESPACE, key));

      const got =
        result !== undefined
          ? `result ${JSON.stringify({ value: result.text, replayed: result.replayed })}`
          : `error ${kindOf(error)}${error instanceof BusinessError ? ` ${JSON.stringify({ code: error.code, replayed: error.replayed })}` : ""}` +
            (error instanceof Error ? ` (${error.message})` : "");
      const context = `scenario ${scenario.name} (key ${key}, ${elapsed} ms): ${got}\n${describeLog(log)}`;
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
      assertCallsMatched(exit, context);
      assert.equal(status, expect.status, `status; ${context}`);
      assertReconcileSaw(saw, expect.reconcile_saw, context);
    });
  }
});
