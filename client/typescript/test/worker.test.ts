// The worker (runWorker / Worker) against the real server.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { randomUUID } from "node:crypto";

import {
  BusinessError,
  ExecutionKind,
  ExecutionOutcome,
  LeaseLostError,
  NO_HANDLER,
  OperationStatus,
  OpregClient,
  Reconciled,
  Worker,
  operationKind,
  runWorker,
  type Lease,
  type Operation,
  type WorkerOptions,
} from "../src";
import {
  allHaveStatus,
  capturingLogger,
  seedClaimed,
  seedRetry,
  seedUnknown,
  sleep,
  waitFor,
} from "./fixtures";
import { startServer, type TestServer } from "./server";

let server: TestServer;
let client: OpregClient;
const namespace = (name: string) => `worker-${name}-${randomUUID()}`;
const T = { timeout: 60_000 };
const text = (bytes: Uint8Array) => Buffer.from(bytes).toString();

before(async () => {
  server = await startServer();
  client = new OpregClient(server.address);
});

after(async () => {
  client?.close();
  await server?.stop();
});

/** Starts a worker with quick polling and a silent logger; `stop()` aborts it and waits for run() to end. */
function startWorker(options: WorkerOptions & { client?: OpregClient }) {
  const controller = new AbortController();
  const logger = capturingLogger();
  const worker = new Worker(options.client ?? client, { pollIntervalMs: 100, logger, signal: controller.signal, ...options });
  const running = worker.run();
  return {
    worker,
    logger,
    running,
    async stop(): Promise<void> {
      controller.abort();
      await running;
    },
  };
}

describe("operationKind", () => {
  test("the key up to its first ':', or the whole key", () => {
    assert.equal(operationKind("payout:order-A:1"), "payout");
    assert.equal(operationKind("settle"), "settle");
    assert.equal(operationKind(":x"), "");
  });
});

describe("worker", () => {
  test("two concurrent workers run every due retry and takeover exactly once", T, async () => {
    const ns = namespace("exactly-once");
    const retries = Array.from({ length: 10 }, (_, i) => `retry:${i}-${randomUUID()}`);
    const takeovers = Array.from({ length: 4 }, (_, i) => `takeover:${i}-${randomUUID()}`);
    for (const [i, key] of retries.entries()) await seedRetry(client, ns, key, { n: i, kind: "retry" });
    // Claimed with a 1 s lease and abandoned: due for a takeover once it expires.
    for (const [i, key] of takeovers.entries()) await seedClaimed(client, ns, key, { n: i, kind: "takeover" }, { leaseTtlMs: 1_000 });

    const runs = new Map<string, { worker: string; lease: Lease; parameters: Operation["parameters"] }[]>();
    const handler = (worker: string) => async (operation: Operation, lease: Lease) => {
      const seen = runs.get(operation.operationKey) ?? [];
      seen.push({ worker, lease, parameters: operation.parameters });
      runs.set(operation.operationKey, seen);
      await sleep(150); // long enough that a worker's 3 slots fill and the other worker gets its share
      return `done by ${worker}`;
    };
    const workers = ["A", "B"].map((name) =>
      startWorker({
        namespace: ns,
        owner: `worker-${name}`,
        maxInFlight: 3,
        leaseTtlMs: 5_000,
        handlers: { retry: handler(name), takeover: handler(name) },
      }),
    );
    try {
      await waitFor("every operation to succeed", () =>
        allHaveStatus(client, ns, [...retries, ...takeovers], OperationStatus.OPERATION_STATUS_SUCCEEDED),
      );
    } finally {
      await Promise.all(workers.map((w) => w.stop()));
    }

    for (const key of [...retries, ...takeovers]) {
      assert.equal(runs.get(key)?.length, 1, `${key} ran ${runs.get(key)?.length ?? 0} times`);
    }
    const byWorker = new Set([...runs.values()].map((r) => r[0].worker));
    assert.deepEqual([...byWorker].sort(), ["A", "B"], "both workers took a share");
    for (const key of takeovers) assert.equal(runs.get(key)![0].lease.takeover, true, `${key} is a takeover`);
    for (const key of retries) assert.equal(runs.get(key)![0].lease.attempt, 2, `${key} is the second attempt`);
    // Handlers receive the stored Struct parameters.
    assert.deepEqual(runs.get(retries[3])![0].parameters, { n: 3, kind: "retry" });

    const retried = await client.lookup({ namespace: ns, operationKey: retries[0], includeExecutions: true });
    assert.deepEqual(
      retried.executions.map((e) => [e.kind, e.outcome]),
      [
        [ExecutionKind.EXECUTION_KIND_FIRST, ExecutionOutcome.EXECUTION_OUTCOME_RETRYABLE],
        [ExecutionKind.EXECUTION_KIND_RETRY, ExecutionOutcome.EXECUTION_OUTCOME_SUCCEEDED],
      ],
    );
    assert.match(text(retried.operation!.result), /^done by [AB]$/);
    const taken = await client.lookup({ namespace: ns, operationKey: takeovers[0], includeExecutions: true });
    assert.deepEqual(
      taken.executions.map((e) => [e.kind, e.outcome]),
      [
        [ExecutionKind.EXECUTION_KIND_FIRST, ExecutionOutcome.EXECUTION_OUTCOME_SUPERSEDED],
        [ExecutionKind.EXECUTION_KIND_TAKEOVER, ExecutionOutcome.EXECUTION_OUTCOME_SUCCEEDED],
      ],
    );
    for (const w of workers) assert.deepEqual(w.logger.lines, [], "nothing to log");
  });

  test("a kind without a handler is completed retryable NO_HANDLER; other errors by their name", T, async () => {
    const ns = namespace("no-handler");
    const orphan = `orphan:${randomUUID()}`;
    const crash = `pay:crash-${randomUUID()}`;
    const declined = `pay:declined-${randomUUID()}`;
    const other = `report:${randomUUID()}`;
    for (const key of [orphan, crash, declined]) await seedRetry(client, ns, key, { key }, { maxAttempts: 2 });
    const w = startWorker({
      namespace: ns,
      handlers: {
        pay: (operation) => {
          if (operation.operationKey === declined) throw new BusinessError("DECLINED", "card declined");
          throw new RangeError("boom");
        },
      },
    });
    try {
      await waitFor("the budget of 2 to be spent or the operation settled", () =>
        allHaveStatus(client, ns, [orphan, crash], OperationStatus.OPERATION_STATUS_DEAD),
      );
      await waitFor("the business failure", () => allHaveStatus(client, ns, [declined], OperationStatus.OPERATION_STATUS_FAILED));
    } finally {
      await w.stop();
    }
    const lookup = async (k: string) => (await client.lookup({ namespace: ns, operationKey: k })).operation!;
    assert.equal((await lookup(orphan)).lastErrorClass, NO_HANDLER);
    assert.equal((await lookup(crash)).lastErrorClass, "RangeError");
    assert.equal((await lookup(declined)).failure?.code, "DECLINED");
    // Recorded retryable outcomes are logged (warn); business failures are outcomes, not logged.
    const warned = w.logger.lines.filter((l) => l.message === "operation recorded retryable").map((l) => l.fields.operationKey);
    assert.deepEqual(warned.sort(), [crash, orphan].sort());

    // The default handler takes kinds without a handler of their own.
    await seedRetry(client, ns, other, { key: other });
    const d = startWorker({ namespace: ns, handlers: { pay: () => "never" }, defaultHandler: (operation) => `default for ${operationKind(operation.operationKey)}` });
    try {
      await waitFor("the default handler", () => allHaveStatus(client, ns, [other], OperationStatus.OPERATION_STATUS_SUCCEEDED));
    } finally {
      await d.stop();
    }
    assert.equal(text((await lookup(other)).result), "default for report");
  });

  test("RECONCILE: the callback's verdict is recorded; notApplied runs the handler under the same lease", T, async () => {
    const ns = namespace("reconcile");
    const paid = `pay:paid-${randomUUID()}`;
    const declined = `pay:declined-${randomUUID()}`;
    const lost = `pay:lost-${randomUUID()}`;
    await seedUnknown(client, ns, paid, { n: 1 }, "psp-paid");
    await seedUnknown(client, ns, declined, { n: 2 }, "psp-declined");
    await seedUnknown(client, ns, lost, { n: 3 }, "psp-lost");
    const asked: string[] = [];
    const handled: { key: string; token: bigint }[] = [];
    const reconciledTokens = new Map<string, bigint>();
    const w = startWorker({
      namespace: ns,
      handlers: {
        pay: (operation, lease) => {
          handled.push({ key: operation.operationKey, token: lease.fencingToken });
          return "paid on the second try";
        },
      },
      reconcile: async (operation, lease) => {
        asked.push(operation.remoteRef);
        reconciledTokens.set(operation.operationKey, lease.fencingToken);
        if (operation.remoteRef === "psp-paid") return Reconciled.succeeded("paid before");
        if (operation.remoteRef === "psp-declined") return Reconciled.failed("DECLINED", "declined before");
        return Reconciled.notApplied();
      },
    });
    try {
      await waitFor("every unknown outcome to be settled", async () =>
        (await allHaveStatus(client, ns, [paid, lost], OperationStatus.OPERATION_STATUS_SUCCEEDED)) &&
        (await allHaveStatus(client, ns, [declined], OperationStatus.OPERATION_STATUS_FAILED)),
      );
    } finally {
      await w.stop();
    }
    assert.deepEqual(asked.sort(), ["psp-declined", "psp-lost", "psp-paid"]);
    assert.deepEqual(handled, [{ key: lost, token: reconciledTokens.get(lost) }], "the handler ran only for notApplied, under the reconcile lease");
    const found = await client.lookup({ namespace: ns, operationKey: paid, includeExecutions: true });
    assert.equal(text(found.operation!.result), "paid before");
    assert.equal(found.operation!.resultRef, "psp-paid", "resultRef defaults to the remote ref");
    assert.equal(found.executions.at(-1)?.kind, ExecutionKind.EXECUTION_KIND_RECONCILE);
    const failed = await client.lookup({ namespace: ns, operationKey: declined });
    assert.equal(failed.operation!.failure?.code, "DECLINED");
    const retried = await client.lookup({ namespace: ns, operationKey: lost });
    assert.equal(text(retried.operation!.result), "paid on the second try");
  });

  test("RECONCILE without a callback is left alone and logged; it comes back when its lease expires", T, async () => {
    const ns = namespace("no-reconcile");
    const key = `pay:${randomUUID()}`;
    await seedUnknown(client, ns, key, { n: 1 }, "psp-1");
    const bare = startWorker({ namespace: ns, leaseTtlMs: 1_000, handlers: { pay: () => "never" } });
    try {
      await waitFor("the warning", () => bare.logger.lines.length > 0);
    } finally {
      await bare.stop();
    }
    assert.equal(bare.logger.lines[0].level, "warn");
    assert.match(bare.logger.lines[0].message, /no reconcile callback/);
    assert.equal(bare.logger.lines[0].fields.operationKey, key);
    assert.equal(bare.logger.lines[0].fields.remoteRef, "psp-1");
    let found = await client.lookup({ namespace: ns, operationKey: key, includeExecutions: true });
    // Under a reconcile lease: IN_PROGRESS with `reconciling`, until the lease expires.
    assert.equal(found.operation!.status, OperationStatus.OPERATION_STATUS_IN_PROGRESS);
    assert.equal(found.operation!.reconciling, true);
    const reconcileLease = found.executions.at(-1)!;
    assert.equal(reconcileLease.kind, ExecutionKind.EXECUTION_KIND_RECONCILE);
    assert.equal(reconcileLease.outcome, ExecutionOutcome.EXECUTION_OUTCOME_RUNNING, "nothing was reported under it");

    const later = startWorker({ namespace: ns, handlers: { pay: () => "never" }, reconcile: async () => Reconciled.succeeded("found paid") });
    try {
      await waitFor("the reconcile lease to expire and the operation to be reconciled", () =>
        allHaveStatus(client, ns, [key], OperationStatus.OPERATION_STATUS_SUCCEEDED),
      );
    } finally {
      await later.stop();
    }
    found = await client.lookup({ namespace: ns, operationKey: key });
    assert.equal(text(found.operation!.result), "found paid");
  });

  test("graceful stop: no more pulling, in-flight work finishes and is recorded", T, async () => {
    const ns = namespace("stop");
    const key = `slow:${randomUUID()}`;
    const late = `slow:late-${randomUUID()}`;
    await seedRetry(client, ns, key, { n: 1 });
    let started!: () => void;
    const workStarted = new Promise<void>((resolve) => (started = resolve));
    const spied = new OpregClient(server.address);
    let claimDueCalls = 0;
    const claimDue = spied.claimDue.bind(spied);
    spied.claimDue = (request, options) => {
      claimDueCalls++;
      return claimDue(request, options);
    };
    try {
      const w = startWorker({
        client: spied,
        namespace: ns,
        handlers: {
          slow: async () => {
            started();
            await sleep(800);
            return "finished after the stop";
          },
        },
      });
      await workStarted;
      const stoppedAt = Date.now();
      const stopping = w.stop();
      const callsAtStop = claimDueCalls;
      await seedRetry(client, ns, late, { n: 2 }, { retryAfterMs: 300 }); // due while stopping: must not be pulled
      await stopping;
      assert.ok(Date.now() - stoppedAt >= 600, "run() waited for the work in flight");
      assert.equal(claimDueCalls, callsAtStop, "no ClaimDue after the stop");
      const found = await client.lookup({ namespace: ns, operationKey: key });
      assert.equal(found.operation!.status, OperationStatus.OPERATION_STATUS_SUCCEEDED);
      assert.equal(text(found.operation!.result), "finished after the stop");
      assert.equal((await client.lookup({ namespace: ns, operationKey: late })).operation!.status, OperationStatus.OPERATION_STATUS_RETRY_SCHEDULED);
    } finally {
      spied.close();
    }
  });

  test("graceful stop: past the grace period the work's signal aborts and its outcome is dropped", T, async () => {
    const ns = namespace("grace");
    const key = `stuck:${randomUUID()}`;
    await seedRetry(client, ns, key, { n: 1 });
    let started!: () => void;
    const workStarted = new Promise<void>((resolve) => (started = resolve));
    let reason: unknown;
    const w = startWorker({
      namespace: ns,
      graceMs: 300,
      handlers: {
        stuck: async (_operation, _lease, signal) => {
          started();
          await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
          reason = signal.reason;
          throw signal.reason;
        },
      },
    });
    await workStarted;
    const stoppedAt = Date.now();
    await w.stop();
    const elapsed = Date.now() - stoppedAt;
    assert.ok(elapsed >= 250 && elapsed < 5_000, `stopped after ${elapsed} ms`);
    assert.equal((reason as Error | undefined)?.name, "AbortError");
    const found = await client.lookup({ namespace: ns, operationKey: key, includeExecutions: true });
    assert.equal(found.operation!.status, OperationStatus.OPERATION_STATUS_IN_PROGRESS, "nothing was reported: the lease lapses");
    assert.equal(found.executions.at(-1)?.outcome, ExecutionOutcome.EXECUTION_OUTCOME_RUNNING);
    assert.deepEqual(
      w.logger.lines.map((l) => l.message),
      ["grace period over; the outcome was dropped"],
    );
  });

  test("a hold revokes the worker's lease: the handler's signal aborts, nothing is reported", T, async () => {
    const ns = namespace("hold");
    const key = `long:${randomUUID()}`;
    await seedRetry(client, ns, key, { n: 1 });
    let started!: () => void;
    const workStarted = new Promise<void>((resolve) => (started = resolve));
    let reason: unknown;
    const w = startWorker({
      namespace: ns,
      leaseTtlMs: 1_500, // renewals every 500 ms: the revoked lease is noticed quickly
      handlers: {
        long: async (_operation, _lease, signal) => {
          started();
          await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
          reason = signal.reason;
          return "too late";
        },
      },
    });
    try {
      await workStarted;
      await client.holdOperation({ namespace: ns, operationKey: key, operator: "alice", reason: "investigating" });
      await waitFor("the lease loss to be logged", () => w.logger.lines.some((l) => l.message.startsWith("lease lost")), 5_000);
    } finally {
      await w.stop();
    }
    assert.ok(reason instanceof LeaseLostError, String(reason));
    const found = await client.lookup({ namespace: ns, operationKey: key, includeExecutions: true });
    assert.equal(found.operation!.held, true);
    assert.equal(found.executions.at(-1)?.outcome, ExecutionOutcome.EXECUTION_OUTCOME_REVOKED);
    const released = await client.releaseOperation({ namespace: ns, operationKey: key, operator: "alice", reason: "done" });
    assert.equal(released.operation!.status, OperationStatus.OPERATION_STATUS_UNKNOWN, "the revoked execution may have taken effect");
  });

  test("transport errors back off with jitter; a stop ends the worker at once", T, async () => {
    const nowhere = new OpregClient("127.0.0.1:1");
    const controller = new AbortController();
    const logger = capturingLogger();
    try {
      const running = runWorker(nowhere, {
        namespace: namespace("nowhere"),
        defaultHandler: () => "never",
        backoff: { initialMs: 50, maxMs: 400 },
        logger,
        signal: controller.signal,
      });
      await sleep(1_500);
      const stoppedAt = Date.now();
      controller.abort();
      await running;
      assert.ok(Date.now() - stoppedAt < 500, "the backoff sleep ends on stop");
      const failures = logger.lines.filter((l) => l.message === "claim due failed, retrying");
      assert.ok(failures.length >= 3 && failures.length <= 40, `${failures.length} attempts in 1.5 s`);
      assert.deepEqual(
        failures.map((l) => l.fields.failures),
        failures.map((_, i) => i + 1),
        "consecutive failures counted",
      );
    } finally {
      nowhere.close();
    }
  });

  test("options are checked", T, () => {
    assert.throws(() => new Worker(client, { namespace: "x" }), TypeError);
    assert.throws(() => new Worker(client, { namespace: "x", defaultHandler: () => "", maxInFlight: 0 }), RangeError);
  });
});
