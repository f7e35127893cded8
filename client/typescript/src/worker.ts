// runWorker / Worker: executes the due work of one namespace, the same shape in
// every opreg client.
//
// 1. Pull. ClaimDue(namespace, owner, limit = free slots of maxInFlight). A full
//    batch: ask again at once; fewer (or none): nothing more is due now, sleep
//    pollIntervalMs (±20 % jitter) first. The transient errors (UNAVAILABLE,
//    DEADLINE_EXCEEDED, OPERATION_BUSY) back off with full jitter, at least the
//    server's RetryInfo delay; any other error stops the worker (after the
//    drain below) and rejects run() with it.
// 2. Run. Each operation runs under the lease ClaimDue granted with exactly the
//    run-once rules (decideDue, then executeUnderLease, shared with runOnce:
//    renewals every third of the TTL, the work's signal aborted when the lease
//    is lost, Complete from the outcome, Lookup in doubt). ACQUIRED runs the
//    handler of its kind (the key up to its first ':'), else the default
//    handler, else it is completed retryable with errorClass NO_HANDLER.
//    RECONCILE calls the reconcile callback and records its verdict
//    (notApplied: the handler runs under the same lease); without a callback it
//    is left alone, and logged: its reconcile lease expires and it comes back
//    later. The worker never claims an operation again itself: a recorded retry
//    or unknown outcome is handed out again by a later ClaimDue.
// 3. Stop. When options.signal aborts: no more ClaimDue (one in flight is
//    answered and its operations run: they are leased to us already), the
//    operations in flight finish and are recorded; after graceMs their signal
//    aborts, and what they then return is dropped: nothing is reported, their
//    leases lapse. run() resolves after.
import { performance } from "node:perf_hooks";

import type { OpregClient } from "./client";
import { LeaseLostError, TransientError } from "./errors";
import { DEFAULT_BACKOFF_INITIAL_MS, DEFAULT_BACKOFF_MAX_MS, decideDue, describe, isTransient, retryDelayMs } from "./decide";
import { ClaimOutcome, type DueOperation, type Lease, type Operation } from "./gen/opreg/v1/registry";
import { DEFAULT_CALL_TIMEOUT_MS, type RetryContext } from "./retry";
import { durationFromMillis, sleep } from "./time";
import {
  DEFAULT_LEASE_TTL_MS,
  defaultOwner,
  executeUnderLease,
  OutcomeDroppedError,
  type ReconcileOutcome,
  type Work,
  type WorkValue,
} from "./underLease";

/** Executes one due operation (`operation.parameters` holds its Struct parameters); returns or throws as runOnce's work does. */
export type WorkerHandler = (operation: Operation, lease: Lease, signal: AbortSignal) => Promise<WorkValue> | WorkValue;

/** Finds out what happened to the attempt known by `operation.remoteRef`; the verdicts of runOnce's reconcile. */
export type WorkerReconcile = (operation: Operation, lease: Lease, signal: AbortSignal) => Promise<ReconcileOutcome>;

/** Where the worker says what it could not do itself (`console` fits). */
export interface WorkerLogger {
  warn(message: string, fields: Record<string, unknown>): void;
  error(message: string, fields: Record<string, unknown>): void;
}

export interface WorkerOptions {
  namespace: string;
  /** Handlers by operation kind: the operation key up to its first ':' (the whole key when it has none). */
  handlers?: Record<string, WorkerHandler>;
  /** For operations whose kind has no handler in `handlers`. */
  defaultHandler?: WorkerHandler;
  /** Resolves RECONCILE operations; without it they are left alone (and logged). */
  reconcile?: WorkerReconcile;
  /** Operations executed at once. Default 10. */
  maxInFlight?: number;
  /** Names this worker in every lease. Default: `hostname/pid/random UUID`. */
  owner?: string;
  /** The worker's run id, recorded in each execution. */
  executionId?: string;
  /** Lease length requested in ClaimDue and Renew. Default 30 000 ms. */
  leaseTtlMs?: number;
  /** Renewal interval. Default: a third of leaseTtlMs. */
  renewEveryMs?: number;
  /** Pause after a ClaimDue that found less than it asked for. Default 1 000 ms (±20 %). */
  pollIntervalMs?: number;
  /** How long in-flight operations may take after a stop before their signal aborts and their outcome is dropped. Default 20 000 ms. */
  graceMs?: number;
  /** Deadline of one call. Default 10 000 ms. */
  callTimeoutMs?: number;
  /** Transport retry backoff: full jitter over min(maxMs, initialMs * 2^n). Default 100 / 5 000 ms. */
  backoff?: { initialMs?: number; maxMs?: number };
  /** Stops the worker gracefully (see graceMs). */
  signal?: AbortSignal;
  /** Default: console. */
  logger?: WorkerLogger;
}

/** The errorClass recorded for an operation no handler takes. */
export const NO_HANDLER = "NO_HANDLER";

const DEFAULT_MAX_IN_FLIGHT = 10;
const DEFAULT_POLL_INTERVAL_MS = 1_000;
// Leaves room for the Completes of the work finished within it inside the usual
// 30 s between SIGTERM and SIGKILL.
const DEFAULT_GRACE_MS = 20_000;
/** The most ClaimDue hands out in one call. */
const CLAIM_DUE_MAX_LIMIT = 1_000;

/** The kind of an operation: its key up to the first ':' (the whole key when it has none). */
export function operationKind(operationKey: string): string {
  const colon = operationKey.indexOf(":");
  return colon === -1 ? operationKey : operationKey.slice(0, colon);
}

/** `ms` spread by ±20 %, so that workers started together do not poll together. */
function jittered(ms: number): number {
  return ms * (0.8 + 0.4 * Math.random());
}

/** Resolves after `ms`, or as soon as `signal` aborts. */
async function rest(ms: number, signal: AbortSignal | undefined): Promise<void> {
  await sleep(ms, signal).catch(() => undefined);
}

function positiveInteger(name: string, value: number): number {
  if (!Number.isInteger(value) || value < 1) throw new RangeError(`${name} must be a positive integer, not ${value}`);
  return value;
}

export class Worker {
  private readonly inFlight = new Set<Promise<void>>();
  /** Aborted once the grace period after a stop is over: cancels the work still running. */
  private readonly cancel = new AbortController();
  /** Set while pull() waits for a free slot or a stop. */
  private wakeUp: (() => void) | undefined;
  private started = false;
  private readonly owner: string;
  private readonly maxInFlight: number;
  private readonly leaseTtlMs: number;
  private readonly renewEveryMs: number;
  private readonly pollIntervalMs: number;
  private readonly graceMs: number;
  private readonly ctx: RetryContext;
  private readonly log: WorkerLogger;

  constructor(
    private readonly client: OpregClient,
    private readonly options: WorkerOptions,
  ) {
    if (options.handlers === undefined && options.defaultHandler === undefined) {
      throw new TypeError("a worker needs handlers, a defaultHandler, or both");
    }
    this.owner = options.owner ?? defaultOwner();
    this.maxInFlight = positiveInteger("maxInFlight", options.maxInFlight ?? DEFAULT_MAX_IN_FLIGHT);
    this.leaseTtlMs = options.leaseTtlMs ?? DEFAULT_LEASE_TTL_MS;
    this.renewEveryMs = options.renewEveryMs ?? Math.max(1, Math.floor(this.leaseTtlMs / 3));
    this.pollIntervalMs = options.pollIntervalMs ?? DEFAULT_POLL_INTERVAL_MS;
    this.graceMs = options.graceMs ?? DEFAULT_GRACE_MS;
    this.ctx = {
      // No overall deadline: the work is not cut, and Complete has time of its own.
      deadlineAt: 0,
      callTimeoutMs: options.callTimeoutMs ?? DEFAULT_CALL_TIMEOUT_MS,
      initialMs: options.backoff?.initialMs ?? DEFAULT_BACKOFF_INITIAL_MS,
      maxMs: options.backoff?.maxMs ?? DEFAULT_BACKOFF_MAX_MS,
      signal: this.cancel.signal,
    };
    this.log = options.logger ?? console;
  }

  /** Operations being executed or reconciled now. */
  get inFlightCount(): number {
    return this.inFlight.size;
  }

  /**
   * Pulls and runs due operations until options.signal aborts, then drains.
   * Rejects (after the drain) with a ClaimDue error that is not transient.
   */
  async run(): Promise<void> {
    if (this.started) throw new Error("Worker.run() may be called once");
    this.started = true;
    const onStop = () => this.wake();
    this.options.signal?.addEventListener("abort", onStop, { once: true });
    try {
      await this.pull();
    } finally {
      this.options.signal?.removeEventListener("abort", onStop);
      await this.drain();
    }
  }

  private get stopping(): boolean {
    return this.options.signal?.aborted ?? false;
  }

  private async pull(): Promise<void> {
    let failures = 0;
    while (!this.stopping) {
      const free = this.maxInFlight - this.inFlight.size;
      if (free <= 0) {
        await this.slotFreedOrStop();
        continue;
      }
      const limit = Math.min(free, CLAIM_DUE_MAX_LIMIT);
      const sentAt = performance.now();
      let due: DueOperation[];
      try {
        due = await this.claimDue(limit);
      } catch (error) {
        if (!isTransient(error)) throw error;
        const waitMs = retryDelayMs(failures++, error.retryDelayMs, Math.random(), this.ctx);
        this.log.warn("claim due failed, retrying", { namespace: this.options.namespace, failures, waitMs, error: describe(error) });
        await rest(waitMs, this.options.signal);
        continue;
      }
      failures = 0;
      for (const operation of due) this.start(operation, sentAt);
      // Fewer than asked for: nothing more is due now (or the rest is capped or
      // locked by another worker) until later.
      if (due.length < limit) await rest(jittered(this.pollIntervalMs), this.options.signal);
    }
  }

  /**
   * Not cancelled by a stop: the operations an interrupted ClaimDue handed out
   * would stay leased, unseen, until their leases expired.
   */
  private async claimDue(limit: number): Promise<DueOperation[]> {
    const response = await this.client.claimDue(
      {
        namespace: this.options.namespace,
        owner: this.owner,
        executionId: this.options.executionId ?? "",
        leaseTtl: durationFromMillis(this.leaseTtlMs),
        limit,
      },
      { timeoutMs: this.ctx.callTimeoutMs },
    );
    return response.operations;
  }

  private slotFreedOrStop(): Promise<void> {
    return new Promise((resolve) => {
      this.wakeUp = resolve;
    });
  }

  private wake(): void {
    const wakeUp = this.wakeUp;
    this.wakeUp = undefined;
    wakeUp?.();
  }

  private start(due: DueOperation, grantedAt: number): void {
    const task: Promise<void> = this.handle(due, grantedAt)
      .catch((error: unknown) => this.log.error("worker task failed", { ...fieldsOf(due), error: describe(error) }))
      .finally(() => {
        this.inFlight.delete(task);
        this.wake();
      });
    this.inFlight.add(task);
  }

  private async handle(due: DueOperation, grantedAt: number): Promise<void> {
    const fields = fieldsOf(due);
    const reconcile = this.options.reconcile;
    const decision = decideDue(due, reconcile !== undefined);
    if (decision.kind === "leaveAlone") {
      this.log.warn(decision.why, { ...fields, remoteRef: due.operation?.remoteRef });
      return;
    }
    const { lease, operation, step } = decision;
    const { namespace, operationKey } = operation;
    try {
      const { recorded, next, thrown } = await executeUnderLease(
        {
          client: this.client,
          namespace,
          operationKey,
          owner: this.owner,
          lease,
          grantedAt,
          leaseTtlMs: this.leaseTtlMs,
          renewEveryMs: this.renewEveryMs,
          ctx: this.ctx,
          what: `worker ${namespace}/${operationKey}`,
          dropWhenCancelled: true,
        },
        step,
        this.workFor(operation),
        reconcile === undefined ? undefined : (l, _remoteRef, signal) => reconcile(operation, l, signal),
        reconcile !== undefined,
      );
      // Success and business failures are outcomes; the rest comes back later
      // (a recorded retry or unknown outcome is handed out by a later ClaimDue).
      if (recorded === "retryable" || recorded === "unknown") {
        const error = next.kind === "raise" ? next.error : thrown;
        this.log.warn(`operation recorded ${recorded}`, { ...fields, error: describe(error) });
      }
    } catch (error) {
      // Another execution owns the operation now: expected after a hold or a takeover.
      if (error instanceof LeaseLostError) this.log.warn("lease lost; nothing was reported", { ...fields, error: describe(error) });
      else if (error instanceof OutcomeDroppedError) this.log.warn("grace period over; the outcome was dropped", { ...fields, error: describe(error) });
      else this.log.error("operation outcome not recorded", { ...fields, error: describe(error) });
    }
  }

  /** The handler of the operation's kind, else the default, else one that reports NO_HANDLER. */
  private workFor(operation: Operation): Work {
    const kind = operationKind(operation.operationKey);
    const handlers = this.options.handlers;
    const handler =
      (handlers !== undefined && Object.hasOwn(handlers, kind) ? handlers[kind] : undefined) ?? this.options.defaultHandler;
    if (handler === undefined) {
      return () => {
        throw new TransientError(`no handler for operation kind "${kind}"`, { errorClass: NO_HANDLER });
      };
    }
    return (lease, signal) => handler(operation, lease, signal);
  }

  /** Waits for the operations in flight; after graceMs, aborts their signal and waits for their reports. */
  private async drain(): Promise<void> {
    if (this.inFlight.size === 0) return;
    const timer = setTimeout(
      () => this.cancel.abort(new DOMException("worker stopped: the grace period is over", "AbortError")),
      this.graceMs,
    );
    try {
      await Promise.allSettled([...this.inFlight]);
    } finally {
      clearTimeout(timer);
    }
  }
}

/** What identifies a due operation in a log line (bigints as strings, for JSON loggers). */
function fieldsOf(due: DueOperation): Record<string, unknown> {
  return {
    namespace: due.operation?.namespace,
    operationKey: due.operation?.operationKey,
    fencingToken: due.lease === undefined ? undefined : String(due.lease.fencingToken),
    outcome: ClaimOutcome[due.outcome],
  };
}

/** `new Worker(client, options).run()`: runs due operations until options.signal aborts. */
export function runWorker(client: OpregClient, options: WorkerOptions): Promise<void> {
  return new Worker(client, options).run();
}
