// runOnce(namespace, key, parameters, work, options): the run-once helper, the
// same shape in every opreg client.
//
// 1. Claim. REPLAYED: return the stored result, or throw the stored business
//    failure (BusinessError, replayed = true). IN_PROGRESS / RETRY_LATER: wait
//    retry_after (plus jitter) and claim again, within one overall deadline.
//    DEAD: OperationDeadError. HELD: OperationHeldError at once (an operator
//    froze the operation; waiting it out would hide that from the caller).
//    RECONCILE: options.reconcile(lease, remoteRef) first; it says succeeded /
//    failed / notApplied (then the work runs).
// 2. ACQUIRED / RECONCILE: the work (or reconcile) runs under the lease and its
//    outcome is recorded by executeUnderLease (underLease.ts), the piece shared
//    with the worker: renewals every renewEveryMs (default a third of the TTL),
//    LeaseLostError when the lease is lost, Complete from the outcome, Lookup
//    in doubt.
// 3. The transient errors (UNAVAILABLE, DEADLINE_EXCEEDED, OPERATION_BUSY, a
//    server's CANCELLED "Timeout expired") from Claim, Renew, Complete and Lookup
//    are retried with exponential backoff and full jitter, at least the server's
//    RetryInfo delay, inside the overall deadline; nothing else is
//    (MESSAGE_TOO_LARGE included). A Claim whose answer was lost resumes the same lease (same
//    owner).
import { performance } from "node:perf_hooks";

import { status as GrpcStatus } from "@grpc/grpc-js";

import type { OpregClient } from "./client";
import { effectiveDeadline } from "./client";
import type { JsonObject } from "./digest";
import { BusinessError, OperationDeadError, OperationHeldError, OpregError } from "./errors";
import { ClaimOutcome, OperationStatus, type Lease, type Operation, type RetryPolicy } from "./gen/opreg/v1/registry";
import {
  DEFAULT_BACKOFF_INITIAL_MS,
  DEFAULT_BACKOFF_MAX_MS,
  DEFAULT_CALL_TIMEOUT_MS,
  deadlineError,
  withRetries,
  type RetryContext,
} from "./retry";
import { abortReason, durationFromMillis, millisFromDuration, sleep } from "./time";
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

const DEFAULT_TIMEOUT_MS = 120_000;

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
      case ClaimOutcome.CLAIM_OUTCOME_HELD:
        throw new OperationHeldError(operation, millisFromDuration(response.retryAfter));
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
    const executed = await executeUnderLease(
      { client, namespace, operationKey, owner, lease, grantedAt, leaseTtlMs, renewEveryMs, ctx, what },
      remoteRef === undefined ? undefined : { remoteRef, reconcile: options.reconcile },
      work,
    );
    // The work's error is rethrown once its report is recorded.
    if (executed.outcome !== "success") throw executed.error;
    return makeResult(executed.result, executed.resultRef, false, executed.reconciled, executed.operation);
  }
}
