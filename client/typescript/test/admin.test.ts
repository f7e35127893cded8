// OperationAdmin wrappers, the new Lookup flags and ClaimDue against the real server.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { randomUUID } from "node:crypto";

import {
  AdminAction,
  BusinessError,
  ClaimOutcome,
  durationFromMillis,
  GrpcStatus,
  InvalidArgumentError,
  InvalidTransitionError,
  NotFoundError,
  OperationStatus,
  OpregClient,
  type AdminActionResult,
  type Operation,
} from "../src";
import { seedClaimed, seedDead, seedRetry, seedSucceeded, seedUnknown, sleep } from "./fixtures";
import { startServer, type TestServer } from "./server";

let server: TestServer;
let client: OpregClient;
const ns = `admin-${randomUUID()}`;
const key = (name: string) => `${name}-${randomUUID()}`;
const T = { timeout: 30_000 };
const who = { operator: "alice", reason: "ticket OPS-1" };

before(async () => {
  server = await startServer();
  client = new OpregClient(server.address, { defaultTimeoutMs: 10_000 });
});

after(async () => {
  client?.close();
  await server?.stop();
});

describe("admin", () => {
  test("hold -> Claim answers HELD, ClaimDue skips it -> release -> it runs", T, async () => {
    const space = `${ns}-hold`;
    const k = key("hold");
    await seedRetry(client, space, k, { n: 1 });
    const held = await client.holdOperation({ namespace: space, operationKey: k, ...who });
    assert.equal(held.operation!.held, true);
    assert.ok(held.operation!.heldAt instanceof Date);
    assert.equal(held.operation!.status, OperationStatus.OPERATION_STATUS_RETRY_SCHEDULED);
    assert.equal(held.audit!.action, AdminAction.ADMIN_ACTION_HOLD);
    assert.equal(held.audit!.operator, "alice");
    assert.equal(held.audit!.reason, "ticket OPS-1");
    assert.equal(held.audit!.heldBefore, false);
    assert.equal(held.audit!.heldAfter, true);

    const claimed = await client.claim({ namespace: space, operationKey: k, parameters: { n: 1 }, owner: "w" });
    assert.equal(claimed.outcome, ClaimOutcome.CLAIM_OUTCOME_HELD);
    assert.ok(claimed.retryAfter !== undefined, "HELD carries retry_after");
    assert.equal(claimed.lease, undefined);
    await sleep(200); // the retry is due by now, but held
    const due = await client.claimDue({ namespace: space, owner: "w", leaseTtl: durationFromMillis(5_000) });
    assert.deepEqual(due.operations, [], "ClaimDue skips a held operation");

    const released = await client.releaseOperation({ namespace: space, operationKey: k, ...who, reason: "checked" });
    assert.equal(released.operation!.held, false);
    assert.equal(released.operation!.status, OperationStatus.OPERATION_STATUS_RETRY_SCHEDULED, "back to the status it had");
    assert.equal(released.audit!.action, AdminAction.ADMIN_ACTION_RELEASE);
    const after = await client.claimDue({ namespace: space, owner: "w", leaseTtl: durationFromMillis(5_000) });
    assert.deepEqual(after.operations.map((d) => [d.outcome, d.operation?.operationKey]), [[ClaimOutcome.CLAIM_OUTCOME_ACQUIRED, k]]);
    assert.deepEqual(after.operations[0].operation!.parameters, { n: 1 }, "ClaimDue fills the parameters");

    const found = await client.lookup({ namespace: space, operationKey: k, includeAudit: true });
    assert.deepEqual(found.audit.map((a) => a.action), [AdminAction.ADMIN_ACTION_HOLD, AdminAction.ADMIN_ACTION_RELEASE], "oldest first");
    const answers: AdminActionResult[] = [held, released]; // each action's own response is an AdminActionResult
    assert.deepEqual(found.audit, answers.map((a) => a.audit), "each action answered with the audit row it wrote");
    assert.deepEqual(found.audit.map((a) => a.reason), ["ticket OPS-1", "checked"]);
    const without = await client.lookup({ namespace: space, operationKey: k });
    assert.deepEqual(without.audit, [], "audit only when asked for");
  });

  test("resolve an UNKNOWN operation: later Claims replay the resolution", T, async () => {
    const paid = key("paid");
    await seedUnknown(client, ns, paid, { n: 1 }, "psp-1");
    const resolved = await client.resolveOperation({
      namespace: ns,
      operationKey: paid,
      ...who,
      success: { result: Buffer.from("paid, per the PSP's report"), resultRef: "psp-1" },
    });
    assert.equal(resolved.operation!.status, OperationStatus.OPERATION_STATUS_SUCCEEDED);
    assert.equal(resolved.audit!.action, AdminAction.ADMIN_ACTION_RESOLVE);
    assert.equal(resolved.audit!.statusBefore, OperationStatus.OPERATION_STATUS_UNKNOWN);
    assert.equal(resolved.audit!.statusAfter, OperationStatus.OPERATION_STATUS_SUCCEEDED);
    const replay = await client.runOnce(ns, paid, { n: 1 }, () => "never");
    assert.equal(replay.replayed, true);
    assert.equal(replay.text, "paid, per the PSP's report");

    const declined = key("declined");
    await seedUnknown(client, ns, declined, { n: 1 }, "psp-2");
    const failed = await client.resolveOperation({ namespace: ns, operationKey: declined, ...who, failure: { code: "DECLINED", message: "declined at the PSP" } });
    assert.equal(failed.operation!.status, OperationStatus.OPERATION_STATUS_FAILED);
    const error = await client.runOnce(ns, declined, { n: 1 }, () => "never").catch((e) => e);
    assert.ok(error instanceof BusinessError && error.replayed, String(error));
    assert.equal(error.code, "DECLINED");
  });

  test("requeue a DEAD operation: due now with a fresh budget, the revision audited", T, async () => {
    const k = key("dead");
    await seedDead(client, ns, k, { n: 1 });
    const requeued = await client.requeueOperation({
      namespace: ns,
      operationKey: k,
      ...who,
      revision: "account unblocked",
      retryPolicy: { maxAttempts: 3, initialBackoff: durationFromMillis(100), maxBackoff: durationFromMillis(1_000), deadline: durationFromMillis(600_000) },
    });
    assert.equal(requeued.operation!.status, OperationStatus.OPERATION_STATUS_RETRY_SCHEDULED);
    assert.equal(requeued.audit!.action, AdminAction.ADMIN_ACTION_REQUEUE);
    assert.equal(requeued.audit!.revision, "account unblocked");
    assert.equal(requeued.audit!.statusBefore, OperationStatus.OPERATION_STATUS_DEAD);
    const result = await client.runOnce(ns, k, { n: 1 }, () => "ran after the requeue", { timeoutMs: 10_000 });
    assert.equal(result.replayed, false);
    assert.equal(result.text, "ran after the requeue");
  });

  test("an action the status does not allow -> InvalidTransitionError with the current status", T, async () => {
    const k = key("done");
    await seedSucceeded(client, ns, k, { n: 1 }, "ok");
    const requeue = await client.requeueOperation({ namespace: ns, operationKey: k, ...who, revision: "r" }).catch((e) => e);
    assert.ok(requeue instanceof InvalidTransitionError, String(requeue));
    assert.equal(requeue.code, GrpcStatus.FAILED_PRECONDITION);
    assert.equal(requeue.reason, "INVALID_TRANSITION");
    assert.equal(requeue.currentStatus, OperationStatus.OPERATION_STATUS_SUCCEEDED);
    assert.equal(requeue.held, false);
    const hold = await client.holdOperation({ namespace: ns, operationKey: k, ...who }).catch((e) => e);
    assert.ok(hold instanceof InvalidTransitionError, String(hold));
    assert.equal(hold.currentStatus, OperationStatus.OPERATION_STATUS_SUCCEEDED);

    const live = key("live");
    await seedRetry(client, ns, live, { n: 1 });
    await client.holdOperation({ namespace: ns, operationKey: live, ...who });
    const notDead = await client.requeueOperation({ namespace: ns, operationKey: live, ...who, revision: "r" }).catch((e) => e);
    assert.ok(notDead instanceof InvalidTransitionError, String(notDead));
    assert.equal(notDead.currentStatus, OperationStatus.OPERATION_STATUS_RETRY_SCHEDULED);
    assert.equal(notDead.held, true);
  });

  test("missing operator or reason -> InvalidArgumentError naming the field; unknown key -> NotFoundError", T, async () => {
    const k = key("unnamed");
    await seedRetry(client, ns, k, { n: 1 });
    const noOperator = await client.holdOperation({ namespace: ns, operationKey: k, operator: "", reason: "r" }).catch((e) => e);
    assert.ok(noOperator instanceof InvalidArgumentError, String(noOperator));
    assert.deepEqual(noOperator.fieldViolations.map((v) => v.field), ["operator"]);
    const noReason = await client.releaseOperation({ namespace: ns, operationKey: k, operator: "alice", reason: "" }).catch((e) => e);
    assert.ok(noReason instanceof InvalidArgumentError, String(noReason));
    assert.deepEqual(noReason.fieldViolations.map((v) => v.field), ["reason"]);
    const neither = await client.resolveOperation({ namespace: ns, operationKey: k, success: {} }).catch((e) => e);
    assert.ok(neither instanceof InvalidArgumentError, String(neither));
    assert.deepEqual(neither.fieldViolations.map((v) => v.field).sort(), ["operator", "reason"]);
    const found = await client.lookup({ namespace: ns, operationKey: k, includeAudit: true });
    assert.equal(found.operation!.held, false, "nothing was done");
    assert.deepEqual(found.audit, []);

    const missing = await client.holdOperation({ namespace: ns, operationKey: key("missing"), ...who }).catch((e) => e);
    assert.ok(missing instanceof NotFoundError, String(missing));
  });

  test("listOperations pages through the manual queue; filters by status and hold", T, async () => {
    const space = `${ns}-list`;
    const dead = [key("dead-a"), key("dead-b"), key("dead-c")];
    const unknown = [key("unknown-a"), key("unknown-b")];
    for (const k of dead) await seedDead(client, space, k, { k });
    for (const k of unknown) await seedUnknown(client, space, k, { k }, `ref-${k}`);
    await seedSucceeded(client, space, key("done"), { n: 1 }, "ok"); // finished: never in the queue
    await client.holdOperation({ namespace: space, operationKey: unknown[1], ...who });

    const keys = (operations: Operation[]) => operations.map((o) => o.operationKey);
    const pages: string[][] = [];
    let pageToken = "";
    do {
      const page = await client.listOperations({ namespace: space, pageSize: 2, pageToken });
      pages.push(keys(page.operations));
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
    assert.deepEqual(pages.map((p) => p.length), [2, 2, 1]);
    assert.deepEqual(pages.flat().sort(), [...dead, ...unknown].sort());

    const all: string[] = [];
    for await (const operation of client.listAllOperations({ namespace: space, pageSize: 2 })) all.push(operation.operationKey);
    assert.deepEqual(all, pages.flat(), "listAllOperations follows the same pages");

    const onlyDead = await client.listOperations({ namespace: space, statuses: [OperationStatus.OPERATION_STATUS_DEAD] });
    assert.deepEqual(keys(onlyDead.operations).sort(), [...dead].sort());
    assert.equal(onlyDead.nextPageToken, "");
    const heldOnly = await client.listOperations({ namespace: space, heldOnly: true });
    assert.deepEqual(keys(heldOnly.operations), [unknown[1]]);
  });

  test("listOperations refuses finished statuses: InvalidArgumentError naming `statuses`", T, async () => {
    const space = `${ns}-finished`;
    const done = key("done");
    await seedSucceeded(client, space, done, { n: 1 }, "ok");
    for (const finished of [OperationStatus.OPERATION_STATUS_SUCCEEDED, OperationStatus.OPERATION_STATUS_FAILED]) {
      const error = await client
        .listOperations({
          namespace: space,
          // @ts-expect-error UnfinishedStatus excludes SUCCEEDED and FAILED; sent anyway to check the server.
          statuses: [finished],
        })
        .catch((e) => e);
      assert.ok(error instanceof InvalidArgumentError, String(error));
      assert.equal(error.code, GrpcStatus.INVALID_ARGUMENT);
      assert.deepEqual(error.fieldViolations.map((v) => v.field), ["statuses"], OperationStatus[finished]);
    }
    const mixed = await client
      .listOperations({
        namespace: space,
        // @ts-expect-error as above, next to an allowed status
        statuses: [OperationStatus.OPERATION_STATUS_DEAD, OperationStatus.OPERATION_STATUS_SUCCEEDED],
      })
      .catch((e) => e);
    assert.ok(mixed instanceof InvalidArgumentError, String(mixed));
    assert.deepEqual(mixed.fieldViolations.map((v) => v.field), ["statuses"]);
    const found = await client.lookup({ namespace: space, operationKey: done });
    assert.equal(found.operation!.status, OperationStatus.OPERATION_STATUS_SUCCEEDED, "a finished operation is looked up by key");
  });

  test("lookup includeParameters returns the stored Struct", T, async () => {
    const k = key("params");
    const parameters = { account: "A", amount: 100, tags: ["x", "y"], nested: { ok: true } };
    await seedClaimed(client, ns, k, parameters);
    const withParameters = await client.lookup({ namespace: ns, operationKey: k, includeParameters: true });
    assert.deepEqual(withParameters.operation!.parameters, parameters);
    const without = await client.lookup({ namespace: ns, operationKey: k });
    assert.equal(without.operation!.parameters, undefined);
  });
});
