// runOnce(namespace, key, parameters, work, options): the run-once helper, the
// same shape in every opreg client, following client/PROTOCOL.md (the decisions
// are in decide.ts, the execution under a lease in underLease.ts).
//
// 1. Claim (decideClaimAnswer), asking the server to hold the call while the
//    operation is IN_PROGRESS or RETRY_LATER (`wait`: the rest of the overall
//    deadline, at most 30 s; the call's timeout is extended by it). REPLAYED:
//    the stored result, or the stored business failure (BusinessError,
//    replayed = true). IN_PROGRESS / RETRY_LATER after the server waited: claim
//    again at once; from a server that does not wait (no `waited`): wait
//    retry_after (IN_PROGRESS at most pollIntervalMs) plus jitter and claim
//    again. All within one overall deadline (default 120 s; a wait that would
//    end past it fails at once with DeadlineExceededError). DEAD:
//    OperationDeadError. HELD: OperationHeldError at once. RECONCILE: the
//    reconcile callback under the lease; without one the lease is handed back
//    (Complete unknown, same remote ref) and ReconcileRequiredError thrown.
// 2. ACQUIRED / RECONCILE: executeUnderLease runs the step under the lease
//    (renewals, LeaseLostError when it is lost, Complete from the outcome,
//    Lookup in doubt) and says what follows: return, raise, or claim again (a
//    TransientError recorded retryable: the queue's backoff governs; a
//    SentButUnconfirmedError with a reconcile callback: the next Claim answers
//    RECONCILE and reconciles at once; without one: OutcomeUnknownError).
// 3. Transient errors of every call are retried with backoff inside the
//    deadline; nothing else is. A Claim whose answer was lost resumes the same
//    lease (same owner, one per runOnce call).
import { performance } from "node:perf_hooks";

import type { OpregClient } from "./client";
import { effectiveDeadline } from "./client";
import {
  DEFAULT_BACKOFF_INITIAL_MS,
  DEFAULT_BACKOFF_MAX_MS,
  claimLeaseGrantedAt,
  claimWaitMs,
  decideClaimAnswer,
  type ClaimSends,
} from "./decide";
import type { JsonObject } from "./digest";
import type { Operation, RetryPolicy } from "./gen/opreg/v1/registry";
import { DEFAULT_CALL_TIMEOUT_MS, withRetries, type RetryContext } from "./retry";
import { abortReason, durationFromMillis, sleep } from "./time";
import { DEFAULT_LEASE_TTL_MS, defaultOwner, executeUnderLease, type Reconcile, type Work } from "./underLease";

// Kept importable from here, where they were first defined.
export { withRetries } from "./retry";
export { Reconciled, type Reconcile, type ReconcileOutcome, type Work, type WorkValue } from "./underLease";

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
  /**
   * Against a server that does not wait: the longest an IN_PROGRESS answer is
   * waited before claiming again (its retry_after is the holder's lease). Default 1 000 ms.
   */
  pollIntervalMs?: number;
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

/** The overall deadline: four default lease lengths, so a holder that died is taken over well inside it. */
export const DEFAULT_TIMEOUT_MS = 120_000;
export const DEFAULT_POLL_INTERVAL_MS = 1_000;

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

/** The generated RetryPolicy of `policy` (undefined: the server's defaults). */
function retryPolicy(policy: RetryPolicyOptions | undefined): RetryPolicy | undefined {
  if (policy === undefined) return undefined;
  return {
    maxAttempts: policy.maxAttempts,
    initialBackoff: durationFromMillis(policy.initialBackoffMs),
    maxBackoff: durationFromMillis(policy.maxBackoffMs),
    deadline: durationFromMillis(policy.deadlineMs),
  };
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

  const hasReconcile = options.reconcile !== undefined;
  const pollIntervalMs = options.pollIntervalMs ?? DEFAULT_POLL_INTERVAL_MS;

  for (;;) {
    if (signal?.aborted) throw abortReason(signal);
    const sends: ClaimSends = { firstAt: 0, lastAt: 0, attempts: 0 };
    const response = await withRetries(
      `${what}: Claim`,
      (o) => {
        const waitMs = claimWaitMs(ctx.deadlineAt - Date.now());
        sends.lastAt = performance.now();
        if (sends.attempts++ === 0) sends.firstAt = sends.lastAt;
        // The server may hold the call for the whole wait before it answers: the
        // call's timeout runs on top of it.
        return client.claim({ ...claimRequest, wait: durationFromMillis(waitMs) }, { ...o, deadline: o.deadline + waitMs });
      },
      ctx,
    );
    const decision = decideClaimAnswer(response, {
      hasReconcile,
      remainingMs: ctx.deadlineAt - Date.now(),
      pollIntervalMs,
      random: Math.random(),
      what,
    });
    switch (decision.kind) {
      case "return": {
        const operation = decision.operation;
        return makeResult(operation?.result ?? new Uint8Array(), operation?.resultRef ?? "", true, false, operation);
      }
      case "raise":
        throw decision.error;
      case "wait":
        await sleep(decision.waitMs, signal);
        continue;
      case "execute": {
        const grantedAt = claimLeaseGrantedAt(sends, response.waited, leaseTtlMs);
        const { next } = await executeUnderLease(
          { client, namespace, operationKey, owner, lease: decision.lease, grantedAt, leaseTtlMs, renewEveryMs, ctx, what },
          decision.step,
          work,
          options.reconcile,
          hasReconcile,
        );
        if (next.kind === "return") return makeResult(next.result, next.resultRef, false, next.reconciled, next.operation);
        if (next.kind === "raise") throw next.error;
        continue; // claim again
      }
    }
  }
}
