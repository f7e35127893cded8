// The run-once decision table of client/PROTOCOL.md as pure functions: what a
// Claim answer means, what the work's result becomes (the report and what
// follows once it is recorded), what a Renew or Complete error means, what a
// Lookup in doubt means, how long each wait is, and when a lease from Claim
// began. No I/O, no clock and no randomness of their own (the time left and the
// jitter's draw are arguments), so that every row is tested without a server:
// against the vectors every client shares (client/testdata/decisions.json,
// test/decisions.test.ts), and what they do not cover in test/decide.test.ts.
// The functions are named after the file's sections (isTransient, retryDelayMs,
// decideClaimAnswer, decideCompleteError, decideRenewFailure,
// decideCallInDoubt). runOnce.ts, underLease.ts, leaseKeeper.ts, retry.ts and
// worker.ts do the calls and follow these answers.
import { status as GrpcStatus } from "@grpc/grpc-js";

import {
  BusinessError,
  DeadlineExceededError,
  ErrorReason,
  InvalidArgumentError,
  NotFoundError,
  OperationDeadError,
  OperationHeldError,
  OpregError,
  OutcomeUnknownError,
  ParameterConflictError,
  ReconcileRequiredError,
  SentButUnconfirmedError,
  StaleFencingTokenError,
  TransientError,
  type KnownErrorReason,
} from "./errors";
import {
  ClaimOutcome,
  ExecutionOutcome,
  OperationStatus,
  type ClaimResponse,
  type CompleteRequest,
  type DeepPartial,
  type DueOperation,
  type Lease,
  type LookupResponse,
  type Operation,
} from "./gen/opreg/v1/registry";
import type { Duration } from "./gen/google/protobuf/duration";
import { durationFromMillis, millisFromDuration } from "./time";
import type { ReconcileOutcome, WorkValue } from "./underLease";

// ---- transient errors ----

/**
 * Retried with backoff inside the deadline; nothing else is: UNAVAILABLE (any
 * reason, or none), DEADLINE_EXCEEDED, a server's CANCELLED "Timeout expired",
 * RESOURCE_EXHAUSTED with reason RATE_LIMITED or TOO_MANY_WAITERS (not
 * MESSAGE_TOO_LARGE). See OpregError.transient.
 */
export function isTransient(error: unknown): error is OpregError {
  return error instanceof OpregError && error.transient;
}

// ---- waits ----

export const DEFAULT_BACKOFF_INITIAL_MS = 100;
export const DEFAULT_BACKOFF_MAX_MS = 5_000;

/** The transport backoff: full jitter over min(maxMs, initialMs * 2^attempt). */
export interface Backoff {
  initialMs: number;
  maxMs: number;
}

const DEFAULT_BACKOFF: Backoff = { initialMs: DEFAULT_BACKOFF_INITIAL_MS, maxMs: DEFAULT_BACKOFF_MAX_MS };

/**
 * The wait before retrying a transient error (`attempt` 0 is the first retry):
 * full jitter over min(max, initial * 2^attempt), but at least the server's
 * RetryInfo delay `retryInfoMs`, stretched by up to a tenth so that callers told
 * the same delay do not come back together. `random` is uniform in [0, 1).
 */
export function retryDelayMs(attempt: number, retryInfoMs: number | undefined, random: number, backoff: Backoff = DEFAULT_BACKOFF): number {
  const jittered = random * Math.min(backoff.maxMs, backoff.initialMs * 2 ** attempt);
  if (retryInfoMs === undefined) return jittered;
  return Math.max(jittered, retryInfoMs + (random * retryInfoMs) / 10);
}

/** The longest a Claim asks the server to hold it (`wait`). */
export const MAX_CLAIM_WAIT_MS = 30_000;

/**
 * The server wait every Claim asks for: the rest of the overall deadline, at
 * most MAX_CLAIM_WAIT_MS. The server answers as soon as the operation moves, so
 * a long wait delays nothing; past the cap, the next Claim waits on.
 */
export function claimWaitMs(remainingMs: number): number {
  return Math.max(0, Math.min(remainingMs, MAX_CLAIM_WAIT_MS));
}

export function deadlineError(what: string, cause?: unknown, deadline = "the overall deadline"): DeadlineExceededError {
  return new DeadlineExceededError({
    message: `${what}: ${deadline} passed`,
    code: GrpcStatus.DEADLINE_EXCEEDED,
    cause,
  });
}

// ---- Claim ----

/** What runs under a lease: the work, the reconcile callback first, or nothing (the lease is handed back). */
export type Step =
  | { kind: "work" }
  | { kind: "reconcile"; remoteRef: string }
  /** RECONCILE without a callback: Complete(unknown, same remote ref), then ReconcileRequiredError. */
  | { kind: "handBack"; remoteRef: string };

export type ClaimDecision =
  | { kind: "execute"; lease: Lease; step: Step }
  /** REPLAYED SUCCEEDED: the stored result, replayed = true. */
  | { kind: "return"; operation: Operation | undefined }
  /** IN_PROGRESS / RETRY_LATER: sleep `waitMs` (0 after a server's wait), then claim again. */
  | { kind: "wait"; waitMs: number }
  /** Throw `error`: a replayed business failure, DEAD, HELD, the deadline, or an answer that makes no sense. */
  | { kind: "raise"; error: Error };

export interface ClaimContext {
  /** runOnce was given a reconcile callback. */
  hasReconcile: boolean;
  /** The time left before the overall deadline. */
  remainingMs: number;
  /**
   * Against a server that does not wait: the longest an IN_PROGRESS answer is
   * waited before claiming again (the holder may finish sooner).
   */
  pollIntervalMs: number;
  /** Uniform in [0, 1): the jitter. */
  random: number;
  /** Names the call in error messages. */
  what: string;
}

/** What a Claim answer means (the Claim table of PROTOCOL.md). */
export function decideClaimAnswer(response: ClaimResponse, ctx: ClaimContext): ClaimDecision {
  const { operation, outcome } = response;
  switch (outcome) {
    case ClaimOutcome.CLAIM_OUTCOME_ACQUIRED:
    case ClaimOutcome.CLAIM_OUTCOME_RECONCILE: {
      if (response.lease === undefined) return { kind: "raise", error: malformed(ctx.what, `${ClaimOutcome[outcome]} without a lease`) };
      if (outcome === ClaimOutcome.CLAIM_OUTCOME_ACQUIRED) return { kind: "execute", lease: response.lease, step: { kind: "work" } };
      const remoteRef = operation?.remoteRef ?? "";
      return {
        kind: "execute",
        lease: response.lease,
        step: ctx.hasReconcile ? { kind: "reconcile", remoteRef } : { kind: "handBack", remoteRef },
      };
    }
    case ClaimOutcome.CLAIM_OUTCOME_REPLAYED:
      if (operation?.status === OperationStatus.OPERATION_STATUS_FAILED) {
        const error = new BusinessError(operation.failure?.code ?? "", operation.failure?.message ?? "", { replayed: true, operation });
        return { kind: "raise", error };
      }
      return { kind: "return", operation };
    case ClaimOutcome.CLAIM_OUTCOME_IN_PROGRESS:
    case ClaimOutcome.CLAIM_OUTCOME_RETRY_LATER: {
      // A server that waits held the call until the operation moved or its wait
      // ended: claim again at once, with a new wait. One that does not (no
      // `waited`) is polled.
      const { waited } = response;
      const waitMs = waited === undefined ? pollWaitMs(outcome, response.retryAfter, ctx) : 0;
      if (waitMs >= ctx.remainingMs) {
        // Sleeping into the deadline only delays the answer.
        const since = waited === undefined ? `next claim due in ${Math.round(waitMs)} ms` : `after the server waited ${millisFromDuration(waited)} ms`;
        return { kind: "raise", error: deadlineError(`${ctx.what}: ${ClaimOutcome[outcome]} ${since}`) };
      }
      return { kind: "wait", waitMs };
    }
    case ClaimOutcome.CLAIM_OUTCOME_DEAD:
      return { kind: "raise", error: new OperationDeadError(operation) };
    case ClaimOutcome.CLAIM_OUTCOME_HELD:
      return { kind: "raise", error: new OperationHeldError(operation, millisFromDuration(response.retryAfter)) };
    case ClaimOutcome.CLAIM_OUTCOME_UNSPECIFIED:
    case ClaimOutcome.UNRECOGNIZED:
      return { kind: "raise", error: malformed(ctx.what, `unexpected claim outcome ${outcome}`) };
    default:
      return unreachable(outcome, (o) => ({ kind: "raise", error: malformed(ctx.what, `unexpected claim outcome ${o}`) }));
  }
}

/**
 * The sleep before claiming again at a server that does not wait: retry_after
 * (none sent: the poll interval; IN_PROGRESS at most the poll interval, as the
 * holder may finish before its lease ends), past the due time, and spread by up
 * to a fifth of it (at most 1 s) so that callers told the same retry_after do
 * not claim together.
 */
function pollWaitMs(outcome: ClaimOutcome, retryAfter: Duration | undefined, ctx: ClaimContext): number {
  const told = retryAfter === undefined ? ctx.pollIntervalMs : millisFromDuration(retryAfter);
  const after = outcome === ClaimOutcome.CLAIM_OUTCOME_IN_PROGRESS ? Math.min(told, ctx.pollIntervalMs) : told;
  return after + 5 + ctx.random * Math.min(after / 5, 1_000);
}

/** When the attempts of one Claim were sent (performance.now() ms); more than one when answers were lost. */
export interface ClaimSends {
  firstAt: number;
  lastAt: number;
  attempts: number;
}

/**
 * The earliest moment the lease a Claim answered with can have begun, on the
 * caller's clock: its local expiry is measured from here (the lease table of
 * PROTOCOL.md). A slow answer shortens the trusted time rather than lengthening it.
 */
export function claimLeaseGrantedAt(sends: ClaimSends, waited: Duration | undefined, leaseTtlMs: number): number {
  // The answer came to the first attempt: the server held it `waited` before it decided.
  if (sends.attempts === 1) return sends.firstAt + millisFromDuration(waited);
  // An answer was lost: a later attempt resumed the lease an earlier one was granted
  // (same token, not extended), maybe after a shorter wait, so `waited` adds nothing.
  // No earlier than the first send, and no earlier than a TTL before the last (an
  // older lease would have lapsed, and the last Claim been granted a new one).
  return Math.max(sends.firstAt, sends.lastAt - leaseTtlMs);
}

export type DueDecision =
  | { kind: "execute"; lease: Lease; operation: Operation; step: Step }
  /** Nothing is done with it: without a reconcile callback, its reconcile lease lapses and it comes back later. */
  | { kind: "leaveAlone"; why: string };

/**
 * What the worker does with an operation ClaimDue handed out. A RECONCILE without
 * a reconcile callback is left alone (not handed back as runOnce does: a worker
 * would be handed it again at once, and again).
 */
export function decideDue(due: DueOperation, hasReconcile: boolean): DueDecision {
  const { lease, operation, outcome } = due;
  if (lease === undefined || operation === undefined) return { kind: "leaveAlone", why: "claim due returned an operation without a lease" };
  if (outcome === ClaimOutcome.CLAIM_OUTCOME_ACQUIRED) return { kind: "execute", lease, operation, step: { kind: "work" } };
  if (outcome === ClaimOutcome.CLAIM_OUTCOME_RECONCILE) {
    if (!hasReconcile) {
      return {
        kind: "leaveAlone",
        why: "unknown outcome left alone: no reconcile callback; it comes back when its reconcile lease expires",
      };
    }
    return { kind: "execute", lease, operation, step: { kind: "reconcile", remoteRef: operation.remoteRef } };
  }
  return { kind: "leaveAlone", why: "claim due returned an unexpected outcome; left alone" };
}

// ---- the work's result ----

/** What Complete reports. */
export type ReportKind = "success" | "failure" | "retryable" | "unknown";
export type Report = Pick<DeepPartial<CompleteRequest>, "success" | "failure" | "retryable" | "unknown">;

/** How the step under the lease ended. */
export type Settled =
  /** The work returned a value (or the reconcile callback said succeeded). */
  | { kind: "value"; value: WorkValue; reconciled: boolean }
  /** The work threw `error` (a reconcile verdict `failed` is a BusinessError with `reconciled`). */
  | { kind: "threw"; error: unknown }
  /** The reconcile callback threw: the outcome stays unknown. */
  | { kind: "reconcileThrew"; error: unknown; remoteRef: string }
  /** RECONCILE without a callback. */
  | { kind: "handBack"; remoteRef: string };

/** What follows once the report is recorded (given the operation Complete answered). */
export type After =
  | { kind: "return"; result: Uint8Array; resultRef: string; reconciled: boolean }
  | { kind: "raise"; error: unknown }
  /** A transient error: claim again, unless Complete answered DEAD. */
  | { kind: "retry"; error: TransientError }
  /** Sent but unconfirmed: claim again (it reconciles at once) with a reconcile callback; else OutcomeUnknownError. */
  | { kind: "unconfirmed"; error: SentButUnconfirmedError };

export interface Plan {
  kind: ReportKind;
  report: Report;
  after: After;
}

export type Next =
  | { kind: "return"; result: Uint8Array; resultRef: string; reconciled: boolean; operation: Operation | undefined }
  | { kind: "raise"; error: unknown }
  /** runOnce claims again; the worker leaves it to a later ClaimDue. */
  | { kind: "claimAgain" };

/** A reconcile verdict as the step's end: succeeded is a value (resultRef defaults to the remote ref), failed a reconciled business failure. */
export function settledOfVerdict(found: ReconcileOutcome, remoteRef: string): Settled | undefined {
  switch (found.kind) {
    case "succeeded":
      return { kind: "value", value: { result: found.result, resultRef: found.resultRef ?? remoteRef }, reconciled: true };
    case "failed":
      return { kind: "threw", error: new BusinessError(found.code, found.message, { reconciled: true }) };
    case "notApplied":
      return undefined;
    default:
      return unreachable(found, () => undefined);
  }
}

export function describe(error: unknown): { name: string; message: string } {
  if (error instanceof Error) return { name: error.name || "Error", message: error.message };
  return { name: typeof error, message: String(error) };
}

function encode(value: Uint8Array | string | undefined): Uint8Array {
  if (value === undefined) return new Uint8Array();
  return typeof value === "string" ? new TextEncoder().encode(value) : value;
}

/** The result bytes and reference of what the work returned. */
export function successOf(value: WorkValue): { result: Uint8Array; resultRef: string } {
  const shaped: { result?: Uint8Array | string; resultRef?: string } =
    value instanceof Uint8Array || typeof value === "string" || value === undefined || value === null
      ? { result: value ?? undefined }
      : value;
  return { result: encode(shaped.result), resultRef: shaped.resultRef ?? "" };
}

/** What the step's end becomes: the Complete report and what follows it (the work table of PROTOCOL.md). */
export function decideReport(settled: Settled): Plan {
  switch (settled.kind) {
    case "value": {
      const success = successOf(settled.value);
      return { kind: "success", report: { success }, after: { kind: "return", ...success, reconciled: settled.reconciled } };
    }
    case "handBack": {
      const message = "not reconciled: runOnce was given no reconcile option";
      return {
        kind: "unknown",
        report: { unknown: { remoteRef: settled.remoteRef, message } },
        after: { kind: "raise", error: new ReconcileRequiredError(settled.remoteRef) },
      };
    }
    case "reconcileThrew": {
      const message = `reconcile failed: ${describe(settled.error).message}`;
      return { kind: "unknown", report: { unknown: { remoteRef: settled.remoteRef, message } }, after: { kind: "raise", error: settled.error } };
    }
    case "threw":
      break;
    default:
      return unreachable(settled, () => {
        throw new TypeError("unreachable");
      });
  }
  const error = settled.error;
  if (error instanceof BusinessError) {
    return { kind: "failure", report: { failure: { code: error.code, message: error.message } }, after: { kind: "raise", error } };
  }
  if (error instanceof SentButUnconfirmedError) {
    return {
      kind: "unknown",
      report: { unknown: { remoteRef: error.remoteRef, message: error.message } },
      after: { kind: "unconfirmed", error },
    };
  }
  const { name, message } = describe(error);
  if (error instanceof TransientError) {
    const retryAfter = error.retryAfterMs === undefined ? undefined : durationFromMillis(error.retryAfterMs);
    return {
      kind: "retryable",
      report: { retryable: { errorClass: error.errorClass ?? name, message, retryAfter } },
      after: { kind: "retry", error },
    };
  }
  // Unexpected: recorded retryable (the queue keeps the retry), and the caller sees it.
  return { kind: "retryable", report: { retryable: { errorClass: name, message } }, after: { kind: "raise", error } };
}

/** What follows a recorded report, from the operation Complete answered (or the Lookup in doubt found). */
export function decideRecorded(plan: Plan, operation: Operation | undefined, hasReconcile: boolean): Next {
  const after = plan.after;
  switch (after.kind) {
    case "return":
      return { kind: "return", result: after.result, resultRef: after.resultRef, reconciled: after.reconciled, operation };
    case "raise":
      return { kind: "raise", error: after.error };
    case "retry":
      if (operation?.status === OperationStatus.OPERATION_STATUS_DEAD) return { kind: "raise", error: new OperationDeadError(operation) };
      return { kind: "claimAgain" };
    case "unconfirmed":
      if (hasReconcile) return { kind: "claimAgain" };
      return { kind: "raise", error: new OutcomeUnknownError(after.error.remoteRef, operation, after.error) };
    default:
      return unreachable(after, () => ({ kind: "raise", error: new TypeError("unreachable") }));
  }
}

// ---- Renew and Complete errors ----

export type RenewDecision = { lost: true } | { lost: false; waitMs: number };

/**
 * What a failed Renew means (`attempt` 0 is its first failure in a row): a
 * transient error is retried after retryDelayMs, never past the time the lease
 * is still trusted (`trustedLeftMs`); anything else, or no trusted time left,
 * loses the lease.
 */
export function decideRenewFailure(
  error: unknown,
  attempt: number,
  trustedLeftMs: number,
  random: number,
  backoff: Backoff = DEFAULT_BACKOFF,
): RenewDecision {
  if (!isTransient(error) || trustedLeftMs <= 0) return { lost: true };
  return { lost: false, waitMs: Math.min(retryDelayMs(attempt, error.retryDelayMs, random, backoff), trustedLeftMs) };
}

export type CompleteErrorAction = "leaseLost" | "raise" | "inDoubt";

/**
 * What Complete refused with each reason means (transient ones are retried
 * first; when Complete's time runs out they are in doubt). Typed over every
 * ErrorReason: a reason added to the contract must be decided here.
 */
const COMPLETE_ERROR: Readonly<Record<KnownErrorReason, CompleteErrorAction>> = {
  // Another execution holds the operation, or no lease is ours.
  [ErrorReason.ERROR_REASON_STALE_FENCING_TOKEN]: "leaseLost",
  [ErrorReason.ERROR_REASON_LEASE_NOT_HELD]: "leaseLost",
  // Definitive refusals: nothing to settle.
  [ErrorReason.ERROR_REASON_ALREADY_COMPLETED]: "raise",
  [ErrorReason.ERROR_REASON_INVALID_ARGUMENT]: "raise",
  [ErrorReason.ERROR_REASON_OPERATION_NOT_FOUND]: "raise",
  [ErrorReason.ERROR_REASON_PARAMETER_CONFLICT]: "raise",
  [ErrorReason.ERROR_REASON_ORIGINAL_OUTCOME_UNKNOWN]: "raise",
  [ErrorReason.ERROR_REASON_NOTHING_TO_COMPENSATE]: "raise",
  [ErrorReason.ERROR_REASON_ALREADY_COMPENSATED]: "raise",
  // Anything else: in doubt, a Lookup decides.
  [ErrorReason.ERROR_REASON_MESSAGE_TOO_LARGE]: "inDoubt",
  [ErrorReason.ERROR_REASON_INVALID_TRANSITION]: "inDoubt",
  [ErrorReason.ERROR_REASON_UNAUTHENTICATED]: "inDoubt",
  [ErrorReason.ERROR_REASON_PERMISSION_DENIED]: "inDoubt",
  [ErrorReason.ERROR_REASON_RESOURCE_NOT_FOUND]: "inDoubt",
  [ErrorReason.ERROR_REASON_STORE_UNAVAILABLE]: "inDoubt",
  [ErrorReason.ERROR_REASON_OPERATION_BUSY]: "inDoubt",
  [ErrorReason.ERROR_REASON_OVERLOADED]: "inDoubt",
  [ErrorReason.ERROR_REASON_RATE_LIMITED]: "inDoubt",
  [ErrorReason.ERROR_REASON_DEADLINE_EXCEEDED]: "inDoubt",
  [ErrorReason.ERROR_REASON_INTERNAL]: "inDoubt",
  [ErrorReason.ERROR_REASON_OPERATION_EXISTS]: "inDoubt",
  [ErrorReason.ERROR_REASON_TOO_MANY_WAITERS]: "inDoubt",
};

/** What a Complete error (after its retries) means: the lease is lost, it is raised, or the report is in doubt. */
export function decideCompleteError(error: unknown): CompleteErrorAction {
  if (!(error instanceof OpregError)) return "inDoubt";
  if (error.errorReason !== undefined) return COMPLETE_ERROR[error.errorReason];
  // A status without an opreg ErrorInfo: by its code's class.
  if (error instanceof StaleFencingTokenError) return "leaseLost";
  if (error instanceof ParameterConflictError || error instanceof InvalidArgumentError || error instanceof NotFoundError) return "raise";
  return "inDoubt";
}

// ---- Complete in doubt ----

/** The execution outcome a report leaves. */
export const RECORDED_AS: Readonly<Record<ReportKind, ExecutionOutcome>> = {
  success: ExecutionOutcome.EXECUTION_OUTCOME_SUCCEEDED,
  failure: ExecutionOutcome.EXECUTION_OUTCOME_FAILED,
  retryable: ExecutionOutcome.EXECUTION_OUTCOME_RETRYABLE,
  unknown: ExecutionOutcome.EXECUTION_OUTCOME_UNKNOWN,
};

export type InDoubtDecision =
  /** Our report is recorded: as if Complete had answered `operation`. */
  | { kind: "recorded"; operation: Operation | undefined }
  | { kind: "leaseLost" }
  | { kind: "notRecorded" };

/**
 * What a Lookup (with executions) after a Complete in doubt means, for the
 * report `reported` under `fencingToken`; `found` undefined: the Lookup failed.
 * Only exactly the outcome we reported counts: accepting any non-running one
 * would let a report we did not make pass for ours.
 */
export function decideCallInDoubt(reported: ReportKind, fencingToken: bigint, found: LookupResponse | undefined): InDoubtDecision {
  const ours = found?.executions.find((e) => e.fencingToken === fencingToken);
  if (ours === undefined) return { kind: "notRecorded" };
  if (ours.outcome === RECORDED_AS[reported]) return { kind: "recorded", operation: found?.operation };
  // Another execution took over, or an operator revoked the lease: no report is ours to make.
  if (
    ours.outcome === ExecutionOutcome.EXECUTION_OUTCOME_SUPERSEDED ||
    ours.outcome === ExecutionOutcome.EXECUTION_OUTCOME_REVOKED
  ) {
    return { kind: "leaseLost" };
  }
  return { kind: "notRecorded" };
}

// ---- helpers ----

function malformed(what: string, message: string): OpregError {
  return new OpregError({ message: `${what}: ${message}`, code: GrpcStatus.UNKNOWN });
}

/** Fails to compile when a switch misses a case; at run time (a value from a newer peer) `fallback` decides. */
function unreachable<T>(value: never, fallback: (value: unknown) => T): T {
  return fallback(value);
}
