// Running one execution under a lease already granted (by Claim in runOnce, by
// ClaimDue in the worker), with the run-once rules:
//
// 1. For a RECONCILE, the reconcile callback first; it says succeeded / failed
//    / notApplied (then the work runs under the same lease).
// 2. While the reconcile callback or the work runs, the lease is renewed in the
//    background (LeaseKeeper). A lost lease aborts the signal given to them, and
//    nothing is reported afterwards: LeaseLostError.
// 3. The outcome is reported with Complete: a value is a success; a
//    BusinessError a failure; a TransientError a retryable error; a
//    SentButUnconfirmedError an unknown outcome; anything else a retryable error
//    with errorClass = the error's name, then rethrown.
// 4. Complete gets time of its own (COMPLETE_CALL_TIMEOUTS call timeouts, or the
//    rest of the overall deadline if longer), and the lease is renewed while it
//    is retried. In doubt (anything but a definitive refusal), a Lookup decides
//    from the execution record of our token; if the report is not recorded
//    there, OutcomeNotRecordedError.
import { hostname } from "node:os";
import { randomUUID } from "node:crypto";

import type { OpregClient } from "./client";
import {
  AlreadyCompletedError,
  BusinessError,
  CompensationError,
  InvalidArgumentError,
  LeaseLostError,
  LeaseNotHeldError,
  NotFoundError,
  OutcomeNotRecordedError,
  ParameterConflictError,
  ReconcileRequiredError,
  SentButUnconfirmedError,
  StaleFencingTokenError,
  TransientError,
} from "./errors";
import { ExecutionOutcome, type CompleteRequest, type DeepPartial, type Lease, type Operation } from "./gen/opreg/v1/registry";
import { LeaseKeeper } from "./leaseKeeper";
import { withRetries, type RetryContext } from "./retry";
import { abortReason, durationFromMillis } from "./time";

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
const COMPLETE_CALL_TIMEOUTS = 3;

/** One lease granted to `owner` and how to keep it. */
export interface LeasedExecution {
  client: OpregClient;
  namespace: string;
  operationKey: string;
  owner: string;
  lease: Lease;
  /** performance.now() when the call that granted the lease was sent. */
  grantedAt: number;
  leaseTtlMs: number;
  renewEveryMs: number;
  /**
   * Call timeout and backoff; `deadlineAt` is the caller's overall deadline
   * (Complete may go past it), `signal` the caller's cancellation, forwarded
   * to the work but never to Complete.
   */
  ctx: RetryContext;
  /** Names the execution in error messages. */
  what: string;
}

/** The remote ref of a RECONCILE, and who to ask about it (undefined: ReconcileRequiredError, reported unknown). */
export interface ReconcileStep {
  remoteRef: string;
  reconcile: Reconcile | undefined;
}

/** What executeUnderLease recorded. */
export type Executed =
  | {
      outcome: "success";
      result: Uint8Array;
      resultRef: string;
      /** The result was established by the reconcile callback, not by the work. */
      reconciled: boolean;
      /** The operation as Complete (or the Lookup that confirmed it) returned it. */
      operation: Operation | undefined;
    }
  | {
      outcome: "failure" | "retryable" | "unknown";
      /** What the work (or the reconcile step) threw; the report was made from it. */
      error: unknown;
      operation: Operation | undefined;
    };

/** `hostname/pid/random UUID`: an owner no other process or call shares. */
export function defaultOwner(): string {
  return `${hostname()}/${process.pid}/${randomUUID()}`;
}

type Report = Pick<DeepPartial<CompleteRequest>, "success" | "failure" | "retryable" | "unknown">;

function encode(value: Uint8Array | string | undefined): Uint8Array {
  if (value === undefined) return new Uint8Array();
  return typeof value === "string" ? new TextEncoder().encode(value) : value;
}

export function describe(error: unknown): { name: string; message: string } {
  if (error instanceof Error) return { name: error.name || "Error", message: error.message };
  return { name: typeof error, message: String(error) };
}

function successOf(value: WorkValue): { result: Uint8Array; resultRef: string } {
  const shaped: { result?: Uint8Array | string; resultRef?: string } =
    value instanceof Uint8Array || typeof value === "string" || value === undefined || value === null
      ? { result: value ?? undefined }
      : value;
  return { result: encode(shaped.result), resultRef: shaped.resultRef ?? "" };
}

type FailedOutcome = Exclude<Executed["outcome"], "success">;

/** The Complete report for an error thrown by the work or the reconcile step. */
function reportOf(error: unknown): { outcome: FailedOutcome; report: Report } {
  if (error instanceof BusinessError) {
    return { outcome: "failure", report: { failure: { code: error.code, message: error.message } } };
  }
  if (error instanceof ReconcileRequiredError) {
    const message = "not reconciled: runOnce was given no reconcile option";
    return { outcome: "unknown", report: { unknown: { remoteRef: error.remoteRef, message } } };
  }
  if (error instanceof SentButUnconfirmedError) {
    return { outcome: "unknown", report: { unknown: { remoteRef: error.remoteRef, message: error.message } } };
  }
  const { name, message } = describe(error);
  const transient = error instanceof TransientError ? error : undefined;
  const retryAfter = transient?.retryAfterMs === undefined ? undefined : durationFromMillis(transient.retryAfterMs);
  return { outcome: "retryable", report: { retryable: { errorClass: transient?.errorClass ?? name, message, retryAfter } } };
}

/**
 * Runs the reconcile step (if any) and the work. Returns the success value and
 * whether reconcile established it; throws what is to be reported as a failure.
 */
async function settle(
  lease: Lease,
  step: ReconcileStep | undefined,
  work: Work,
  signal: AbortSignal,
): Promise<{ value: WorkValue; reconciled: boolean }> {
  if (step !== undefined) {
    if (step.reconcile === undefined) throw new ReconcileRequiredError(step.remoteRef);
    let found: ReconcileOutcome;
    try {
      found = await step.reconcile(lease, step.remoteRef, signal);
    } catch (error) {
      // Could not find out: the outcome stays unknown (a retryable report
      // would forget it).
      throw new SentButUnconfirmedError(step.remoteRef, `reconcile failed: ${describe(error).message}`, { cause: error });
    }
    if (found.kind === "succeeded") {
      return { value: { result: found.result, resultRef: found.resultRef ?? step.remoteRef }, reconciled: true };
    }
    if (found.kind === "failed") throw new BusinessError(found.code, found.message, { reconciled: true });
  }
  return { value: await work(lease, signal), reconciled: false };
}

/**
 * Runs `step` and `work` under `execution.lease`, renewing it, and records the
 * outcome. Resolves with what was recorded (the work's error included, for the
 * caller to rethrow or log); rejects when nothing could be recorded:
 * LeaseLostError, OutcomeNotRecordedError, or a definitive refusal of Complete.
 */
export async function executeUnderLease(
  execution: LeasedExecution,
  step: ReconcileStep | undefined,
  work: Work,
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

  let report: Report;
  let recorded: (operation: Operation | undefined) => Executed;
  try {
    const { value, reconciled } = await settle(lease, step, work, controller.signal);
    const success = successOf(value);
    report = { success };
    recorded = (operation) => ({ outcome: "success", ...success, reconciled, operation });
  } catch (error) {
    const failed = reportOf(error);
    report = failed.report;
    recorded = (operation) => ({ outcome: failed.outcome, error, operation });
  } finally {
    signal?.removeEventListener("abort", forward);
  }

  let operation: Operation | undefined;
  try {
    // A lost lease: whatever the work did, nothing is reported under it.
    if (keeper.lost !== undefined) throw new LeaseLostError(lease.fencingToken, keeper.lost);
    // The lease is still renewed while Complete is retried.
    operation = await record(execution, report);
  } finally {
    await keeper.stop();
  }
  return recorded(operation);
}

/**
 * Completes with the lease's token, retrying transport errors, with time of its
 * own even if the overall deadline passed while the work ran (the caller's
 * signal does not cancel it). In doubt, a Lookup says whether the report was
 * recorded.
 */
async function record(execution: LeasedExecution, report: Report): Promise<Operation | undefined> {
  const { client, namespace, operationKey, ctx, what } = execution;
  const token = execution.lease.fencingToken;
  let doubt: unknown;
  try {
    const completed = await withRetries(
      `${what}: Complete`,
      (o) => client.complete({ namespace, operationKey, fencingToken: token, ...report }, o),
      {
        ...ctx,
        signal: undefined,
        deadlineAt: Math.max(ctx.deadlineAt, Date.now() + COMPLETE_CALL_TIMEOUTS * ctx.callTimeoutMs),
      },
    );
    return completed.operation;
  } catch (error) {
    if (error instanceof StaleFencingTokenError || error instanceof LeaseNotHeldError) {
      throw new LeaseLostError(token, error);
    }
    if (
      error instanceof AlreadyCompletedError ||
      error instanceof InvalidArgumentError ||
      error instanceof NotFoundError ||
      error instanceof ParameterConflictError ||
      error instanceof CompensationError
    ) {
      throw error;
    }
    doubt = error;
  }
  const kind = reportKind(report);
  let found;
  try {
    found = await withRetries(
      `${what}: Lookup`,
      (o) => client.lookup({ namespace, operationKey, includeExecutions: true }, o),
      { ...ctx, signal: undefined, deadlineAt: Date.now() + ctx.callTimeoutMs },
    );
  } catch {
    throw new OutcomeNotRecordedError(token, kind, doubt);
  }
  const ours = found.executions.find((e) => e.fencingToken === token);
  if (ours !== undefined && ours.outcome === RECORDED[kind]) return found.operation;
  throw new OutcomeNotRecordedError(token, kind, doubt);
}

const RECORDED: Record<OutcomeNotRecordedError["report"], ExecutionOutcome> = {
  success: ExecutionOutcome.EXECUTION_OUTCOME_SUCCEEDED,
  failure: ExecutionOutcome.EXECUTION_OUTCOME_FAILED,
  retryable: ExecutionOutcome.EXECUTION_OUTCOME_RETRYABLE,
  unknown: ExecutionOutcome.EXECUTION_OUTCOME_UNKNOWN,
};

function reportKind(report: Report): OutcomeNotRecordedError["report"] {
  if (report.success !== undefined) return "success";
  if (report.failure !== undefined) return "failure";
  if (report.unknown !== undefined) return "unknown";
  return "retryable";
}
