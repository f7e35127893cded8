// runOnce against the real server.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { randomUUID } from "node:crypto";

import { InterceptingCall, Metadata, status as GrpcStatus, type Interceptor } from "@grpc/grpc-js";

import {
  BusinessError,
  ClaimOutcome,
  ClaimRequest,
  DeadlineExceededError,
  ExecutionKind,
  ExecutionOutcome,
  LeaseLostError,
  OperationDeadError,
  OperationHeldError,
  InternalError,
  OperationStatus,
  OpregClient,
  OutcomeNotRecordedError,
  OutcomeUnknownError,
  ParameterConflictError,
  parametersDigest,
  ReconcileRequiredError,
  Reconciled,
  SentButUnconfirmedError,
  StaleFencingTokenError,
  TransientError,
  UnavailableError,
  durationFromMillis,
  millisFromDuration,
  type Lease,
} from "../src";
import { seedRetry } from "./fixtures";
import { startServer, type TestServer } from "./server";

let server: TestServer;
let client: OpregClient;
const ns = `run-once-${randomUUID()}`;
const key = (name: string) => `${name}-${randomUUID()}`;
const T = { timeout: 30_000 };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const text = (bytes: Uint8Array) => Buffer.from(bytes).toString();

before(async () => {
  server = await startServer();
  client = new OpregClient(server.address);
});

after(async () => {
  client?.close();
  await server?.stop();
});

/** Counts calls of each wrapper of `target`. */
function spy(target: OpregClient): Record<string, unknown[]> {
  const calls: Record<string, unknown[]> = { claim: [], complete: [], renew: [], lookup: [] };
  for (const name of Object.keys(calls) as (keyof typeof calls & keyof OpregClient)[]) {
    const original = (target[name] as (...args: unknown[]) => unknown).bind(target);
    (target as unknown as Record<string, unknown>)[name] = (request: unknown, options: unknown) => {
      calls[name].push(request);
      return original(request, options);
    };
  }
  return calls;
}

/** Records the outcome of every Claim `target` makes, calling `onAnswer` after each. */
function recordOutcomes(target: OpregClient, onAnswer: (outcome: ClaimOutcome) => void = () => undefined): ClaimOutcome[] {
  const outcomes: ClaimOutcome[] = [];
  const original = target.claim.bind(target);
  target.claim = async (request, options) => {
    const response = await original(request, options);
    outcomes.push(response.outcome);
    onAnswer(response.outcome);
    return response;
  };
  return outcomes;
}

/** Makes `target` a client of a server that does not wait: its Claims go without `wait`, their answers without `waited`. */
function withoutWaiting(target: OpregClient): void {
  const original = target.claim.bind(target);
  target.claim = async (request, options) => ({ ...(await original({ ...request, wait: undefined }, options)), waited: undefined });
}

/**
 * A grpc-js interceptor that lets the first `count` calls of `method` reach the
 * server and then replaces their answer with UNAVAILABLE: the answer is lost.
 */
function loseAnswers(method: string, count: number): Interceptor {
  let remaining = count;
  return (options, nextCall) =>
    new InterceptingCall(nextCall(options), {
      start(metadata, listener, next) {
        const lose = options.method_definition.path.endsWith(`/${method}`) && remaining-- > 0;
        next(metadata, {
          onReceiveMessage(message, nextMessage) {
            nextMessage(message); // the status below decides: a non-OK status drops it
          },
          onReceiveStatus(status, nextStatus) {
            nextStatus(lose ? { code: GrpcStatus.UNAVAILABLE, details: "injected: answer lost", metadata: new Metadata() } : status);
          },
        });
      },
    });
}

/**
 * A grpc-js interceptor that fails calls of `method` with `code` without sending
 * them: every call while `failing()` says so.
 */
function failCalls(method: string, code: GrpcStatus, failing: () => boolean): Interceptor {
  return (options, nextCall) => {
    if (!options.method_definition.path.endsWith(`/${method}`) || !failing()) return new InterceptingCall(nextCall(options));
    return new InterceptingCall(nextCall(options), {
      start(_metadata, listener) {
        setImmediate(() => listener.onReceiveStatus({ code, details: `injected: ${method} failed`, metadata: new Metadata() }));
      },
      sendMessage() {},
      halfClose() {},
    });
  };
}

/** Like loseAnswers, but the call reaches the server and its answer is replaced by `code`. */
function replaceAnswers(method: string, code: GrpcStatus, count: number): Interceptor {
  let remaining = count;
  return (options, nextCall) =>
    new InterceptingCall(nextCall(options), {
      start(metadata, listener, next) {
        const replace = options.method_definition.path.endsWith(`/${method}`) && remaining-- > 0;
        next(metadata, {
          onReceiveStatus(status, nextStatus) {
            nextStatus(replace ? { code, details: "injected: answer replaced", metadata: new Metadata() } : status);
          },
        });
      },
    });
}

describe("runOnce", () => {
  test("success, then replay without running the work", T, async () => {
    const k = key("debit");
    let runs = 0;
    const first = await client.runOnce(ns, k, { account: "A", amount: 100 }, async (lease) => {
      runs++;
      assert.equal(typeof lease.fencingToken, "bigint");
      return { result: "balance=900", resultRef: "ledger-1" };
    });
    assert.equal(first.text, "balance=900");
    assert.equal(first.resultRef, "ledger-1");
    assert.equal(first.replayed, false);
    assert.equal(first.operation?.status, OperationStatus.OPERATION_STATUS_SUCCEEDED);

    // A caller-computed digest of the same parameters is the same operation.
    const second = await client.runOnce(ns, k, parametersDigest({ amount: 100, account: "A" }), async () => {
      runs++;
      return "never";
    });
    assert.equal(second.replayed, true);
    assert.equal(second.text, "balance=900");
    assert.equal(second.resultRef, "ledger-1");
    assert.equal(runs, 1);
  });

  test("different parameters -> ParameterConflictError, never retried", T, async () => {
    const k = key("conflict");
    await client.runOnce(ns, k, { account: "A", amount: 100 }, () => "ok");
    const other = new OpregClient(server.address);
    const calls = spy(other);
    try {
      const error = await other.runOnce(ns, k, { account: "A", amount: 101 }, () => "never").catch((e) => e);
      assert.ok(error instanceof ParameterConflictError, String(error));
      assert.deepEqual(error.differingFields, ["amount"]);
      assert.equal(calls.claim.length, 1);
    } finally {
      other.close();
    }
  });

  test("a business failure is recorded and replayed", T, async () => {
    const k = key("payout");
    let runs = 0;
    const first = await client
      .runOnce(ns, k, { amount: 5000 }, () => {
        runs++;
        throw new BusinessError("INSUFFICIENT_FUNDS", "balance 900 < 5000");
      })
      .catch((e) => e);
    assert.ok(first instanceof BusinessError);
    assert.equal(first.replayed, false);
    const replay = await client.runOnce(ns, k, { amount: 5000 }, () => { runs++; return "never"; }).catch((e) => e);
    assert.ok(replay instanceof BusinessError, String(replay));
    assert.equal(replay.replayed, true);
    assert.equal(replay.code, "INSUFFICIENT_FUNDS");
    assert.equal(replay.message, "balance 900 < 5000");
    assert.equal(replay.operation?.status, OperationStatus.OPERATION_STATUS_FAILED);
    assert.equal(runs, 1);
  });

  test("lease lost mid-work: signal aborted, late Complete never sent, new holder's result stands", T, async () => {
    const k = key("settle");
    const a = new OpregClient(server.address);
    const b = new OpregClient(server.address);
    const aCalls = spy(a);
    try {
      let workSignal: AbortSignal | undefined;
      let aLease: Lease | undefined;
      // Renewals every 2.5 s with a 1 s lease: the lease expires while A works
      // (A knows it locally, before any renewal: it cannot renew in time).
      const runA = a
        .runOnce(
          ns,
          k,
          { window: "W1" },
          async (lease, signal) => {
            aLease = lease;
            workSignal = signal;
            await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
            return "A-late"; // ignores the abort and tries to succeed anyway
          },
          { owner: "A", leaseTtlMs: 1_000, renewEveryMs: 2_500 },
        )
        .catch((e) => e);

      await sleep(1_400); // A's lease has expired, unrenewed
      const bResult = await b.runOnce(ns, k, { window: "W1" }, (lease) => {
        assert.equal(lease.takeover, true);
        return "B";
      }, { owner: "B" });
      assert.equal(bResult.text, "B");

      const error = await runA;
      assert.ok(error instanceof LeaseLostError, String(error));
      assert.ok(error.cause instanceof DeadlineExceededError, String(error.cause));
      assert.equal(error.fencingToken, aLease!.fencingToken);
      assert.ok(workSignal?.aborted);
      assert.ok(workSignal?.reason instanceof LeaseLostError);
      assert.equal(aCalls.complete.length, 0, "A must never Complete after losing its lease");

      const found = await client.lookup({ namespace: ns, operationKey: k, includeExecutions: true });
      assert.equal(found.operation!.status, OperationStatus.OPERATION_STATUS_SUCCEEDED);
      assert.equal(text(found.operation!.result), "B");
      const byOwner = Object.fromEntries(found.executions.map((e) => [e.owner, e]));
      assert.equal(byOwner.A.outcome, ExecutionOutcome.EXECUTION_OUTCOME_SUPERSEDED);
      assert.equal(byOwner.B.kind, ExecutionKind.EXECUTION_KIND_TAKEOVER);
      assert.equal(byOwner.B.outcome, ExecutionOutcome.EXECUTION_OUTCOME_SUCCEEDED);
    } finally {
      a.close();
      b.close();
    }
  });

  test("renewals keep a lease alive past its TTL", T, async () => {
    const k = key("long");
    // Two and a half TTLs of work; renewals every third of the 2 s TTL leave room for a slow machine.
    const result = await client.runOnce(ns, k, { n: 1 }, async (_lease, signal) => {
      await sleep(5_000);
      assert.equal(signal.aborted, false);
      return "done";
    }, { leaseTtlMs: 2_000 });
    assert.equal(result.text, "done");
    const found = await client.lookup({ namespace: ns, operationKey: k, includeExecutions: true });
    assert.equal(found.executions.length, 1);
  });

  test("unknown outcome: reconcile required, then reconciled as succeeded", T, async () => {
    const k = key("psp");
    let runs = 0;
    const sent = await client
      .runOnce(ns, k, { amount: 100 }, () => {
        runs++;
        throw new SentButUnconfirmedError("psp-7", "timeout after sending");
      })
      .catch((e) => e);
    // Without a reconcile option: recorded unknown, OutcomeUnknownError (caused by the work's error).
    assert.ok(sent instanceof OutcomeUnknownError, String(sent));
    assert.equal(sent.remoteRef, "psp-7");
    assert.ok(sent.cause instanceof SentButUnconfirmedError);
    assert.equal(sent.operation?.status, OperationStatus.OPERATION_STATUS_UNKNOWN);
    let found = await client.lookup({ namespace: ns, operationKey: k });
    assert.equal(found.operation!.status, OperationStatus.OPERATION_STATUS_UNKNOWN);
    assert.equal(found.operation!.remoteRef, "psp-7");

    const bare = new OpregClient(server.address);
    const bareCalls = spy(bare);
    const noHandler = await bare.runOnce(ns, k, { amount: 100 }, () => { runs++; return "never"; }).catch((e) => e);
    bare.close();
    assert.ok(noHandler instanceof ReconcileRequiredError, String(noHandler));
    assert.equal(noHandler.remoteRef, "psp-7");
    // The reconcile lease is handed back: Complete(unknown) with the same remote ref.
    assert.equal(bareCalls.complete.length, 1);
    assert.equal((bareCalls.complete[0] as { unknown?: { remoteRef: string } }).unknown?.remoteRef, "psp-7");
    found = await client.lookup({ namespace: ns, operationKey: k, includeExecutions: true });
    assert.equal(found.operation!.status, OperationStatus.OPERATION_STATUS_UNKNOWN);
    assert.ok(found.executions.some((e) => e.kind === ExecutionKind.EXECUTION_KIND_RECONCILE && e.outcome === ExecutionOutcome.EXECUTION_OUTCOME_UNKNOWN));

    const seen: string[] = [];
    const reconciled = await client.runOnce(ns, k, { amount: 100 }, () => { runs++; return "never"; }, {
      reconcile: async (lease, remoteRef) => {
        seen.push(remoteRef);
        assert.ok(lease.fencingToken > 0n);
        return Reconciled.succeeded("paid", "psp-7");
      },
    });
    assert.deepEqual(seen, ["psp-7"]);
    assert.equal(reconciled.text, "paid");
    assert.equal(reconciled.reconciled, true);
    assert.equal(runs, 1);
    found = await client.lookup({ namespace: ns, operationKey: k, includeExecutions: true });
    assert.equal(found.operation!.status, OperationStatus.OPERATION_STATUS_SUCCEEDED);
    assert.ok(found.executions.some((e) => e.kind === ExecutionKind.EXECUTION_KIND_RECONCILE && e.outcome === ExecutionOutcome.EXECUTION_OUTCOME_SUCCEEDED));
  });

  test("unknown outcome reconciled as not applied runs the work; as failed is a business failure", T, async () => {
    const k = key("psp-not-applied");
    await client.runOnce(ns, k, { n: 1 }, () => { throw new SentButUnconfirmedError("psp-8"); }).catch(() => undefined);
    const retried = await client.runOnce(ns, k, { n: 1 }, () => "second try", {
      reconcile: async () => Reconciled.notApplied(),
    });
    assert.equal(retried.text, "second try");
    assert.equal(retried.reconciled, false);

    const f = key("psp-failed");
    await client.runOnce(ns, f, { n: 1 }, () => { throw new SentButUnconfirmedError("psp-9"); }).catch(() => undefined);
    const failed = await client
      .runOnce(ns, f, { n: 1 }, () => "never", { reconcile: async () => Reconciled.failed("DECLINED", "card declined") })
      .catch((e) => e);
    assert.ok(failed instanceof BusinessError, String(failed));
    assert.equal(failed.reconciled, true);
    const replay = await client.runOnce(ns, f, { n: 1 }, () => "never").catch((e) => e);
    assert.ok(replay instanceof BusinessError && replay.replayed && replay.code === "DECLINED");
  });

  test("transport failure: retried with backoff, the overall deadline respected", T, async () => {
    const nowhere = new OpregClient("127.0.0.1:1");
    const calls = spy(nowhere);
    let runs = 0;
    try {
      const started = Date.now();
      const error = await nowhere
        .runOnce(ns, key("unreachable"), { n: 1 }, () => { runs++; return "never"; }, {
          timeoutMs: 1_500,
          backoff: { initialMs: 50, maxMs: 400 },
        })
        .catch((e) => e);
      const elapsed = Date.now() - started;
      assert.ok(error instanceof DeadlineExceededError, String(error));
      assert.ok(error.cause instanceof UnavailableError, String(error.cause));
      assert.ok(elapsed <= 1_500 + 300, `took ${elapsed} ms`);
      assert.ok(calls.claim.length >= 3, `${calls.claim.length} claims`);
      assert.equal(runs, 0);
    } finally {
      nowhere.close();
    }
  });

  test("lost answers of Claim and Complete are retried: one execution, one result", T, async () => {
    const flaky = new OpregClient(server.address, {
      clientOptions: { interceptors: [loseAnswers("Claim", 2), loseAnswers("Complete", 2)] },
    });
    const calls = spy(flaky);
    try {
      const k = key("flaky");
      let runs = 0;
      const result = await flaky.runOnce(ns, k, { n: 1 }, () => { runs++; return "once"; }, {
        owner: "flaky-owner",
        backoff: { initialMs: 20, maxMs: 100 },
      });
      assert.equal(result.text, "once");
      assert.equal(runs, 1);
      assert.equal(calls.claim.length, 3);
      assert.equal(calls.complete.length, 3);
      const tokens = new Set((calls.complete as { fencingToken: bigint }[]).map((r) => r.fencingToken));
      assert.equal(tokens.size, 1, "Complete is repeated with the same token");
      const found = await client.lookup({ namespace: ns, operationKey: k, includeExecutions: true });
      assert.equal(found.executions.length, 1);
      assert.equal(found.executions[0].outcome, ExecutionOutcome.EXECUTION_OUTCOME_SUCCEEDED);
      assert.equal(text(found.operation!.result), "once");
    } finally {
      flaky.close();
    }
  });

  test("every Claim asks the server to wait the rest of the deadline, at most 30 s, and its timeout is extended by the wait", T, async () => {
    const asked: { waitMs: number; timeoutMs: number }[] = [];
    const asker = new OpregClient(server.address);
    const original = asker.claim.bind(asker);
    asker.claim = (request, options) => {
      const deadline = options?.deadline as number;
      asked.push({ waitMs: millisFromDuration(ClaimRequest.fromPartial(request).wait), timeoutMs: deadline - Date.now() });
      return original(request, options);
    };
    try {
      await asker.runOnce(ns, key("asks-long"), { n: 1 }, () => "done", { timeoutMs: 120_000, callTimeoutMs: 5_000 });
      await asker.runOnce(ns, key("asks-short"), { n: 1 }, () => "done", { timeoutMs: 8_000, callTimeoutMs: 5_000 });
    } finally {
      asker.close();
    }
    const [long, short] = asked;
    assert.equal(long.waitMs, 30_000);
    assert.ok(long.timeoutMs > 34_900 && long.timeoutMs <= 35_000, `timeout ${long.timeoutMs} ms`);
    assert.ok(short.waitMs > 7_900 && short.waitMs <= 8_000, `wait ${short.waitMs} ms`);
    assert.ok(short.timeoutMs > short.waitMs + 4_900 && short.timeoutMs <= short.waitMs + 5_000, `timeout ${short.timeoutMs} ms`);
  });

  test("IN_PROGRESS from a server that waits: one Claim, held until the holder completes, replays its result", T, async () => {
    const k = key("busy-waiting");
    const held = await client.claim({ namespace: ns, operationKey: k, parameters: { n: 1 }, owner: "holder", leaseTtl: durationFromMillis(30_000) });
    assert.equal(held.outcome, ClaimOutcome.CLAIM_OUTCOME_ACQUIRED);
    const waiter = new OpregClient(server.address);
    const outcomes = recordOutcomes(waiter);
    try {
      const started = Date.now();
      const completing = sleep(300).then(() =>
        client.complete({ namespace: ns, operationKey: k, fencingToken: held.lease!.fencingToken, success: { result: Buffer.from("holder's") } }),
      );
      const result = await waiter.runOnce(ns, k, { n: 1 }, () => "never", { timeoutMs: 10_000 });
      const elapsed = Date.now() - started;
      await completing;
      assert.deepEqual(outcomes, [ClaimOutcome.CLAIM_OUTCOME_REPLAYED]);
      assert.ok(elapsed >= 250 && elapsed < 2_000, `took ${elapsed} ms`);
      assert.equal(result.replayed, true);
      assert.equal(result.text, "holder's");
    } finally {
      waiter.close();
    }
  });

  test("IN_PROGRESS from a server that does not wait: waits retry_after, then replays the holder's result", T, async () => {
    const k = key("busy");
    const held = await client.claim({ namespace: ns, operationKey: k, parameters: { n: 1 }, owner: "holder", leaseTtl: durationFromMillis(1_500) });
    assert.equal(held.outcome, ClaimOutcome.CLAIM_OUTCOME_ACQUIRED);
    const waiter = new OpregClient(server.address);
    withoutWaiting(waiter);
    try {
      // The holder completes once the waiter has been told IN_PROGRESS.
      let completing: Promise<unknown> | undefined;
      const outcomes = recordOutcomes(waiter, (outcome) => {
        if (outcome === ClaimOutcome.CLAIM_OUTCOME_IN_PROGRESS && completing === undefined) {
          completing = client.complete({ namespace: ns, operationKey: k, fencingToken: held.lease!.fencingToken, success: { result: Buffer.from("holder's") } });
        }
      });
      const result = await waiter.runOnce(ns, k, { n: 1 }, () => "never", { timeoutMs: 10_000 });
      await completing;
      assert.deepEqual(outcomes, [ClaimOutcome.CLAIM_OUTCOME_IN_PROGRESS, ClaimOutcome.CLAIM_OUTCOME_REPLAYED]);
      assert.equal(result.replayed, true);
      assert.equal(result.text, "holder's");
    } finally {
      waiter.close();
    }
  });

  test("a TransientError is recorded retryable and claimed again: RETRY_LATER is waited out (by the server), then the retry runs", T, async () => {
    const k = key("pushback");
    const retrier = new OpregClient(server.address);
    const outcomes = recordOutcomes(retrier);
    try {
      let runs = 0;
      const result = await retrier.runOnce(ns, k, { n: 1 }, (lease) => {
        runs++;
        if (runs === 1) throw new TransientError("busy", { retryAfterMs: 1_000 });
        return `attempt ${lease.attempt}`;
      }, { timeoutMs: 10_000 });
      assert.equal(result.text, "attempt 2");
      assert.equal(result.replayed, false);
      assert.equal(runs, 2);
      assert.equal(outcomes[0], ClaimOutcome.CLAIM_OUTCOME_ACQUIRED);
      assert.equal(outcomes.at(-1), ClaimOutcome.CLAIM_OUTCOME_ACQUIRED);
      // A server that waits holds the Claim until the retry is due: no RETRY_LATER, or a few.
      const between = outcomes.slice(1, -1);
      assert.ok(between.every((o) => o === ClaimOutcome.CLAIM_OUTCOME_RETRY_LATER), JSON.stringify(outcomes));
      const found = await client.lookup({ namespace: ns, operationKey: k, includeExecutions: true });
      assert.deepEqual(found.executions.map((e) => e.outcome), [
        ExecutionOutcome.EXECUTION_OUTCOME_RETRYABLE,
        ExecutionOutcome.EXECUTION_OUTCOME_SUCCEEDED,
      ]);
      assert.equal(found.operation!.lastErrorClass, "TransientError");
    } finally {
      retrier.close();
    }
  });

  test("TransientErrors until the budget is spent: OperationDeadError", T, async () => {
    let runs = 0;
    const error = await client
      .runOnce(ns, key("spent"), { n: 1 }, () => { runs++; throw new TransientError("still busy"); }, {
        retryPolicy: { maxAttempts: 2, initialBackoffMs: 20, maxBackoffMs: 50, deadlineMs: 60_000 },
      })
      .catch((e) => e);
    assert.ok(error instanceof OperationDeadError, String(error));
    assert.equal(error.operation?.status, OperationStatus.OPERATION_STATUS_DEAD);
    assert.equal(runs, 2);
  });

  test("a TransientError claimed again until the overall deadline: DeadlineExceededError", T, async () => {
    const error = await client
      .runOnce(ns, key("pushback-deadline"), { n: 1 }, () => { throw new TransientError("busy", { retryAfterMs: 5_000 }); }, {
        timeoutMs: 1_000,
      })
      .catch((e) => e);
    assert.ok(error instanceof DeadlineExceededError, String(error));
  });

  test("other errors are reported retryable with their name and rethrown; DEAD is typed", T, async () => {
    const k = key("budget");
    const error = await client
      .runOnce(ns, k, { n: 1 }, () => { throw new RangeError("boom"); }, { retryPolicy: { maxAttempts: 1, initialBackoffMs: 100, maxBackoffMs: 1_000, deadlineMs: 60_000 } })
      .catch((e) => e);
    assert.ok(error instanceof RangeError);
    const found = await client.lookup({ namespace: ns, operationKey: k });
    assert.equal(found.operation!.lastErrorClass, "RangeError");
    assert.equal(found.operation!.status, OperationStatus.OPERATION_STATUS_DEAD);
    const dead = await client.runOnce(ns, k, { n: 1 }, () => "never").catch((e) => e);
    assert.ok(dead instanceof OperationDeadError, String(dead));
  });

  test("HELD: OperationHeldError at once, carrying retry_after; the work does not run", T, async () => {
    const k = key("held");
    await seedRetry(client, ns, k, { n: 1 }, { retryAfterMs: 100 });
    await client.holdOperation({ namespace: ns, operationKey: k, operator: "alice", reason: "investigating" });
    const other = new OpregClient(server.address);
    const calls = spy(other);
    try {
      let runs = 0;
      const started = Date.now();
      const error = await other.runOnce(ns, k, { n: 1 }, () => { runs++; return "never"; }, { timeoutMs: 60_000 }).catch((e) => e);
      assert.ok(error instanceof OperationHeldError, String(error));
      assert.ok(Date.now() - started < 1_000, "not waited out");
      assert.equal(error.reason, "HELD");
      assert.ok(error.retryAfterMs > 0, `retryAfterMs ${error.retryAfterMs}`);
      assert.equal(error.operation?.held, true);
      assert.equal(calls.claim.length, 1);
      assert.equal(runs, 0);
    } finally {
      other.close();
    }
    await client.releaseOperation({ namespace: ns, operationKey: k, operator: "alice", reason: "done" });
    const after = await client.runOnce(ns, k, { n: 1 }, () => "after the hold", { timeoutMs: 10_000 });
    assert.equal(after.text, "after the hold");
  });

  test("AbortSignal cancels waiting", T, async () => {
    const k = key("wait");
    await client.claim({ namespace: ns, operationKey: k, parameters: { n: 1 }, owner: "holder", leaseTtl: durationFromMillis(30_000) });
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 300);
    const started = Date.now();
    const error = await client
      .runOnce(ns, k, { n: 1 }, () => "never", { signal: controller.signal, timeoutMs: 60_000 })
      .catch((e) => e);
    const elapsed = Date.now() - started;
    assert.equal(error?.name, "AbortError", String(error));
    assert.ok(elapsed < 2_000, `took ${elapsed} ms`);
  });

  test("IN_PROGRESS past the deadline: a server that waits holds the Claim until the deadline", T, async () => {
    const k = key("deadline-waiting");
    await client.claim({ namespace: ns, operationKey: k, parameters: { n: 1 }, owner: "holder", leaseTtl: durationFromMillis(30_000) });
    const waiter = new OpregClient(server.address);
    const outcomes = recordOutcomes(waiter);
    try {
      const started = Date.now();
      const error = await waiter.runOnce(ns, k, { n: 1 }, () => "never", { timeoutMs: 800 }).catch((e) => e);
      const elapsed = Date.now() - started;
      assert.ok(error instanceof DeadlineExceededError, String(error));
      assert.ok(elapsed >= 600 && elapsed < 2_000, `took ${elapsed} ms`);
      assert.ok(outcomes.length >= 1 && outcomes.every((o) => o === ClaimOutcome.CLAIM_OUTCOME_IN_PROGRESS), JSON.stringify(outcomes));
    } finally {
      waiter.close();
    }
  });

  test("IN_PROGRESS from a server that does not wait: a poll that cannot end before the overall deadline fails at once", T, async () => {
    const k = key("deadline");
    await client.claim({ namespace: ns, operationKey: k, parameters: { n: 1 }, owner: "holder", leaseTtl: durationFromMillis(30_000) });
    const impatient = new OpregClient(server.address);
    withoutWaiting(impatient);
    try {
      const started = Date.now();
      // IN_PROGRESS for 30 s, polled at most the poll interval (1 s) apart: past an 800 ms deadline.
      const error = await impatient.runOnce(ns, k, { n: 1 }, () => "never", { timeoutMs: 800 }).catch((e) => e);
      assert.ok(error instanceof DeadlineExceededError, String(error));
      assert.ok(Date.now() - started < 500, `took ${Date.now() - started} ms`);
    } finally {
      impatient.close();
    }

    // Within a longer deadline, the holder's lease is polled every pollIntervalMs (plus jitter).
    const poller = new OpregClient(server.address);
    withoutWaiting(poller);
    const outcomes = recordOutcomes(poller);
    try {
      const polled = await poller.runOnce(ns, k, { n: 1 }, () => "never", { timeoutMs: 2_000, pollIntervalMs: 300 }).catch((e) => e);
      assert.ok(polled instanceof DeadlineExceededError, String(polled));
      assert.ok(outcomes.length >= 3 && outcomes.every((o) => o === ClaimOutcome.CLAIM_OUTCOME_IN_PROGRESS), JSON.stringify(outcomes));
    } finally {
      poller.close();
    }
  });

  test("work finishing after the overall deadline is still recorded; renewals go on while Complete is retried", T, async () => {
    let firstComplete: number | undefined;
    const flaky = new OpregClient(server.address, {
      // Every Complete fails (unsent) for 2 s after the first one: longer than the lease TTL.
      clientOptions: { interceptors: [failCalls("Complete", GrpcStatus.UNAVAILABLE, () => Date.now() - (firstComplete ??= Date.now()) < 2_000)] },
    });
    const calls = spy(flaky);
    const renewedAt: number[] = [];
    const renew = flaky.renew.bind(flaky);
    flaky.renew = (request, options) => {
      renewedAt.push(Date.now());
      return renew(request, options);
    };
    try {
      const k = key("late");
      let rival: Promise<ClaimOutcome> | undefined;
      const result = await flaky.runOnce(ns, k, { n: 1 }, async () => {
        await sleep(700); // past the 400 ms overall deadline
        // Once the lease TTL has passed during Complete's retries, another owner tries.
        rival = sleep(1_600).then(async () =>
          (await client.claim({ namespace: ns, operationKey: k, parameters: { n: 1 }, owner: "rival", leaseTtl: durationFromMillis(1_000) })).outcome,
        );
        return "late but done";
      }, { timeoutMs: 400, callTimeoutMs: 900, leaseTtlMs: 1_000, backoff: { initialMs: 20, maxMs: 150 } });
      assert.equal(result.text, "late but done");
      assert.ok(calls.complete.length >= 2, `${calls.complete.length} Completes`);
      assert.ok(renewedAt.filter((t) => t > firstComplete!).length >= 2, "renewals continue while Complete is retried");
      assert.notEqual(await rival, ClaimOutcome.CLAIM_OUTCOME_ACQUIRED, "the lease did not lapse during Complete's retries");
      const found = await client.lookup({ namespace: ns, operationKey: k, includeExecutions: true });
      assert.equal(found.executions.length, 1, "no takeover");
      assert.equal(found.executions[0].outcome, ExecutionOutcome.EXECUTION_OUTCOME_SUCCEEDED);
    } finally {
      flaky.close();
    }
  });

  test("Complete in doubt (a non-definitive error after it was recorded): Lookup finds our report", T, async () => {
    const flaky = new OpregClient(server.address, { clientOptions: { interceptors: [replaceAnswers("Complete", GrpcStatus.INTERNAL, 1)] } });
    const calls = spy(flaky);
    try {
      const k = key("doubt");
      const result = await flaky.runOnce(ns, k, { n: 1 }, () => "recorded anyway");
      assert.equal(result.text, "recorded anyway");
      assert.equal(result.operation?.status, OperationStatus.OPERATION_STATUS_SUCCEEDED);
      assert.equal(calls.complete.length, 1, "INTERNAL is not retried");
      assert.equal(calls.lookup.length, 1);
    } finally {
      flaky.close();
    }
  });

  test("a Complete that cannot be recorded: OutcomeNotRecordedError after Lookup finds nothing", T, async () => {
    for (const [code, causeClass] of [
      [GrpcStatus.INTERNAL, InternalError],
      [GrpcStatus.UNAVAILABLE, DeadlineExceededError],
    ] as const) {
      const broken = new OpregClient(server.address, { clientOptions: { interceptors: [failCalls("Complete", code, () => true)] } });
      const calls = spy(broken);
      try {
        const k = key("unrecorded");
        const error = await broken
          .runOnce(ns, k, { n: 1 }, () => "lost", { timeoutMs: 300, callTimeoutMs: 300, backoff: { initialMs: 20, maxMs: 100 } })
          .catch((e) => e);
        assert.ok(error instanceof OutcomeNotRecordedError, String(error));
        assert.match(error.message, /not recorded/);
        assert.equal(error.report, "success");
        assert.ok(error.cause instanceof causeClass, String(error.cause));
        assert.equal(calls.lookup.length, 1);
        const found = await client.lookup({ namespace: ns, operationKey: k, includeExecutions: true });
        assert.equal(found.executions[0].outcome, ExecutionOutcome.EXECUTION_OUTCOME_RUNNING);
      } finally {
        broken.close();
      }
    }
  });

  test("renewals failing transiently are retried with jitter; a lease not renewed before it expires is lost", T, async () => {
    const flaky = new OpregClient(server.address, { clientOptions: { interceptors: [failCalls("Renew", GrpcStatus.UNAVAILABLE, () => true)] } });
    const calls = spy(flaky);
    try {
      let abortedAfter: number | undefined;
      const started = Date.now();
      const error = await flaky
        .runOnce(ns, key("unrenewable"), { n: 1 }, async (_lease, signal) => {
          await Promise.race([sleep(4_000), new Promise((r) => signal.addEventListener("abort", r, { once: true }))]);
          if (signal.aborted) abortedAfter = Date.now() - started;
          return "too late";
        }, { leaseTtlMs: 1_000, renewEveryMs: 300, backoff: { initialMs: 20, maxMs: 100 } })
        .catch((e) => e);
      assert.ok(error instanceof LeaseLostError, String(error));
      assert.ok(error.cause instanceof DeadlineExceededError, String(error.cause));
      assert.ok(abortedAfter !== undefined && abortedAfter <= 1_000, `aborted after ${abortedAfter} ms`);
      assert.ok(calls.renew.length > 3, `${calls.renew.length} renewals: retried between ticks`);
      assert.equal(calls.complete.length, 0);
    } finally {
      flaky.close();
    }
  });

  test("reconcile runs under renewals; a lease lost during reconcile aborts it", T, async () => {
    const k = key("slow-reconcile");
    await client.runOnce(ns, k, { n: 1 }, () => { throw new SentButUnconfirmedError("psp-slow"); }).catch(() => undefined);
    const result = await client.runOnce(ns, k, { n: 1 }, () => "never", {
      leaseTtlMs: 1_000,
      reconcile: async (_lease, _ref, signal) => {
        await sleep(2_500);
        assert.equal(signal.aborted, false);
        return Reconciled.succeeded("checked");
      },
    });
    assert.equal(result.text, "checked");
    const found = await client.lookup({ namespace: ns, operationKey: k, includeExecutions: true });
    assert.ok(found.executions.every((e) => e.outcome !== ExecutionOutcome.EXECUTION_OUTCOME_SUPERSEDED));

    const l = key("lost-reconcile");
    await client.runOnce(ns, l, { n: 1 }, () => { throw new SentButUnconfirmedError("psp-lost"); }).catch(() => undefined);
    const flaky = new OpregClient(server.address, { clientOptions: { interceptors: [replaceAnswers("Renew", GrpcStatus.ABORTED, 1)] } });
    const calls = spy(flaky);
    try {
      let reconcileSignal: AbortSignal | undefined;
      const error = await flaky
        .runOnce(ns, l, { n: 1 }, () => "never", {
          leaseTtlMs: 1_000,
          reconcile: async (_lease, _ref, signal) => {
            reconcileSignal = signal;
            await new Promise((r) => signal.addEventListener("abort", r, { once: true }));
            return Reconciled.succeeded("too late");
          },
        })
        .catch((e) => e);
      assert.ok(error instanceof LeaseLostError, String(error));
      assert.ok(error.cause instanceof StaleFencingTokenError, String(error.cause));
      assert.ok(reconcileSignal?.reason instanceof LeaseLostError);
      assert.equal(calls.complete.length, 0);
    } finally {
      flaky.close();
    }
  });
});
