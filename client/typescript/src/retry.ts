// Transport retries shared by runOnce and the worker: UNAVAILABLE and
// DEADLINE_EXCEEDED are retried with exponential backoff and full jitter;
// nothing else is.
import { status as GrpcStatus } from "@grpc/grpc-js";

import type { CallOptions } from "./client";
import { DeadlineExceededError, OpregError } from "./errors";
import { sleep } from "./time";

export const DEFAULT_CALL_TIMEOUT_MS = 10_000;
export const DEFAULT_BACKOFF_INITIAL_MS = 100;
export const DEFAULT_BACKOFF_MAX_MS = 5_000;

export interface RetryContext {
  /** No attempt starts after it (epoch ms). */
  deadlineAt: number;
  callTimeoutMs: number;
  initialMs: number;
  maxMs: number;
  signal?: AbortSignal;
}

/** Full jitter: uniform in [0, min(max, initial * 2^(attempt-1))]. */
export function backoffMs(ctx: Pick<RetryContext, "initialMs" | "maxMs">, attempt: number): number {
  return Math.random() * Math.min(ctx.maxMs, ctx.initialMs * 2 ** Math.min(attempt - 1, 30));
}

export function isTransient(error: unknown): error is OpregError {
  return error instanceof OpregError && error.transient;
}

export function deadlineError(what: string, cause?: unknown): DeadlineExceededError {
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
