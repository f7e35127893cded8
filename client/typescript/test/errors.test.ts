// The error answers added with failing fast: OPERATION_BUSY and STORE_UNAVAILABLE
// with a RetryInfo, DEADLINE_EXCEEDED (and the CANCELLED "Timeout expired" a
// server's own timer answers), MESSAGE_TOO_LARGE.
//
// MESSAGE_TOO_LARGE is provoked on the real server. OPERATION_BUSY needs a row
// locked in the database, so it is synthesized: a grpc-status-details-bin
// trailer (google.rpc.Status with ErrorInfo and RetryInfo, statusEncoding.ts)
// answered by a grpc-js interceptor, as the other tests inject statuses.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { randomUUID } from "node:crypto";
import { performance } from "node:perf_hooks";

import { InterceptingCall, Metadata, status as GrpcStatus, type Interceptor, type ServiceError } from "@grpc/grpc-js";

import {
  DeadlineExceededError,
  RateLimitedError,
  decodeRpcStatus,
  fromServiceError,
  MessageTooLargeError,
  NotFoundError,
  OperationBusyError,
  OperationExistsError,
  OperationStatus,
  OpregClient,
  OpregError,
  STATUS_DETAILS_KEY,
  TooManyWaitersError,
  UnavailableError,
  Worker,
  withRetries,
} from "../src";
import { isTransient } from "../src/decide";
import { capturingLogger, seedRetry, sleep, waitFor } from "./fixtures";
import { startServer, type TestServer } from "./server";
import {
  ERROR_INFO,
  RETRY_INFO,
  encodeErrorInfo as errorInfo,
  encodeRetryInfo as retryInfo,
  encodeRpcStatus as rpcStatus,
} from "./statusEncoding";

let server: TestServer;
let client: OpregClient;
const ns = `errors-${randomUUID()}`;
const key = (name: string) => `${name}-${randomUUID()}`;
const T = { timeout: 30_000 };
const PARAMS = { account: "A", amount: 100 };
// Over the server's Claim limit (576 KiB): refused from the frame header.
const TOO_LARGE = { blob: "x".repeat(1_000_000) };

before(async () => {
  server = await startServer();
  client = new OpregClient(server.address, { defaultTimeoutMs: 10_000 });
});

after(async () => {
  client?.close();
  await server?.stop();
});

// ---- google.rpc.Status, encoded as the server sends it ----

interface Answer {
  code: GrpcStatus;
  details: string;
  metadata: Metadata;
}

function answer(code: GrpcStatus, message: string, details: [string, Uint8Array][] = []): Answer {
  const metadata = new Metadata();
  if (details.length > 0) metadata.set(STATUS_DETAILS_KEY, Buffer.from(rpcStatus(code, message, details)));
  return { code, details: message, metadata };
}

const busyAnswer = (delayMs = 200) =>
  answer(GrpcStatus.UNAVAILABLE, "the operation is busy: another transaction holds it; retry shortly", [
    [ERROR_INFO, errorInfo("OPERATION_BUSY")],
    [RETRY_INFO, retryInfo(delayMs)],
  ]);

/** The typed error grpc-js would hand `fromServiceError` for `a`. */
function typed(a: Answer): OpregError {
  const error = Object.assign(new Error(`${a.code} ${GrpcStatus[a.code]}: ${a.details}`), a) as ServiceError;
  return fromServiceError(error);
}

/**
 * A grpc-js interceptor that answers the first `count` calls of `method` with
 * `a` without sending them, recording (performance.now()) when each call of
 * `method` started.
 */
function answerWith(method: string, count: number, a: () => Answer, starts: number[] = []): Interceptor {
  let remaining = count;
  return (options, nextCall) => {
    if (!options.method_definition.path.endsWith(`/${method}`)) return new InterceptingCall(nextCall(options));
    starts.push(performance.now());
    if (remaining-- <= 0) return new InterceptingCall(nextCall(options));
    return new InterceptingCall(nextCall(options), {
      start(_metadata, listener) {
        setImmediate(() => listener.onReceiveStatus(a()));
      },
      sendMessage() {},
      halfClose() {},
    });
  };
}

const gaps = (stamps: number[]) => stamps.slice(1).map((t, i) => t - stamps[i]);

describe("errors: decoding", () => {
  test("OPERATION_BUSY: OperationBusyError, transient, with the RetryInfo delay", () => {
    const error = typed(busyAnswer(200));
    assert.ok(error instanceof OperationBusyError && error instanceof UnavailableError);
    assert.equal(error.reason, "OPERATION_BUSY");
    assert.equal(error.code, GrpcStatus.UNAVAILABLE);
    assert.equal(error.retryDelayMs, 200);
    assert.equal(error.transient, true);
    assert.equal(error.name, "OperationBusyError");
    // The raw status says the same.
    const decoded = decodeRpcStatus(busyAnswer(1_250).metadata.get(STATUS_DETAILS_KEY)[0] as Buffer);
    assert.equal(decoded.errorInfo?.reason, "OPERATION_BUSY");
    assert.equal(decoded.retryDelayMs, 1_250);
  });

  test("RATE_LIMITED: RateLimitedError, transient, with the delay until the next admitted call", () => {
    const error = typed(
      answer(GrpcStatus.RESOURCE_EXHAUSTED, "the namespace's limit of 5 calls per second on this server is reached", [
        [ERROR_INFO, errorInfo("RATE_LIMITED", { callsPerSecond: "5" })],
        [RETRY_INFO, retryInfo(150)],
      ]),
    );
    assert.ok(error instanceof RateLimitedError && error instanceof UnavailableError);
    assert.equal(error.callsPerSecond, 5);
    assert.equal(error.retryDelayMs, 150);
    assert.equal(error.transient, true);
  });

  test("TOO_MANY_WAITERS: TooManyWaitersError, transient, with the replica's limit and the server's delay", () => {
    const error = typed(
      answer(GrpcStatus.RESOURCE_EXHAUSTED, "the replica holds 10000 waiting calls", [
        [ERROR_INFO, errorInfo("TOO_MANY_WAITERS", { limit: "10000" })],
        [RETRY_INFO, retryInfo(1_000)],
      ]),
    );
    assert.ok(error instanceof TooManyWaitersError && error instanceof UnavailableError);
    assert.equal(error.limit, 10_000);
    assert.equal(error.retryDelayMs, 1_000);
    assert.equal(error.transient, true);
  });

  test("OPERATION_EXISTS: OperationExistsError with the registered operation's status, not transient", () => {
    const error = typed(
      answer(GrpcStatus.ALREADY_EXISTS, "the key is registered", [
        [ERROR_INFO, errorInfo("OPERATION_EXISTS", { currentStatus: "OPERATION_STATUS_IN_PROGRESS" })],
      ]),
    );
    assert.ok(error instanceof OperationExistsError);
    assert.equal(error.currentStatus, OperationStatus.OPERATION_STATUS_IN_PROGRESS);
    assert.equal(error.transient, false);
    assert.ok(!isTransient(error));
  });

  test("OPERATION_BUSY through a real call (an interceptor answers it)", T, async () => {
    const busy = new OpregClient(server.address, { clientOptions: { interceptors: [answerWith("Claim", 1, busyAnswer)] } });
    try {
      await assert.rejects(
        busy.claim({ namespace: ns, operationKey: key("busy"), owner: "o", parameters: PARAMS }),
        (error: unknown) => error instanceof OperationBusyError && error.retryDelayMs === 200 && isTransient(error),
      );
    } finally {
      busy.close();
    }
  });

  test("STORE_UNAVAILABLE and OVERLOADED carry their RetryInfo; no RetryInfo, no delay", () => {
    const store = typed(
      answer(GrpcStatus.UNAVAILABLE, "the store is unavailable", [
        [ERROR_INFO, errorInfo("STORE_UNAVAILABLE")],
        [RETRY_INFO, retryInfo(1_000)],
      ]),
    );
    assert.ok(store instanceof UnavailableError && !(store instanceof OperationBusyError));
    assert.equal(store.retryDelayMs, 1_000);
    const overloaded = typed(
      answer(GrpcStatus.UNAVAILABLE, "overloaded", [[ERROR_INFO, errorInfo("OVERLOADED")], [RETRY_INFO, retryInfo(200)]]),
    );
    assert.ok(overloaded instanceof UnavailableError && overloaded.retryDelayMs === 200);
    const refused = typed(answer(GrpcStatus.UNAVAILABLE, "No connection established"));
    assert.ok(refused instanceof UnavailableError && refused.transient);
    assert.equal(refused.retryDelayMs, undefined);
  });

  test("DEADLINE_EXCEEDED inside the server is transient", () => {
    const error = typed(
      answer(GrpcStatus.DEADLINE_EXCEEDED, "the caller's deadline passed", [[ERROR_INFO, errorInfo("DEADLINE_EXCEEDED")]]),
    );
    assert.ok(error instanceof DeadlineExceededError && error.transient);
    assert.equal(error.reason, "DEADLINE_EXCEEDED");
  });

  test('a server\'s CANCELLED "Timeout expired" is transient; any other CANCELLED is not', () => {
    const timeout = typed(answer(GrpcStatus.CANCELLED, "Timeout expired"));
    assert.ok(timeout instanceof DeadlineExceededError);
    assert.equal(timeout.code, GrpcStatus.CANCELLED);
    assert.equal(timeout.transient, true);
    assert.ok(isTransient(timeout));
    for (const message of ["Cancelled on client", "Call cancelled", "timeout expired", ""]) {
      const cancelled = typed(answer(GrpcStatus.CANCELLED, message));
      assert.equal(cancelled.constructor, OpregError, message);
      assert.equal(cancelled.transient, false, message);
      assert.ok(!isTransient(cancelled));
    }
  });

  test("withRetries retries a server timeout, not a CANCELLED the client caused", T, async () => {
    const ctx = { deadlineAt: Date.now() + 5_000, callTimeoutMs: 1_000, initialMs: 1, maxMs: 2 };
    let calls = 0;
    const value = await withRetries(
      "timeout",
      async () => {
        if (calls++ === 0) throw typed(answer(GrpcStatus.CANCELLED, "Timeout expired"));
        return "ok";
      },
      ctx,
    );
    assert.equal(value, "ok");
    assert.equal(calls, 2);
    calls = 0;
    await assert.rejects(
      withRetries(
        "cancelled",
        async () => {
          calls++;
          throw typed(answer(GrpcStatus.CANCELLED, "Cancelled on client"));
        },
        ctx,
      ),
      (error: unknown) => error instanceof OpregError && error.code === GrpcStatus.CANCELLED,
    );
    assert.equal(calls, 1);
  });

  test("MESSAGE_TOO_LARGE: MessageTooLargeError with its limit, not transient", () => {
    const error = typed(
      answer(GrpcStatus.RESOURCE_EXHAUSTED, "the request message is larger than the 589824 bytes this method accepts", [
        [ERROR_INFO, errorInfo("MESSAGE_TOO_LARGE", { limit: "589824" })],
      ]),
    );
    assert.ok(error instanceof MessageTooLargeError);
    assert.equal(error.limit, 589_824);
    assert.equal(error.transient, false);
    assert.equal(error.retryDelayMs, undefined);
    const noLimit = typed(answer(GrpcStatus.RESOURCE_EXHAUSTED, "too large", [[ERROR_INFO, errorInfo("MESSAGE_TOO_LARGE")]]));
    assert.ok(noLimit instanceof MessageTooLargeError && noLimit.limit === undefined);
  });

});

describe("errors: the helpers honour RetryInfo", () => {
  test("runOnce waits the RetryInfo delay of OPERATION_BUSY", T, async () => {
    const starts: number[] = [];
    const busy = new OpregClient(server.address, {
      clientOptions: { interceptors: [answerWith("Claim", 2, () => busyAnswer(300), starts)] },
    });
    try {
      // A backoff far below the delay: the waits come from the RetryInfo.
      const result = await busy.runOnce(ns, key("busy"), PARAMS, () => "ok", { backoff: { initialMs: 1, maxMs: 2 } });
      assert.equal(result.text, "ok");
    } finally {
      busy.close();
    }
    assert.equal(starts.length, 3);
    assert.ok(gaps(starts).every((g) => g >= 295 && g < 1_500), String(gaps(starts)));
  });

  test("a renewal answered OPERATION_BUSY is retried after the RetryInfo delay", T, async () => {
    const starts: number[] = [];
    const busy = new OpregClient(server.address, {
      clientOptions: { interceptors: [answerWith("Renew", 1, () => busyAnswer(300), starts)] },
    });
    try {
      const result = await busy.runOnce(ns, key("busy-renew"), PARAMS, async () => {
        await sleep(900);
        return "kept";
      }, { leaseTtlMs: 5_000, renewEveryMs: 100, backoff: { initialMs: 1, maxMs: 2 } });
      assert.equal(result.text, "kept");
    } finally {
      busy.close();
    }
    assert.ok(starts.length >= 3, `${starts.length} renewals`);
    const afterBusy = gaps(starts)[0];
    assert.ok(afterBusy >= 295 && afterBusy < 1_500, `retried after ${afterBusy} ms`);
  });

  test("a RetryInfo delay past the overall deadline fails at once with DeadlineExceededError", T, async () => {
    const starts: number[] = [];
    const busy = new OpregClient(server.address, {
      clientOptions: { interceptors: [answerWith("Claim", 100, () => busyAnswer(5_000), starts)] },
    });
    const started = Date.now();
    try {
      await assert.rejects(
        busy.runOnce(ns, key("busy-long"), PARAMS, () => "never", { timeoutMs: 1_000, backoff: { initialMs: 1, maxMs: 2 } }),
        (error: unknown) => error instanceof DeadlineExceededError && (error as Error).cause instanceof OperationBusyError,
      );
    } finally {
      busy.close();
    }
    assert.ok(Date.now() - started < 1_000, "not slept past the deadline");
    assert.equal(starts.length, 1);
  });

  test("the worker waits the RetryInfo delay after a busy ClaimDue", T, async () => {
    const namespace = `errors-worker-${randomUUID()}`;
    await seedRetry(client, namespace, "debit:busy", PARAMS, { retryAfterMs: 50 });
    await sleep(100);
    const starts: number[] = [];
    const busy = new OpregClient(server.address, {
      clientOptions: { interceptors: [answerWith("ClaimDue", 2, () => busyAnswer(300), starts)] },
    });
    const controller = new AbortController();
    const logger = capturingLogger();
    let handled = false;
    const worker = new Worker(busy, {
      namespace,
      defaultHandler: () => {
        handled = true;
        return "ok";
      },
      pollIntervalMs: 100,
      backoff: { initialMs: 1, maxMs: 2 },
      logger,
      signal: controller.signal,
    });
    const running = worker.run();
    try {
      await waitFor("the handler ran", () => handled, 10_000);
    } finally {
      controller.abort();
      await running;
      busy.close();
    }
    assert.ok(starts.length >= 3);
    const first = gaps(starts.slice(0, 3));
    assert.ok(first.every((g) => g >= 295 && g < 1_500), String(first));
    const retried = logger.lines.filter((l) => l.message === "claim due failed, retrying");
    assert.equal(retried.length, 2);
    assert.ok(retried.every((l) => (l.fields.waitMs as number) >= 300));
  });
});

describe("errors: MESSAGE_TOO_LARGE on the real server", () => {
  test("a Claim over the message limit is MessageTooLargeError with the limit", T, async () => {
    const k = key("huge");
    const error = await client.claim({ namespace: ns, operationKey: k, owner: "o", parameters: TOO_LARGE }).then(
      () => assert.fail("a 1 MB Claim was accepted"),
      (e: unknown) => e,
    );
    assert.ok(error instanceof MessageTooLargeError, String(error));
    assert.equal(error.code, GrpcStatus.RESOURCE_EXHAUSTED);
    assert.equal(error.reason, "MESSAGE_TOO_LARGE");
    assert.ok(error.limit !== undefined && error.limit > 500_000 && error.limit < 1_000_000, `limit ${error.limit}`);
    assert.ok(error.message.includes(String(error.limit)));
    assert.equal(error.transient, false);
    await assert.rejects(client.lookup({ namespace: ns, operationKey: k }), NotFoundError);
  });

  test("runOnce does not retry it", T, async () => {
    const starts: number[] = [];
    const counting = new OpregClient(server.address, { clientOptions: { interceptors: [answerWith("Claim", 0, busyAnswer, starts)] } });
    let ran = false;
    try {
      await assert.rejects(
        counting.runOnce(
          ns,
          key("huge"),
          TOO_LARGE,
          () => {
            ran = true;
            return "never";
          },
          { timeoutMs: 20_000 },
        ),
        (error: unknown) => error instanceof MessageTooLargeError && error.limit !== undefined,
      );
    } finally {
      counting.close();
    }
    assert.equal(starts.length, 1, "one Claim");
    assert.equal(ran, false);
  });
});
