// Background renewal of a lease while work runs under it (runOnce and the
// worker): every `everyMs`, transient failures retried with full jitter, and
// the lease given up, with the work's signal aborted, as soon as a renewal
// fails with any non-transient error (decideRenewFailure) or the lease can no
// longer be trusted on this host's monotonic clock: send time of the call that
// granted or renewed it + TTL - TTL/10.
import { performance } from "node:perf_hooks";

import { status as GrpcStatus } from "@grpc/grpc-js";

import type { OpregClient } from "./client";
import { DeadlineExceededError, LeaseLostError } from "./errors";
import { decideRenewFailure } from "./decide";
import type { RetryContext } from "./retry";
import { durationFromMillis } from "./time";

/** How long a lease granted (or renewed) at a moment is trusted: the TTL less a tenth for the grant's own delay. */
export function trustedMs(leaseTtlMs: number): number {
  return leaseTtlMs - leaseTtlMs / 10;
}

export interface LeaseToKeep {
  namespace: string;
  operationKey: string;
  owner: string;
  fencingToken: bigint;
  leaseTtlMs: number;
}

/**
 * Renews a lease in the background; on refusal, or when no renewal succeeded
 * before the lease would expire, records the loss and aborts the work's signal.
 */
export class LeaseKeeper {
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
    private readonly request: LeaseToKeep,
    private readonly everyMs: number,
    private readonly ctx: Pick<RetryContext, "callTimeoutMs" | "initialMs" | "maxMs">,
    private readonly controller: AbortController,
    /** performance.now() when the Claim (or ClaimDue) that granted the lease was sent. */
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
      const decision = decideRenewFailure(error, this.failures, this.validUntil - performance.now(), Math.random(), this.ctx);
      if (!decision.lost) {
        // Retried with full jitter (not at the next tick), no sooner than the
        // server's RetryInfo asks, but never past the moment the lease can no
        // longer be trusted (schedule gives the lease up then).
        this.failures++;
        this.lastFailure = error;
        this.schedule(decision.waitMs);
        return;
      }
      // Any error that is not transient (STALE_FENCING_TOKEN, LEASE_NOT_HELD,
      // OPERATION_NOT_FOUND, PERMISSION_DENIED, anything), or no trusted time
      // left: the lease cannot be confirmed; never report under it.
      if (this.stopped) return;
      this.lose(error);
    }
  }
}
