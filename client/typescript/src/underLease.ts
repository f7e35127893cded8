// Running one execution under a lease already granted (by Claim in runOnce, by
// ClaimDue in the worker), with the run-once rules of client/PROTOCOL.md; the
// decisions themselves are in decide.ts.
//
// 1. The step: the work; or for a RECONCILE the reconcile callback first (its
//    verdict succeeded / failed is the outcome, notApplied runs the work under
//    the same lease); or, for a RECONCILE without a callback, nothing (the lease
//    is handed back with Complete(unknown, same remote ref)).
// 2. While the step runs the lease is renewed in the background (LeaseKeeper).
//    A lost lease aborts the signal given to the work, and nothing is reported
//    afterwards: LeaseLostError.
// 3. The outcome is reported with Complete (decideReport): a value is a
//    success; a BusinessError a failure; a TransientError a retryable error; a
//    SentButUnconfirmedError an unknown outcome; anything else a retryable
//    error with errorClass = the error's name.
// 4. Complete gets the rest of the overall deadline and at least
//    COMPLETE_CALL_TIMEOUTS call timeouts from the end of the work, even past
//    the overall deadline (finished work must be reported), and the lease is
//    renewed while it is retried. STALE_FENCING_TOKEN / LEASE_NOT_HELD:
//    LeaseLostError; a definitive refusal is raised; anything else is in doubt:
//    a Lookup decides from the execution record of our token (exactly our
//    outcome: recorded; SUPERSEDED: LeaseLostError; else
//    OutcomeNotRecordedError).
// 5. What follows the recorded report (decideRecorded) is the caller's to do:
//    return, raise, or claim again.
import { hostname } from "node:os";
import { randomUUID } from "node:crypto";

import type { OpregClient } from "./client";
import {
  decideCallInDoubt,
  decideCompleteError,
  decideRecorded,
  decideReport,
  settledOfVerdict,
  type Next,
  type Plan,
  type ReportKind,
  type Settled,
  type Step,
} from "./decide";
import { LeaseLostError, OutcomeNotRecordedError } from "./errors";
import type { Lease, LookupResponse, Operation } from "./gen/opreg/v1/registry";
import { LeaseKeeper } from "./leaseKeeper";
import { withRetries, type RetryContext } from "./retry";
import { abortReason } from "./time";

export { describe } from "./decide";

/** What work may return: the result bytes (a string is UTF-8 encoded), optionally with a reference. */
export type WorkValue =
  | Uint8Array
  | string
  | void
  | undefined
  | { result?: Uint8Array | string; resultRef?: string };

/**
 * The operation's body. `signal` aborts when the lease is lost (reason: a
 * LeaseLostError) or when the caller cancels (runOnce's options.signal, the
 * worker's grace period).
 */
export type Work = (lease: Lease, signal: AbortSignal) => Promise<WorkValue> | WorkValue;

/** What a reconciliation found out about the unknown outcome. */
export type ReconcileOutcome =
  | { kind: "succeeded"; result?: Uint8Array | string; resultRef?: string }
  | { kind: "failed"; code: string; message: string }
  | { kind: "notApplied" };

export const Reconciled = {
  /** The earlier attempt took effect: record it as a success with this result (resultRef defaults to the remote ref). */
  succeeded(result?: Uint8Array | string, resultRef?: string): ReconcileOutcome {
    return { kind: "succeeded", result, resultRef };
  },
  /** The earlier attempt ended in a business failure: record it. */
  failed(code: string, message: string): ReconcileOutcome {
    return { kind: "failed", code, message };
  },
  /** The earlier attempt did not take effect: run the work now, under this lease. */
  notApplied(): ReconcileOutcome {
    return { kind: "notApplied" };
  },
};

/** Asks the remote system what happened to the attempt known by `remoteRef`. */
export type Reconcile = (lease: Lease, remoteRef: string, signal: AbortSignal) => Promise<ReconcileOutcome>;

export const DEFAULT_LEASE_TTL_MS = 30_000;

/** How many call timeouts Complete may use once the work is done, even past the overall deadline. */
export const COMPLETE_CALL_TIMEOUTS = 3;

/** One lease granted to `owner` and how to keep it. */
export interface LeasedExecution {
  client: OpregClient;
  namespace: string;
  operationKey: string;
  owner: string;
  lease: Lease;
  /** performance.now() when the call that granted the lease was sent (no later than the server's lease began). */
  grantedAt: number;
  leaseTtlMs: number;
  renewEveryMs: number;
  /**
   * Call timeout and backoff; `deadlineAt` is the caller's overall deadline
   * (Complete does not use it: it has time of its own), `signal` the caller's
   * cancellation, forwarded to the work but never to Complete.
   */
  ctx: RetryContext;
  /** Names the execution in error messages. */
  what: string;
  /**
   * What the step returns once `ctx.signal` aborted is dropped, not reported:
   * the worker's grace period is over, and its leases lapse (runOnce reports it).
   */
  dropWhenCancelled?: boolean;
}

/** The step ended after a cancellation that drops its outcome (see dropWhenCancelled): nothing was reported. */
export class OutcomeDroppedError extends Error {
  override name = "OutcomeDroppedError";
}

/** What executeUnderLease recorded, and what follows (decideRecorded). */
export interface Executed {
  recorded: ReportKind;
  next: Next;
  /** What the work (or the reconcile callback) threw, when it threw. */
  thrown?: unknown;
}

/** `hostname/pid/random UUID`: an owner no other process or call shares. */
export function defaultOwner(): string {
  return `${hostname()}/${process.pid}/${randomUUID()}`;
}

/** Runs the step under the lease: the reconcile callback (if any), then the work unless the verdict settled it. */
async function settle(
  lease: Lease,
  step: Step,
  reconcile: Reconcile | undefined,
  work: Work,
  signal: AbortSignal,
): Promise<Settled> {
  if (step.kind === "handBack") return step;
  if (step.kind === "reconcile") {
    if (reconcile === undefined) return { kind: "handBack", remoteRef: step.remoteRef };
    let found: ReconcileOutcome;
    try {
      found = await reconcile(lease, step.remoteRef, signal);
    } catch (error) {
      return { kind: "reconcileThrew", error, remoteRef: step.remoteRef };
    }
    const settled = settledOfVerdict(found, step.remoteRef);
    if (settled !== undefined) return settled;
  }
  try {
    return { kind: "value", value: await work(lease, signal), reconciled: false };
  } catch (error) {
    return { kind: "threw", error };
  }
}

/**
 * Runs `step` (and `work`) under `execution.lease`, renewing it, and records the
 * outcome. Resolves with what was recorded and what follows (return, raise, or
 * claim again; `hasReconcile` decides an unconfirmed outcome); rejects when
 * nothing could be recorded: LeaseLostError, OutcomeNotRecordedError, or a
 * definitive refusal of Complete.
 */
export async function executeUnderLease(
  execution: LeasedExecution,
  step: Step,
  work: Work,
  reconcile: Reconcile | undefined,
  hasReconcile: boolean,
): Promise<Executed> {
  const { client, namespace, operationKey, owner, lease, leaseTtlMs } = execution;
  const signal = execution.ctx.signal;
  const controller = new AbortController();
  const forward = () => controller.abort(abortReason(signal as AbortSignal));
  if (signal?.aborted) forward();
  else signal?.addEventListener("abort", forward, { once: true });
  const keeper = new LeaseKeeper(
    client,
    { namespace, operationKey, owner, fencingToken: lease.fencingToken, leaseTtlMs },
    execution.renewEveryMs,
    execution.ctx,
    controller,
    execution.grantedAt,
  );
  keeper.start();

  let plan: Plan;
  let settled: Settled;
  let operation: Operation | undefined;
  try {
    try {
      settled = await settle(lease, step, reconcile, work, controller.signal);
      plan = decideReport(settled);
    } finally {
      signal?.removeEventListener("abort", forward);
    }
    // A lost lease: whatever the work did, nothing is reported under it.
    if (keeper.lost !== undefined) throw new LeaseLostError(lease.fencingToken, keeper.lost);
    // PROTOCOL.md, "Worker scenarios" (stop_past_the_grace_drops_the_work): a
    // stopped worker's grace bounds what it reports, so work still running when
    // it ran out is dropped, as if the worker had exited, and never Completed.
    if (execution.dropWhenCancelled === true && signal?.aborted === true) {
      throw new OutcomeDroppedError(`${execution.what}: cancelled (${String(abortReason(signal))}); nothing was reported`);
    }
    // The lease is still renewed while Complete is retried.
    operation = await record(execution, plan);
  } finally {
    await keeper.stop();
  }
  const next = decideRecorded(plan, operation, hasReconcile);
  const thrown = settled.kind === "threw" || settled.kind === "reconcileThrew" ? { thrown: settled.error } : {};
  return { recorded: plan.kind, next, ...thrown };
}

/**
 * Completes with the lease's token, retrying transport errors, with time of its
 * own even if the overall deadline passed while the work ran (the caller's
 * signal does not cancel it). In doubt, a Lookup says whether the report was
 * recorded. Resolves with the operation as recorded.
 */
async function record(execution: LeasedExecution, plan: Plan): Promise<Operation | undefined> {
  const { client, namespace, operationKey, ctx, what } = execution;
  const token = execution.lease.fencingToken;
  let doubt: unknown;
  try {
    const completed = await withRetries(
      `${what}: Complete`,
      (o) => client.complete({ namespace, operationKey, fencingToken: token, ...plan.report }, o),
      {
        ...ctx,
        signal: undefined,
        deadlineAt: Math.max(ctx.deadlineAt, Date.now() + COMPLETE_CALL_TIMEOUTS * ctx.callTimeoutMs),
        deadlineName: `Complete's own time (the deadline, and at least ${COMPLETE_CALL_TIMEOUTS} call timeouts)`,
      },
    );
    return completed.operation;
  } catch (error) {
    switch (decideCompleteError(error)) {
      case "leaseLost":
        throw new LeaseLostError(token, error);
      case "raise":
        throw error;
      case "inDoubt":
        doubt = error;
    }
  }
  let found: LookupResponse | undefined;
  try {
    found = await withRetries(
      `${what}: Lookup`,
      (o) => client.lookup({ namespace, operationKey, includeExecutions: true }, o),
      { ...ctx, signal: undefined, deadlineAt: Date.now() + COMPLETE_CALL_TIMEOUTS * ctx.callTimeoutMs, deadlineName: "the Lookup's time (Complete's own: three call timeouts)" },
    );
  } catch {
    found = undefined;
  }
  const settled = decideCallInDoubt(plan.kind, token, found);
  switch (settled.kind) {
    case "recorded":
      return settled.operation;
    case "leaseLost":
      throw new LeaseLostError(token, doubt);
    case "notRecorded":
      throw new OutcomeNotRecordedError(token, plan.kind, doubt);
  }
}
