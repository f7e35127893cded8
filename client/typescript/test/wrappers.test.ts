// Every RPC wrapper against the real server, and the typed errors it raises.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { resolve } from "node:path";

import {
  AlreadyCompensatedError,
  AlreadyCompletedError,
  ClaimOutcome,
  DeadlineExceededError,
  durationFromMillis,
  ExecutionKind,
  ExecutionOutcome,
  GrpcStatus,
  InvalidArgumentError,
  LeaseNotHeldError,
  NotFoundError,
  NothingToCompensateError,
  OperationExistsError,
  OperationStatus,
  OpregClient,
  OpregError,
  ParameterConflictError,
  parametersDigest,
  ReusePolicy,
  StaleFencingTokenError,
  toHex,
  UnavailableError,
} from "../src";
import { startServer, type TestServer } from "./server";

let server: TestServer;
let client: OpregClient;
const ns = `wrappers-${randomUUID()}`;
const key = (name: string) => `${name}-${randomUUID()}`;
const T = { timeout: 30_000 };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

before(async () => {
  server = await startServer();
  client = new OpregClient(server.address, { defaultTimeoutMs: 10_000 });
});

after(async () => {
  client?.close();
  await server?.stop();
});

describe("wrappers", () => {
  test("claim, renew, fencedWrite, getResource, complete, lookup", T, async () => {
    const k = key("order");
    const parameters = { account: "A", amount: 100, note: null };
    const claimed = await client.claim({ namespace: ns, operationKey: k, parameters, owner: "w1", leaseTtl: durationFromMillis(5_000) });
    assert.equal(claimed.outcome, ClaimOutcome.CLAIM_OUTCOME_ACQUIRED);
    const token = claimed.lease!.fencingToken;
    assert.equal(typeof token, "bigint");
    assert.equal(claimed.lease!.owner, "w1");
    assert.equal(toHex(claimed.operation!.parametersDigest), toHex(parametersDigest(parameters)));

    const renewed = await client.renew({ namespace: ns, operationKey: k, owner: "w1", fencingToken: token, leaseTtl: durationFromMillis(5_000) });
    assert.equal(renewed.lease!.fencingToken, token);
    assert.ok(renewed.lease!.expiresAt instanceof Date);

    const written = await client.fencedWrite({ namespace: ns, resource: `balance-${k}`, operationKey: k, fencingToken: token, value: Buffer.from("900") });
    assert.equal(written.fence, token);
    assert.equal(written.version, 1n);
    const resource = await client.getResource({ namespace: ns, resource: `balance-${k}` });
    assert.equal(Buffer.from(resource.value).toString(), "900");
    assert.equal(resource.operationKey, k);

    const completed = await client.complete({ namespace: ns, operationKey: k, fencingToken: token, success: { result: Buffer.from("ok"), resultRef: "ref-1" } });
    assert.equal(completed.operation!.status, OperationStatus.OPERATION_STATUS_SUCCEEDED);
    // Repeating the same report is safe and answers the same.
    const again = await client.complete({ namespace: ns, operationKey: k, fencingToken: token, success: { result: Buffer.from("ok"), resultRef: "ref-1" } });
    assert.equal(again.operation!.status, OperationStatus.OPERATION_STATUS_SUCCEEDED);

    const found = await client.lookup({ namespace: ns, operationKey: k, includeExecutions: true });
    assert.equal(Buffer.from(found.operation!.result).toString(), "ok");
    assert.equal(found.executions.length, 1);
    assert.equal(found.executions[0].kind, ExecutionKind.EXECUTION_KIND_FIRST);
    assert.equal(found.executions[0].outcome, ExecutionOutcome.EXECUTION_OUTCOME_SUCCEEDED);

    const replay = await client.claim({ namespace: ns, operationKey: k, parametersDigest: parametersDigest({ amount: 100, account: "A" }), owner: "w2" });
    assert.equal(replay.outcome, ClaimOutcome.CLAIM_OUTCOME_REPLAYED);
  });

  test("batchClaim and batchComplete answer each item in request order", T, async () => {
    const [a, b] = [key("batch-a"), key("batch-b")];
    const claimed = await client.batchClaim({
      claims: [
        { namespace: ns, operationKey: a, parameters: { n: 1 }, owner: "w1" },
        { namespace: ns, operationKey: b, parameters: { n: 2 }, owner: "w1" },
        // The first key again, for another owner while w1's lease is live.
        { namespace: ns, operationKey: a, parameters: { n: 1 }, owner: "w2" },
      ],
    });
    assert.deepEqual(
      claimed.results.map((r) => r.claim?.outcome),
      [ClaimOutcome.CLAIM_OUTCOME_ACQUIRED, ClaimOutcome.CLAIM_OUTCOME_ACQUIRED, ClaimOutcome.CLAIM_OUTCOME_IN_PROGRESS],
    );

    const completed = await client.batchComplete({
      completions: [a, b].map((operationKey, i) => ({
        namespace: ns,
        operationKey,
        fencingToken: claimed.results[i].claim!.lease!.fencingToken,
        success: {},
      })),
    });
    assert.deepEqual(
      completed.results.map((r) => r.completed?.operation?.status),
      [OperationStatus.OPERATION_STATUS_SUCCEEDED, OperationStatus.OPERATION_STATUS_SUCCEEDED],
    );
  });

  test("batchClaim: an invalid claim is an error result, the call still succeeds", T, async () => {
    const { results } = await client.batchClaim({
      claims: [
        { namespace: ns, operationKey: "", parameters: {}, owner: "w" },
        { namespace: ns, operationKey: key("batch-valid"), parameters: {}, owner: "w" },
      ],
    });
    assert.equal(results[0].claim, undefined);
    assert.equal(results[0].error?.code, GrpcStatus.INVALID_ARGUMENT);
    assert.equal(results[1].claim?.outcome, ClaimOutcome.CLAIM_OUTCOME_ACQUIRED);
  });

  test("the server stores the digest of every shared vector", T, async () => {
    const vectors: { name: string; input: string; sha256: string }[] = JSON.parse(
      readFileSync(resolve(__dirname, "..", "..", "..", "testdata", "parameter_digests.json"), "utf8"),
    );
    for (const vector of vectors) {
      const parameters = JSON.parse(vector.input);
      const claimed = await client.claim({ namespace: ns, operationKey: key("vector"), parameters, owner: "w" });
      assert.equal(toHex(claimed.operation!.parametersDigest), vector.sha256, vector.name);
      assert.equal(toHex(parametersDigest(parameters)), vector.sha256, vector.name);
    }
  });

  test("lookup waits until the status moves; claim's reuse policies", T, async () => {
    const k = key("reuse");
    const request = { namespace: ns, operationKey: k, parameters: { amount: 1 }, owner: "w1", leaseTtl: durationFromMillis(5_000) };
    const claimed = await client.claim(request);
    const looking = client.lookup(
      { namespace: ns, operationKey: k, wait: durationFromMillis(5_000), changedFrom: OperationStatus.OPERATION_STATUS_IN_PROGRESS },
      { timeoutMs: 10_000 },
    );
    await sleep(200);
    await client.complete({ namespace: ns, operationKey: k, fencingToken: claimed.lease!.fencingToken, failure: { code: "DECLINED", message: "no" } });
    const moved = await looking;
    assert.equal(moved.operation!.status, OperationStatus.OPERATION_STATUS_FAILED);
    assert.ok(moved.waited !== undefined, "a server that waits says how long");

    // REPLAY (the default) replays the failure; AFTER_FAILURE starts it again; REJECT_EXISTING refuses the key.
    assert.equal((await client.claim({ ...request, owner: "w2" })).outcome, ClaimOutcome.CLAIM_OUTCOME_REPLAYED);
    const reused = await client.claim({ ...request, owner: "w2", reuse: ReusePolicy.REUSE_POLICY_AFTER_FAILURE });
    assert.equal(reused.outcome, ClaimOutcome.CLAIM_OUTCOME_ACQUIRED);
    assert.ok(reused.lease!.fencingToken > claimed.lease!.fencingToken);
    const refused = await client.claim({ ...request, owner: "w3", reuse: ReusePolicy.REUSE_POLICY_REJECT_EXISTING }).catch((e) => e);
    assert.ok(refused instanceof OperationExistsError, String(refused));
    assert.equal(refused.currentStatus, OperationStatus.OPERATION_STATUS_IN_PROGRESS);
    const found = await client.lookup({ namespace: ns, operationKey: k, includeExecutions: true });
    assert.equal(found.executions.at(-1)!.kind, ExecutionKind.EXECUTION_KIND_REUSE);
  });

  test("PARAMETER_CONFLICT -> ParameterConflictError with digests and fields", T, async () => {
    const k = key("conflict");
    await client.claim({ namespace: ns, operationKey: k, parameters: { account: "A", amount: 100 }, owner: "w1" });
    const error = await client
      .claim({ namespace: ns, operationKey: k, parameters: { account: "A", amount: 101 }, owner: "w1" })
      .catch((e) => e);
    assert.ok(error instanceof ParameterConflictError, String(error));
    assert.ok(error instanceof OpregError);
    assert.equal(error.reason, "PARAMETER_CONFLICT");
    assert.deepEqual(error.differingFields, ["amount"]);
    assert.equal(error.storedDigest, toHex(parametersDigest({ account: "A", amount: 100 })));
    assert.equal(error.requestDigest, toHex(parametersDigest({ account: "A", amount: 101 })));
  });

  test("INVALID_ARGUMENT -> InvalidArgumentError with field violations", T, async () => {
    const error = await client.claim({ namespace: "", operationKey: " x", parameters: {}, owner: "" }).catch((e) => e);
    assert.ok(error instanceof InvalidArgumentError, String(error));
    const fields = error.fieldViolations.map((v: { field: string }) => v.field).sort();
    assert.ok(fields.includes("namespace"), JSON.stringify(error.fieldViolations));
    assert.ok(fields.includes("operation_key"), JSON.stringify(error.fieldViolations));
    assert.ok(fields.includes("owner"), JSON.stringify(error.fieldViolations));
    for (const v of error.fieldViolations) assert.ok(v.description.length > 0);
  });

  test("NOT_FOUND -> NotFoundError", T, async () => {
    const op = await client.lookup({ namespace: ns, operationKey: key("missing") }).catch((e) => e);
    assert.ok(op instanceof NotFoundError);
    assert.equal(op.reason, "OPERATION_NOT_FOUND");
    const res = await client.getResource({ namespace: ns, resource: key("missing") }).catch((e) => e);
    assert.ok(res instanceof NotFoundError);
    assert.equal(res.reason, "RESOURCE_NOT_FOUND");
  });

  test("stale tokens, lease not held, already completed", T, async () => {
    const k = key("fencing");
    const first = await client.claim({ namespace: ns, operationKey: k, parameters: { n: 1 }, owner: "old", leaseTtl: durationFromMillis(1_000) });
    const oldToken = first.lease!.fencingToken;
    await client.fencedWrite({ namespace: ns, resource: `r-${k}`, operationKey: k, fencingToken: oldToken, value: Buffer.from("a") });

    const notHeld = await client.renew({ namespace: ns, operationKey: k, owner: "someone-else", fencingToken: oldToken }).catch((e) => e);
    assert.ok(notHeld instanceof LeaseNotHeldError, String(notHeld));

    await sleep(1_300);
    const takeover = await client.claim({ namespace: ns, operationKey: k, parameters: { n: 1 }, owner: "new" });
    assert.equal(takeover.outcome, ClaimOutcome.CLAIM_OUTCOME_ACQUIRED);
    assert.equal(takeover.lease!.takeover, true);
    const newToken = takeover.lease!.fencingToken;
    assert.ok(newToken > oldToken);

    const stale = await client.fencedWrite({ namespace: ns, resource: `r-${k}`, operationKey: k, fencingToken: oldToken, value: Buffer.from("b") }).catch((e) => e);
    assert.ok(stale instanceof StaleFencingTokenError, String(stale));
    assert.equal(stale.presentedToken, oldToken);
    assert.equal(stale.currentToken, newToken);
    const staleRenew = await client.renew({ namespace: ns, operationKey: k, owner: "old", fencingToken: oldToken }).catch((e) => e);
    assert.ok(staleRenew instanceof StaleFencingTokenError, String(staleRenew));

    await client.complete({ namespace: ns, operationKey: k, fencingToken: newToken, success: { result: Buffer.from("x") } });
    const different = await client.complete({ namespace: ns, operationKey: k, fencingToken: newToken, failure: { code: "NO", message: "no" } }).catch((e) => e);
    assert.ok(different instanceof AlreadyCompletedError, String(different));
    assert.equal(different.fencingToken, newToken);
  });

  test("compensation errors", T, async () => {
    const failed = key("failed-original");
    const c1 = await client.claim({ namespace: ns, operationKey: failed, parameters: { n: 1 }, owner: "w" });
    await client.complete({ namespace: ns, operationKey: failed, fencingToken: c1.lease!.fencingToken, failure: { code: "DECLINED", message: "declined" } });
    const nothing = await client.claim({ namespace: ns, operationKey: key("undo"), parameters: { n: 1 }, owner: "w", compensates: failed }).catch((e) => e);
    assert.ok(nothing instanceof NothingToCompensateError, String(nothing));

    const ok = key("ok-original");
    const c2 = await client.claim({ namespace: ns, operationKey: ok, parameters: { n: 1 }, owner: "w" });
    await client.complete({ namespace: ns, operationKey: ok, fencingToken: c2.lease!.fencingToken, success: {} });
    const undo = key("undo");
    const first = await client.claim({ namespace: ns, operationKey: undo, parameters: { n: -1 }, owner: "w", compensates: ok });
    assert.equal(first.outcome, ClaimOutcome.CLAIM_OUTCOME_ACQUIRED);
    const twice = await client.claim({ namespace: ns, operationKey: key("undo-again"), parameters: { n: -1 }, owner: "w", compensates: ok }).catch((e) => e);
    assert.ok(twice instanceof AlreadyCompensatedError, String(twice));
    assert.equal(twice.compensatedBy, undo);
  });

  test("AbortSignal and deadline", T, async () => {
    const aborted = AbortSignal.abort(new Error("stop"));
    await assert.rejects(client.lookup({ namespace: ns, operationKey: "x" }, { signal: aborted }), /stop/);

    const past = await client.lookup({ namespace: ns, operationKey: "x" }, { deadline: Date.now() - 1 }).catch((e) => e);
    assert.ok(past instanceof DeadlineExceededError, String(past));
    assert.ok(past.transient);

    const controller = new AbortController();
    const pending = client.claim({ namespace: ns, operationKey: key("abort"), parameters: {}, owner: "w" }, { signal: controller.signal });
    controller.abort();
    const error = await pending.catch((e) => e);
    assert.equal(error.name, "AbortError");
  });

  test("transport failure -> UnavailableError", T, async () => {
    const nowhere = new OpregClient("127.0.0.1:1");
    try {
      const error = await nowhere.lookup({ namespace: ns, operationKey: "x" }, { timeoutMs: 5_000 }).catch((e) => e);
      assert.ok(error instanceof UnavailableError, String(error));
      assert.ok(error.transient);
      assert.equal(error.reason, undefined);
    } finally {
      nowhere.close();
    }
  });
});
