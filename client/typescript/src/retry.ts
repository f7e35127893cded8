// Transport retries shared by runOnce and the worker: the transient errors
// (isTransient in decide.ts: UNAVAILABLE, DEADLINE_EXCEEDED, RATE_LIMITED, a
// server's "Timeout expired") are retried with exponential backoff and full
// jitter, never sooner than the server's RetryInfo asks; nothing else is.
import type { CallOptions } from "./client";
import { deadlineError, isTransient } from "./decide";
import { OpregError } from "./errors";
import { sleep } from "./time";

export { deadlineError, isTransient } from "./decide";

export const DEFAULT_CALL_TIMEOUT_MS = 10_000;
export const DEFAULT_BACKOFF_INITIAL_MS = 100;
export const DEFAULT_BACKOFF_MAX_MS = 5_000;

export interface RetryContext {
  /** No attempt starts after it (epoch ms). */
  deadlineAt: number;
  /** Names that deadline in errors (default: "the overall deadline"). */
  deadlineName?: string;
  callTimeoutMs: number;
  initialMs: number;
  maxMs: number;
  signal?: AbortSignal;
}

/** Full jitter: uniform in [0, min(max, initial * 2^(attempt-1))]. */
export function backoffMs(ctx: Pick<RetryContext, "initialMs" | "maxMs">, attempt: number): number {
  return Math.random() * Math.min(ctx.maxMs, ctx.initialMs * 2 ** Math.min(attempt - 1, 30));
}

/**
 * How long to wait before retrying after the transient `error`: `backoff` (already
 * jittered), but at least the RetryInfo delay the server sent, stretched by up to a
 * tenth so that callers told the same delay do not come back together.
 */
export function transportWaitMs(error: unknown, backoff: number): number {
  const delay = error instanceof OpregError ? error.retryDelayMs : undefined;
  if (delay === undefined) return backoff;
  return Math.max(backoff, delay + (Math.random() * delay) / 10);
}

/**
 * Calls `call` until it answers, retrying transient errors with backoff (at least
 * the server's RetryInfo delay) until ctx.deadlineAt; a wait that would end past it
 * fails at once with DeadlineExceededError (caused by the last error).
 */
export async function withRetries<T>(
  what: string,
  call: (options: CallOptions) => Promise<T>,
  ctx: RetryContext,
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    const now = Date.now();
    if (now >= ctx.deadlineAt) throw deadlineError(what, undefined, ctx.deadlineName);
    try {
      return await call({ signal: ctx.signal, deadline: Math.min(ctx.deadlineAt, now + ctx.callTimeoutMs) });
    } catch (error) {
      if (!isTransient(error)) throw error;
      const wait = transportWaitMs(error, backoffMs(ctx, attempt));
      if (Date.now() + wait >= ctx.deadlineAt) throw deadlineError(`${what} (${attempt} attempts)`, error, ctx.deadlineName);
      await sleep(wait, ctx.signal);
    }
  }
}
