import type { Duration } from "./gen/google/protobuf/duration";

/** A google.protobuf.Duration of `ms` milliseconds. */
export function durationFromMillis(ms: number): Duration {
  if (!Number.isFinite(ms) || ms < 0) throw new RangeError(`invalid duration ${ms} ms`);
  const whole = Math.floor(ms);
  return { seconds: BigInt(Math.floor(whole / 1000)), nanos: (whole % 1000) * 1_000_000 };
}

/** Milliseconds of a google.protobuf.Duration (0 when absent). */
export function millisFromDuration(duration: Duration | undefined): number {
  if (duration === undefined) return 0;
  return Number(duration.seconds) * 1000 + Math.floor(duration.nanos / 1_000_000);
}

/** The reason an aborted signal carries (an AbortError DOMException unless one was given). */
export function abortReason(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException("The operation was aborted", "AbortError");
}

/** Resolves after `ms`, or rejects with the signal's reason as soon as it aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(abortReason(signal));
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(abortReason(signal as AbortSignal));
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, Math.max(0, ms));
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
