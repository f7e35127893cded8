// runOnce(namespace, key, parameters, work, options): the run-once helper, the
// same shape in every opreg client.
//
// 1. Claim. REPLAYED: return the stored result, or throw the stored business
//    failure (BusinessError, replayed = true). IN_PROGRESS / RETRY_LATER: wait
//    retry_after (plus jitter) and claim again, within one overall deadline.
//    DEAD: OperationDeadError. RECONCILE: options.reconcile(lease, remoteRef)
//    first; it says succeeded / failed / notApplied (then the work runs).
// 2. While the work runs, the lease is renewed in the background (every
//    renewEveryMs, default a third of the TTL); so is options.reconcile. A
//    renewal refused with STALE_FENCING_TOKEN or LEASE_NOT_HELD, or one that
//    could not succeed before the lease would expire (this host's monotonic
//    clock, less a tenth of the TTL), aborts the signal given to the work, and
//    nothing is reported afterwards: runOnce throws LeaseLostError. Transient
//    renewal failures are retried with full jitter.
// 3. The work's result is reported with Complete: a value is a success; a
//    BusinessError a failure; a TransientError a retryable error; a
//    SentButUnconfirmedError an unknown outcome; anything else a retryable error
//    with errorClass = the error's name, then rethrown.
// 4. UNAVAILABLE and DEADLINE_EXCEEDED from Claim, Renew, Complete and Lookup are
//    retried with exponential backoff and full jitter inside the overall deadline;
//    nothing else is. A Complete whose answer was lost is repeated with the same
//    token and report (the server answers a repeated report as before).
// 5. Complete gets time of its own (COMPLETE_CALL_TIMEOUTS call timeouts, or the
//    rest of the overall deadline if longer), and the lease is renewed while it
//    is retried. In doubt (anything but a definitive refusal), a Lookup decides
//    from the execution record of our token; if the report is not recorded
//    there, OutcomeNotRecordedError.
import { hostname } from "node:os";
import { randomUUID } from "node:crypto";
import { performance } from "node:perf_hooks";

import { status as GrpcStatus } from "@grpc/grpc-js";

import type { CallOptions, OpregClient } from "./client";
import { effectiveDeadline } from "./client";
import type { JsonObject } from "./digest";
import {
  AlreadyCompletedError,
  BusinessError,
  CompensationError,
  DeadlineExceededError,
  InvalidArgumentError,
  LeaseLostError,
  LeaseNotHeldError,
  NotFoundError,
  OperationDeadError,
  OpregError,
  OutcomeNotRecordedError,
  ParameterConflictError,
  ReconcileRequiredError,
  SentButUnconfirmedError,
  StaleFencingTokenError,
  TransientError,
} from "./errors";
import {
  ClaimOutcome,
  ExecutionOutcome,
  OperationStatus,
  type CompleteRequest,
  type DeepPartial,
  type Lease,
  type Operation,
  type RetryPolicy,
} from "./gen/opreg/v1/registry";
import { abortReason, durationFromMillis, millisFromDuration, sleep } from "./time";

/** What work may return: the result bytes (a string is UTF-8 encoded), optionally with a reference. */
export type WorkValue =
  | Uint8Array
  | string
  | void
  | undefined
  | { result?: Uint8Array | string; resultRef?: string };

/**
 * The operation's body. `signal` aborts when the lease is lost (reason: a
 * LeaseLostError) or when the caller's options.signal aborts.
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

export interface RetryPolicyOptions {
  /** Executions allowed, reconciliations excluded. At least 1. */
  maxAttempts: number;
  initialBackoffMs: number;
  maxBackoffMs: number;
  /** Measured from registration; no attempt starts after it. */
  deadlineMs: number;
}

export interface RunOnceOptions {
  /** Names this process/task. Default: `hostname/pid/random UUID` (unique per call). */
  owner?: string;
  /** The scheduler's run id, recorded in the history. */
  executionId?: string;
  /** Lease length requested in Claim and Renew. Default 30 000 ms. */
  leaseTtlMs?: number;
  /** Renewal interval. Default: a third of leaseTtlMs. */
  renewEveryMs?: number;
  /** Overall deadline for claiming, waiting and retrying (the work itself is not cut). */
  deadline?: Date | number;
  /** Overall timeout in ms (the earlier of this and `deadline` applies). Default 120 000 ms. */
  timeoutMs?: number;
  /** Deadline of one call. Default 10 000 ms. */
  callTimeoutMs?: number;
  /** Transport retry backoff: full jitter over min(maxMs, initialMs * 2^n). Default 100 / 5 000 ms. */
  backoff?: { initialMs?: number; maxMs?: number };
  /** Cancels waiting and claiming, and is forwarded to the work's signal. */
  signal?: AbortSignal;
  /** Required to resolve a RECONCILE. */
  reconcile?: Reconcile;
  /**
   * Used only when the operation is first registered (server defaults otherwise).
   * The server requires all four fields when a policy is given.
   */
  retryPolicy?: RetryPolicyOptions;
  /** Key of the operation this one compensates. */
  compensates?: string;
}

export interface RunOnceResult {
  result: Uint8Array;
  resultRef: string;
  /** The result was recorded earlier; the work did not run. */
  replayed: boolean;
  /** The result was established by options.reconcile. */
  reconciled: boolean;
  /** The operation as the registry returned it. */
  operation: Operation | undefined;
  /** `result` decoded as UTF-8. */
  readonly text: string;
}

const DEFAULT_LEASE_TTL_MS = 30_000;
const DEFAULT_TIMEOUT_MS = 120_000;
const DEFAULT_CALL_TIMEOUT_MS = 10_000;
const DEFAULT_BACKOFF_INITIAL_MS = 100;
const DEFAULT_BACKOFF_MAX_MS = 5_000;
/** How many call timeouts Complete may use once the work is done, even past the overall deadline. */
const COMPLETE_CALL_TIMEOUTS = 3;

/** How long a lease granted (or renewed) at a moment is trusted: the TTL less a tenth for the grant's own delay. */
function trustedMs(leaseTtlMs: number): number {
  return leaseTtlMs - leaseTtlMs / 10;
}

interface RetryContext {
  /** No attempt starts after it (epoch ms). */
  deadlineAt: number;
  callTimeoutMs: number;
  initialMs: number;
  maxMs: number;
  signal?: AbortSignal;
}

function encode(value: Uint8Array | string | undefined): Uint8Array {
  if (value === undefined) return new Uint8Array();
  return typeof value === "string" ? new TextEncoder().encode(value) : value;
}

function makeResult(
  result: Uint8Array,
  resultRef: string,
  replayed: boolean,
  reconciled: boolean,
  operation: Operation | undefined,
): RunOnceResult {
  return {
    result,
    resultRef,
    replayed,
    reconciled,
    operation,
    get text() {
      return new TextDecoder().decode(result);
    },
  };
}

/** Full jitter: uniform in [0, min(max, initial * 2^(attempt-1))]. */
function backoffMs(ctx: RetryContext, attempt: number): number {
  return Math.random() * Math.min(ctx.maxMs, ctx.initialMs * 2 ** Math.min(attempt - 1, 30));
}

function isTransient(error: unknown): error is OpregError {
  return error instanceof OpregError && error.transient;
}

function deadlineError(what: string, cause?: unknown): DeadlineExceededError {
  return new DeadlineExceededError({
    message: `${what}: the overall deadline passed`,
    code: GrpcStatus.DEADLINE_EXCEEDED,
    cause,
  });
}

/** Calls `call` until it answers, retrying transient errors with backoff until ctx.deadlineAt. */
export async function withRetries<T>(
  what: string,
  call: (options: CallOptions) => Promise<T>,
  ctx: RetryContext,
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    const now = Date.now();
    if (now >= ctx.deadlineAt) throw deadlineError(what);
    try {
      return await call({ signal: ctx.signal, deadline: Math.min(ctx.deadlineAt, now + ctx.callTimeoutMs) });
    } catch (error) {
      if (!isTransient(error)) throw error;
      const wait = backoffMs(ctx, attempt);
      if (Date.now() + wait >= ctx.deadlineAt) throw deadlineError(`${what} (${attempt} attempts)`, error);
      await sleep(wait, ctx.signal);
    }
  }
}

/**
 * Renews a lease in the background; on refusal, or when no renewal succeeded
 * before the lease would expire, records the loss and aborts the work's signal.
 */
class LeaseKeeper {
  lost: unknown = undefined;
  private timer: NodeJS.Timeout | undefined;
  private inflight: Promise<void> = Promise.resolve();
  private stopped = false;
  private failures = 0;
  private lastFailure: unknown = undefined;
  /** performance.now() after which the lease can no longer be trusted. */
  private validUntil: number;

  constructor(
    private readonly client: OpregClient,
    private readonly request: { namespace: string; operationKey: string; owner: string; fencingToken: bigint; leaseTtlMs: number },
    private readonly everyMs: number,
    private readonly ctx: RetryContext,
    private readonly controller: AbortController,
    /** performance.now() when the Claim that granted the lease was sent. */
    grantedAt: number,
  ) {
    this.validUntil = grantedAt + trustedMs(request.leaseTtlMs);
  }

  start(): void {
    this.schedule(this.everyMs);
  }

  /** Stops renewing and waits for a renewal in flight, so `lost` is final. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.inflight;
  }

  /** Renews in `ms`; if that would be too late, the lease is lost when it can no longer be trusted. */
  private schedule(ms: number): void {
    if (this.stopped) return;
    const left = this.validUntil - performance.now();
    if (ms >= left) {
      this.timer = setTimeout(() => this.expire(), Math.max(0, left));
      return;
    }
    this.timer = setTimeout(() => {
      this.inflight = this.renew();
    }, ms);
  }

  private expire(): void {
    if (this.stopped) return;
    this.lose(
      new DeadlineExceededError({
        message: `lease with fencing token ${this.request.fencingToken} could not be renewed before it would expire (${this.failures} failed renewals)`,
        code: GrpcStatus.DEADLINE_EXCEEDED,
        cause: this.lastFailure,
      }),
    );
  }

  private lose(error: unknown): void {
    this.lost = error;
    this.stopped = true;
    clearTimeout(this.timer);
    this.controller.abort(new LeaseLostError(this.request.fencingToken, error));
  }

  private async renew(): Promise<void> {
    if (this.stopped) return;
    const { namespace, operationKey, owner, fencingToken, leaseTtlMs } = this.request;
    const left = this.validUntil - performance.now();
    if (left <= 0) {
      this.expire();
      return;
    }
    const sent = performance.now();
    try {
      await this.client.renew(
        { namespace, operationKey, owner, fencingToken, leaseTtl: durationFromMillis(leaseTtlMs) },
        { timeoutMs: Math.max(1, Math.min(this.ctx.callTimeoutMs, left)) },
      );
      this.validUntil = Math.max(this.validUntil, sent + trustedMs(leaseTtlMs));
      this.failures = 0;
      this.lastFailure = undefined;
      this.schedule(this.everyMs);
    } catch (error) {
      if (isTransient(error)) {
        // Retried with full jitter (not at the next tick), but never past the
        // moment the lease can no longer be trusted.
        this.failures++;
        this.lastFailure = error;
        this.schedule(Math.min(this.everyMs, backoffMs(this.ctx, this.failures)));
        return;
      }
      // STALE_FENCING_TOKEN / LEASE_NOT_HELD (or anything else that is not
      // transient): the lease cannot be confirmed; never report under it.
      if (this.stopped) return;
      this.lose(error);
    }
  }
}

type Report = Pick<DeepPartial<CompleteRequest>, "success" | "failure" | "retryable" | "unknown">;

function describe(error: unknown): { name: string; message: string } {
  if (error instanceof Error) return { name: error.name || "Error", message: error.message };
  return { name: typeof error, message: String(error) };
}

function retryPolicy(policy: RetryPolicyOptions | undefined): RetryPolicy | undefined {
  if (policy === undefined) return undefined;
  return {
    maxAttempts: policy.maxAttempts,
    initialBackoff: durationFromMillis(policy.initialBackoffMs),
    maxBackoff: durationFromMillis(policy.maxBackoffMs),
    deadline: durationFromMillis(policy.deadlineMs),
  };
}

function defaultOwner(): string {
  return `${hostname()}/${process.pid}/${randomUUID()}`;
}

export async function runOnce(
  client: OpregClient,
  namespace: string,
  operationKey: string,
  parameters: JsonObject | Uint8Array,
  work: Work,
  options: RunOnceOptions = {},
): Promise<RunOnceResult> {
  const owner = options.owner ?? defaultOwner();
  const leaseTtlMs = options.leaseTtlMs ?? DEFAULT_LEASE_TTL_MS;
  const renewEveryMs = options.renewEveryMs ?? Math.max(1, Math.floor(leaseTtlMs / 3));
  const signal = options.signal;
  const ctx: RetryContext = {
    deadlineAt: effectiveDeadline({ deadline: options.deadline, timeoutMs: options.timeoutMs }, DEFAULT_TIMEOUT_MS) as number,
    callTimeoutMs: options.callTimeoutMs ?? DEFAULT_CALL_TIMEOUT_MS,
    initialMs: options.backoff?.initialMs ?? DEFAULT_BACKOFF_INITIAL_MS,
    maxMs: options.backoff?.maxMs ?? DEFAULT_BACKOFF_MAX_MS,
    signal,
  };
  const what = `runOnce ${namespace}/${operationKey}`;
  const claimRequest = {
    namespace,
    operationKey,
    ...(parameters instanceof Uint8Array ? { parametersDigest: parameters } : { parameters }),
    owner,
    executionId: options.executionId ?? "",
    leaseTtl: durationFromMillis(leaseTtlMs),
    retryPolicy: retryPolicy(options.retryPolicy),
    compensates: options.compensates ?? "",
  };

  for (;;) {
    if (signal?.aborted) throw abortReason(signal);
    let claimSentAt = performance.now();
    const response = await withRetries(
      `${what}: Claim`,
      (o) => {
        claimSentAt = performance.now();
        return client.claim(claimRequest, o);
      },
      ctx,
    );
    const operation = response.operation;
    switch (response.outcome) {
      case ClaimOutcome.CLAIM_OUTCOME_REPLAYED:
        if (operation?.status === OperationStatus.OPERATION_STATUS_FAILED) {
          throw new BusinessError(operation.failure?.code ?? "", operation.failure?.message ?? "", {
            replayed: true,
            operation,
          });
        }
        return makeResult(operation?.result ?? new Uint8Array(), operation?.resultRef ?? "", true, false, operation);
      case ClaimOutcome.CLAIM_OUTCOME_IN_PROGRESS:
      case ClaimOutcome.CLAIM_OUTCOME_RETRY_LATER: {
        const retryAfter = millisFromDuration(response.retryAfter);
        const wait = retryAfter + 10 + Math.random() * Math.min(1000, 50 + retryAfter * 0.2);
        if (Date.now() + wait >= ctx.deadlineAt) {
          throw deadlineError(`${what}: ${ClaimOutcome[response.outcome]}, next claim due in ${retryAfter} ms`);
        }
        await sleep(wait, signal);
        continue;
      }
      case ClaimOutcome.CLAIM_OUTCOME_DEAD:
        throw new OperationDeadError(operation);
      case ClaimOutcome.CLAIM_OUTCOME_ACQUIRED:
      case ClaimOutcome.CLAIM_OUTCOME_RECONCILE: {
        const lease = response.lease;
        if (lease === undefined) {
          throw new OpregError({ message: `${what}: ${ClaimOutcome[response.outcome]} without a lease`, code: GrpcStatus.INTERNAL });
        }
        const remoteRef =
          response.outcome === ClaimOutcome.CLAIM_OUTCOME_RECONCILE ? (operation?.remoteRef ?? "") : undefined;
        return execute(lease, remoteRef, claimSentAt);
      }
      default:
        throw new OpregError({ message: `${what}: unexpected claim outcome ${response.outcome}`, code: GrpcStatus.UNKNOWN });
    }
  }

  async function execute(lease: Lease, remoteRef: string | undefined, grantedAt: number): Promise<RunOnceResult> {
    const controller = new AbortController();
    const forward = () => controller.abort(abortReason(signal as AbortSignal));
    if (signal?.aborted) forward();
    else signal?.addEventListener("abort", forward, { once: true });
    const keeper = new LeaseKeeper(
      client,
      { namespace, operationKey, owner, fencingToken: lease.fencingToken, leaseTtlMs },
      renewEveryMs,
      ctx,
      controller,
      grantedAt,
    );
    keeper.start();

    let report: Report;
    let success: { result: Uint8Array; resultRef: string } | undefined;
    let failure: unknown;
    let reconciled = false;
    try {
      let value: WorkValue = undefined;
      let runWork = true;
      if (remoteRef !== undefined) {
        if (options.reconcile === undefined) throw new ReconcileRequiredError(remoteRef);
        let found: ReconcileOutcome;
        try {
          found = await options.reconcile(lease, remoteRef, controller.signal);
        } catch (error) {
          // Could not find out: the outcome stays unknown (a retryable report
          // would forget it).
          throw new SentButUnconfirmedError(remoteRef, `reconcile failed: ${describe(error).message}`, { cause: error });
        }
        if (found.kind === "succeeded") {
          reconciled = true;
          runWork = false;
          value = { result: found.result, resultRef: found.resultRef ?? remoteRef };
        } else if (found.kind === "failed") {
          throw new BusinessError(found.code, found.message, { reconciled: true });
        }
      }
      if (runWork) value = await work(lease, controller.signal);
      const shaped: { result?: Uint8Array | string; resultRef?: string } =
        value instanceof Uint8Array || typeof value === "string" || value === undefined || value === null
          ? { result: value ?? undefined }
          : value;
      success = { result: encode(shaped.result), resultRef: shaped.resultRef ?? "" };
      report = { success };
    } catch (error) {
      failure = error;
      if (error instanceof BusinessError) {
        report = { failure: { code: error.code, message: error.message } };
      } else if (error instanceof ReconcileRequiredError) {
        report = { unknown: { remoteRef: error.remoteRef, message: "not reconciled: runOnce was given no reconcile option" } };
      } else if (error instanceof SentButUnconfirmedError) {
        report = { unknown: { remoteRef: error.remoteRef, message: error.message } };
      } else {
        const { name, message } = describe(error);
        const retryAfterMs = error instanceof TransientError ? error.retryAfterMs : undefined;
        report = {
          retryable: {
            errorClass: name,
            message,
            retryAfter: retryAfterMs === undefined ? undefined : durationFromMillis(retryAfterMs),
          },
        };
      }
    } finally {
      signal?.removeEventListener("abort", forward);
    }

    let operation: Operation | undefined;
    try {
      // A lost lease: whatever the work did, nothing is reported under it.
      if (keeper.lost !== undefined) throw new LeaseLostError(lease.fencingToken, keeper.lost);
      // The lease is still renewed while Complete is retried.
      operation = await record(lease.fencingToken, report);
    } finally {
      await keeper.stop();
    }
    if (success !== undefined) {
      return makeResult(success.result, success.resultRef, false, reconciled, operation);
    }
    throw failure;
  }

  /**
   * Completes with `token`, retrying transport errors, with time of its own even
   * if the overall deadline passed while the work ran (the caller's signal does
   * not cancel it). In doubt, a Lookup says whether the report was recorded.
   */
  async function record(token: bigint, report: Report): Promise<Operation | undefined> {
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
