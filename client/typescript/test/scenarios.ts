// What the two conformance runners share (client/PROTOCOL.md, "Conformance
// scenarios" and "Worker scenarios"): the scenario files of client/testdata,
// the server both run against, the actions of the work and of the reconcile
// callback, the `before` preparation made directly against the server, the
// direct Lookup afterwards, and the proxy's verdict on the calls.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before } from "node:test";

import {
  BusinessError,
  NotFoundError,
  OperationStatus,
  OpregClient,
  Reconciled,
  SentButUnconfirmedError,
  TransientError,
  durationFromMillis,
  type JsonObject,
  type Lease,
  type Operation,
  type Reconcile,
  type RetryPolicyOptions,
  type Work,
} from "../src";
import { UnexpectedWorkError } from "./kinds";
import type { ProxyExit } from "./proxy";
import { REPO_ROOT, startServer, type TestServer } from "./server";

/** Names this client in the scenarios' keys and namespaces. */
export const LANGUAGE = "typescript";
const BEFORE_OWNER = "conformance-before";
/** The `in_progress` preparation holds its lease this long (unless `before_lease_ttl_ms` says): past any scenario. */
const IN_PROGRESS_LEASE_MS = 30_000;
/** How long `hang` waits for its signal before it gives up and returns. */
const HANG_MS = 10_000;
/** How long `slow` work takes. */
const SLOW_MS = 500;

// ---- the scenario files ----

export interface RetryPolicyJson {
  max_attempts: number;
  initial_backoff_ms: number;
  max_backoff_ms: number;
  deadline_ms: number;
}

/** A scenario file of client/testdata: `defaults`, and `scenarios` that override them. */
export function readScenarioFile<Defaults, Scenario>(name: string): { file: string; defaults: Defaults; scenarios: Scenario[] } {
  const file = join(REPO_ROOT, "client", "testdata", name);
  const { defaults, scenarios } = JSON.parse(readFileSync(file, "utf8")) as { defaults: Defaults; scenarios: Scenario[] };
  assert.ok(scenarios.length > 0, `no scenarios in ${file}`);
  return { file, defaults, scenarios };
}

/** A short random hex string that keeps one run's keys (and namespaces) apart from every other run's. */
export function randomHex(): string {
  return randomUUID().slice(0, 8);
}

export function retryPolicyOf(policy: RetryPolicyJson): RetryPolicyOptions {
  return {
    maxAttempts: policy.max_attempts,
    initialBackoffMs: policy.initial_backoff_ms,
    maxBackoffMs: policy.max_backoff_ms,
    deadlineMs: policy.deadline_ms,
  };
}

// ---- the server ----

/** Starts the server before this file's tests and stops it after; `direct` calls it without the proxy. */
export function serverForScenarios(): { server: TestServer; direct: OpregClient } {
  const started = {} as { server: TestServer; direct: OpregClient };
  before(async () => {
    started.server = await startServer();
    started.direct = new OpregClient(started.server.address, { defaultTimeoutMs: 10_000 });
  });
  after(async () => {
    started.direct?.close();
    await started.server?.stop();
  });
  return started;
}

// ---- the actions ----

/** Resolves after `ms`, or as soon as `signal` aborts. */
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

/**
 * The work of a scenario: each execution runs the next of `actions` (the last
 * one repeats). What `fail_unexpected` throws is pushed to `thrown`.
 */
export function workOf(actions: string[], leaseTtlMs: number, thrown: unknown[] = []): Work {
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
      case "slow":
        await sleep(SLOW_MS);
        return "done";
      case "hang":
        await sleep(HANG_MS, signal); // until the lease is reported lost or the work cancelled
        return "done";
      case "hang_ignoring_lease":
        await sleep(2 * leaseTtlMs);
        return "done";
      default:
        throw new Error(`unknown work action ${action}`);
    }
  };
}

/** The reconcile callback of a scenario (none when `verdict` is absent); each remote ref it is given is pushed to `saw`. */
export function reconcileOf(verdict: string | undefined, saw: string[]): Reconcile | undefined {
  if (verdict === undefined) return undefined;
  return async (_lease, remoteRef, signal) => {
    saw.push(remoteRef);
    switch (verdict) {
      case "succeeded":
        return Reconciled.succeeded("reconciled");
      case "failed":
        return Reconciled.failed("reconciled_failed", "reconciled as failed");
      case "not_applied":
        return Reconciled.notApplied();
      case "hang":
        await sleep(HANG_MS, signal); // until the lease is reported lost or the callback cancelled
        return Reconciled.succeeded("reconciled");
      default:
        throw new Error(`unknown reconcile verdict ${verdict}`);
    }
  };
}

// ---- `before`, directly against the server ----

export interface Prepared {
  namespace: string;
  key: string;
  parameters: JsonObject;
  /** The lease of the preparing Claim (`in_progress` holds its own, longer one). */
  leaseTtlMs: number;
  /** The lease `in_progress` holds; default IN_PROGRESS_LEASE_MS. */
  inProgressLeaseTtlMs?: number;
  retryPolicy: RetryPolicyOptions;
}

/**
 * Puts the operation where the scenario's `before` says, as owner
 * `conformance-before`; returns that owner's lease (still held after `in_progress`).
 */
export async function prepare(client: OpregClient, what: string, operation: Prepared): Promise<Lease> {
  const { namespace, key, parameters, retryPolicy } = operation;
  const leaseTtlMs = what === "in_progress" ? (operation.inProgressLeaseTtlMs ?? IN_PROGRESS_LEASE_MS) : operation.leaseTtlMs;
  const claimed = await client.claim({
    namespace,
    operationKey: key,
    parameters,
    owner: BEFORE_OWNER,
    leaseTtl: durationFromMillis(leaseTtlMs),
    retryPolicy: {
      maxAttempts: retryPolicy.maxAttempts,
      initialBackoff: durationFromMillis(retryPolicy.initialBackoffMs),
      maxBackoff: durationFromMillis(retryPolicy.maxBackoffMs),
      deadline: durationFromMillis(retryPolicy.deadlineMs),
    },
  });
  assert.ok(claimed.lease !== undefined, `before: the Claim was not ACQUIRED (${claimed.outcome})`);
  const lease = claimed.lease;
  const complete = { namespace, operationKey: key, fencingToken: lease.fencingToken };
  switch (what) {
    case "success":
      await completeBefore(client, operation, lease);
      return lease;
    case "failure":
      await client.complete({ ...complete, failure: { code: "before_failed", message: "failed before" } });
      return lease;
    case "unknown":
      await client.complete({ ...complete, unknown: { remoteRef: "remote-before", message: "unknown before" } });
      return lease;
    case "retry_due":
      await client.complete({
        ...complete,
        retryable: { errorClass: "BEFORE", message: "retryable before", retryAfter: durationFromMillis(1) },
      });
      return lease;
    case "in_progress":
      return lease;
    default:
      throw new Error(`unknown before ${what}`);
  }
}

/** The `before` owner completes its lease with success, result `before`. */
async function completeBefore(client: OpregClient, operation: Pick<Prepared, "namespace" | "key">, lease: Lease): Promise<void> {
  await client.complete({
    namespace: operation.namespace,
    operationKey: operation.key,
    fencingToken: lease.fencingToken,
    success: { result: Buffer.from("before") },
  });
}

/**
 * `completeBefore` after `ms` (a scenario's `before_complete_after_ms`), in the
 * background: the runner awaits the promise before it judges the scenario, so a
 * failed Complete fails it. Never an unhandled rejection meanwhile.
 */
export function completeBeforeAfter(client: OpregClient, operation: Pick<Prepared, "namespace" | "key">, lease: Lease, ms: number): Promise<void> {
  const completing = sleep(ms).then(() => completeBefore(client, operation, lease));
  completing.catch(() => undefined);
  return completing;
}

// ---- afterwards ----

/** The operation by a direct Lookup; undefined when there is none. */
export async function lookupOperation(client: OpregClient, namespace: string, key: string): Promise<Operation | undefined> {
  try {
    return (await client.lookup({ namespace, operationKey: key })).operation;
  } catch (error) {
    if (error instanceof NotFoundError) return undefined;
    throw error;
  }
}

/** The status as the scenarios name it: `SUCCEEDED`, …, `NOT_FOUND` when there is no operation. */
export function statusName(operation: Operation | undefined): string {
  if (operation === undefined) return "NOT_FOUND";
  return OperationStatus[operation.status].replace(/^OPERATION_STATUS_/, "");
}

/** The proxy's log, indented, for a failure message. */
export function describeLog(log: string[]): string {
  return `proxy log:\n${log.map((l) => `  ${l}`).join("\n") || "  (empty)"}`;
}

/** The calls are the proxy's to judge (PROTOCOL.md, "The fault proxy"): exit code 0 when they matched. */
export function assertCallsMatched(exit: ProxyExit, context: string): void {
  assert.ok(
    exit.code === 0,
    `the proxy's verdict: ${exit.lastLine ?? "(none)"} (${exit.status})` +
      (exit.stderr.trim() === "" ? "" : `\nproxy stderr:\n${exit.stderr.trimEnd()}`) +
      `\n${context}`,
  );
}

/** With `expected` given, the reconcile callback was called, and only ever with that remote ref. */
export function assertReconcileSaw(saw: string[], expected: string | undefined, context: string): void {
  if (expected === undefined) return;
  assert.ok(saw.length > 0, `the reconcile callback was not called; ${context}`);
  assert.deepEqual([...new Set(saw)], [expected], `reconcile_saw; ${context}`);
}
