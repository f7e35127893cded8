// Transport retries shared by runOnce and the worker: the transient errors
// (isTransient in decide.ts: UNAVAILABLE, DEADLINE_EXCEEDED, RATE_LIMITED,
// TOO_MANY_WAITERS, a server's "Timeout expired") are retried with exponential
// backoff and full jitter, never sooner than the server's RetryInfo asks
// (retryDelayMs in decide.ts); nothing else is.
import { deadlineError, isTransient, retryDelayMs, type Backoff } from "./decide";
import { sleep } from "./time";

export const DEFAULT_CALL_TIMEOUT_MS = 10_000;

/** The options of one attempt: the caller's signal, and the call timeout's deadline (epoch ms). */
export interface AttemptOptions {
  signal?: AbortSignal;
  deadline: number;
}

export interface RetryContext extends Backoff {
  /** No attempt starts after it (epoch ms). */
  deadlineAt: number;
  /** Names that deadline in errors (default: "the overall deadline"). */
  deadlineName?: string;
  callTimeoutMs: number;
  signal?: AbortSignal;
}

/**
 * Calls `call` until it answers, retrying transient errors with backoff (at least
 * the server's RetryInfo delay) until ctx.deadlineAt; a wait that would end past it
 * fails at once with DeadlineExceededError (caused by the last error).
 */
export async function withRetries<T>(
  what: string,
  call: (options: AttemptOptions) => Promise<T>,
  ctx: RetryContext,
): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    const now = Date.now();
    if (now >= ctx.deadlineAt) throw deadlineError(what, undefined, ctx.deadlineName);
    try {
      return await call({ signal: ctx.signal, deadline: Math.min(ctx.deadlineAt, now + ctx.callTimeoutMs) });
    } catch (error) {
      if (!isTransient(error)) throw error;
      const wait = retryDelayMs(attempt, error.retryDelayMs, Math.random(), ctx);
      if (Date.now() + wait >= ctx.deadlineAt) throw deadlineError(`${what} (${attempt + 1} attempts)`, error, ctx.deadlineName);
      await sleep(wait, ctx.signal);
    }
  }
}
