// The decisions of client/PROTOCOL.md that the shared vectors
// (client/testdata/decisions.json, run by test/decisions.test.ts) do not cover,
// on the pure functions of src/decide.ts (no server): what a Claim answer hands
// on, the worker's ClaimDue, the work's result, and errors that are no RPC's.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import {
  AlreadyCompletedError,
  BusinessError,
  ClaimOutcome,
  ClaimResponse,
  DeadlineExceededError,
  ErrorReason,
  ExecutionOutcome,
  fromServiceError,
  GrpcStatus,
  LookupResponse,
  OperationDeadError,
  OperationHeldError,
  OperationStatus,
  OpregError,
  OutcomeUnknownError,
  reasonName,
  ReconcileRequiredError,
  Reconciled,
  SentButUnconfirmedError,
  StaleFencingTokenError,
  TransientError,
  UnavailableError,
  durationFromMillis,
  type KnownErrorReason,
  type Operation,
} from "../src";
import {
  MAX_CLAIM_WAIT_MS,
  claimLeaseGrantedAt,
  claimWaitMs,
  decideCallInDoubt,
  decideClaimAnswer,
  decideCompleteError,
  decideDue,
  decideRecorded,
  decideRenewFailure,
  decideReport,
  isTransient,
  settledOfVerdict,
  type ClaimContext,
  type ReportKind,
} from "../src/decide";
import { ERROR_INFO, encodeErrorInfo, failedCall } from "./statusEncoding";

const lease = { owner: "me", fencingToken: 7n, expiresAt: undefined, attempt: 1, takeover: false };
const ctx = (over: Partial<ClaimContext> = {}): ClaimContext => ({
  hasReconcile: false,
  remainingMs: 20_000,
  pollIntervalMs: 1_000,
  random: 0.5,
  what: "test",
  ...over,
});
const op = (status: OperationStatus, over: Partial<Operation> = {}) => ({ namespace: "n", operationKey: "k", status, ...over }) as Operation;
const claim = (outcome: ClaimOutcome, over: Partial<ClaimResponse> = {}) => ClaimResponse.fromPartial({ outcome, ...over });

/** The typed error for a status `code` with an opreg ErrorInfo of `reason` (none when undefined). */
function refused(code: GrpcStatus, reason: KnownErrorReason | undefined, message = "refused"): OpregError {
  return fromServiceError(failedCall(code, message, reason === undefined ? [] : [[ERROR_INFO, encodeErrorInfo(reasonName(reason))]]));
}

describe("decide: Claim", () => {
  test("the lease and the remote ref are handed on: ACQUIRED runs the work; RECONCILE reconciles, or hands the lease back without a callback", () => {
    assert.deepEqual(decideClaimAnswer(claim(ClaimOutcome.CLAIM_OUTCOME_ACQUIRED, { lease }), ctx()), {
      kind: "execute",
      lease,
      step: { kind: "work" },
    });
    const operation = op(OperationStatus.OPERATION_STATUS_IN_PROGRESS, { remoteRef: "remote-1" });
    const response = claim(ClaimOutcome.CLAIM_OUTCOME_RECONCILE, { lease, operation });
    assert.deepEqual(decideClaimAnswer(response, ctx({ hasReconcile: true })), {
      kind: "execute",
      lease,
      step: { kind: "reconcile", remoteRef: "remote-1" },
    });
    assert.deepEqual(decideClaimAnswer(response, ctx()), { kind: "execute", lease, step: { kind: "handBack", remoteRef: "remote-1" } });
  });

  test("REPLAYED hands on the stored operation; DEAD raises it; HELD carries retry_after", () => {
    const replayed = claim(ClaimOutcome.CLAIM_OUTCOME_REPLAYED, { operation: op(OperationStatus.OPERATION_STATUS_SUCCEEDED, { result: Buffer.from("r") }) });
    assert.deepEqual(decideClaimAnswer(replayed, ctx()), { kind: "return", operation: replayed.operation });
    const deadAnswer = claim(ClaimOutcome.CLAIM_OUTCOME_DEAD, { operation: op(OperationStatus.OPERATION_STATUS_DEAD) });
    const dead = decideClaimAnswer(deadAnswer, ctx());
    assert.ok(dead.kind === "raise" && dead.error instanceof OperationDeadError && dead.error.operation === deadAnswer.operation);
    const held = decideClaimAnswer(claim(ClaimOutcome.CLAIM_OUTCOME_HELD, { retryAfter: durationFromMillis(60_000) }), ctx());
    assert.ok(held.kind === "raise" && held.error instanceof OperationHeldError && held.error.retryAfterMs === 60_000);
  });

  test("an answer without a lease, or without an outcome, is raised", () => {
    assert.equal(decideClaimAnswer(claim(ClaimOutcome.CLAIM_OUTCOME_ACQUIRED), ctx()).kind, "raise");
    assert.equal(decideClaimAnswer(claim(ClaimOutcome.CLAIM_OUTCOME_UNSPECIFIED), ctx()).kind, "raise");
  });

  test("the worker: ACQUIRED and RECONCILE execute; RECONCILE without a callback is left alone", () => {
    const operation = op(OperationStatus.OPERATION_STATUS_IN_PROGRESS, { remoteRef: "r" });
    assert.equal(decideDue({ outcome: ClaimOutcome.CLAIM_OUTCOME_ACQUIRED, lease, operation }, false).kind, "execute");
    assert.deepEqual(decideDue({ outcome: ClaimOutcome.CLAIM_OUTCOME_RECONCILE, lease, operation }, true), {
      kind: "execute",
      lease,
      operation,
      step: { kind: "reconcile", remoteRef: "r" },
    });
    assert.equal(decideDue({ outcome: ClaimOutcome.CLAIM_OUTCOME_RECONCILE, lease, operation }, false).kind, "leaveAlone");
    assert.equal(decideDue({ outcome: ClaimOutcome.CLAIM_OUTCOME_ACQUIRED, lease: undefined, operation }, false).kind, "leaveAlone");
  });
});

describe("decide: the server's wait and the lease from Claim", () => {
  test("every Claim asks for the rest of the deadline, at most 30 s, never less than nothing", () => {
    assert.equal(claimWaitMs(12_345), 12_345);
    assert.equal(claimWaitMs(120_000), MAX_CLAIM_WAIT_MS);
    assert.equal(MAX_CLAIM_WAIT_MS, 30_000);
    assert.equal(claimWaitMs(-5), 0);
  });

  test("an answer to the first attempt adds the server's wait to its send; an answer to a retry adds nothing", () => {
    const waited = durationFromMillis(1_200);
    assert.equal(claimLeaseGrantedAt({ firstAt: 1_000, lastAt: 1_000, attempts: 1 }, waited, 30_000), 2_200);
    assert.equal(claimLeaseGrantedAt({ firstAt: 1_000, lastAt: 1_000, attempts: 1 }, undefined, 30_000), 1_000);
    assert.equal(claimLeaseGrantedAt({ firstAt: 1_000, lastAt: 5_000, attempts: 3 }, waited, 30_000), 1_000);
    // A lease older than a TTL before the last send would have lapsed: the last Claim was granted a new one.
    assert.equal(claimLeaseGrantedAt({ firstAt: 1_000, lastAt: 40_000, attempts: 3 }, waited, 30_000), 10_000);
  });
});

describe("decide: transient errors", () => {
  test("a CANCELLED the client caused, and the work's own TransientError, are not a call's transient error", () => {
    assert.ok(!isTransient(refused(GrpcStatus.CANCELLED, undefined, "Cancelled on client")));
    assert.ok(!isTransient(new TransientError("the work's, not a call's")));
  });
});

describe("decide: the work's result", () => {
  const statusOf = (kind: ReportKind) =>
    ({
      success: OperationStatus.OPERATION_STATUS_SUCCEEDED,
      failure: OperationStatus.OPERATION_STATUS_FAILED,
      retryable: OperationStatus.OPERATION_STATUS_RETRY_SCHEDULED,
      unknown: OperationStatus.OPERATION_STATUS_UNKNOWN,
    })[kind];

  test("a value: success, returned (replayed = false by the caller)", () => {
    const plan = decideReport({ kind: "value", value: { result: "done", resultRef: "ref" }, reconciled: false });
    assert.equal(plan.kind, "success");
    assert.deepEqual(plan.report, { success: { result: new TextEncoder().encode("done"), resultRef: "ref" } });
    const next = decideRecorded(plan, op(statusOf("success")), false);
    assert.equal(next.kind, "return");
    assert.equal(new TextDecoder().decode((next as { result: Uint8Array }).result), "done");
  });

  test("a business error: failure, raised", () => {
    const error = new BusinessError("insufficient_funds", "low");
    const plan = decideReport({ kind: "threw", error });
    assert.deepEqual(plan.report, { failure: { code: "insufficient_funds", message: "low" } });
    assert.deepEqual(decideRecorded(plan, op(statusOf("failure")), false), { kind: "raise", error });
  });

  test("a transient error: retryable (class, message, retry after), claim again; DEAD: OperationDeadError", () => {
    const plan = decideReport({ kind: "threw", error: new TransientError("busy", { retryAfterMs: 1_500, errorClass: "Busy" }) });
    assert.deepEqual(plan.report, { retryable: { errorClass: "Busy", message: "busy", retryAfter: durationFromMillis(1_500) } });
    assert.deepEqual(decideRecorded(plan, op(OperationStatus.OPERATION_STATUS_RETRY_SCHEDULED), false), { kind: "claimAgain" });
    const dead = decideRecorded(plan, op(OperationStatus.OPERATION_STATUS_DEAD), false);
    assert.ok(dead.kind === "raise" && dead.error instanceof OperationDeadError);
    const unnamed = decideReport({ kind: "threw", error: new TransientError("busy") });
    assert.equal(unnamed.report.retryable?.errorClass, "TransientError");
  });

  test("sent but unconfirmed: unknown(remote ref); claim again with a reconcile callback, else OutcomeUnknownError", () => {
    const error = new SentButUnconfirmedError("remote-1", "no answer");
    const plan = decideReport({ kind: "threw", error });
    assert.deepEqual(plan.report, { unknown: { remoteRef: "remote-1", message: "no answer" } });
    assert.deepEqual(decideRecorded(plan, op(statusOf("unknown")), true), { kind: "claimAgain" });
    const raised = decideRecorded(plan, op(statusOf("unknown")), false);
    assert.ok(raised.kind === "raise" && raised.error instanceof OutcomeUnknownError);
    assert.equal((raised.error as OutcomeUnknownError).remoteRef, "remote-1");
    assert.equal((raised.error as OutcomeUnknownError).cause, error);
  });

  test("any other error: retryable with its name, raised (even when the budget is spent)", () => {
    const error = new RangeError("boom");
    const plan = decideReport({ kind: "threw", error });
    assert.deepEqual(plan.report, { retryable: { errorClass: "RangeError", message: "boom" } });
    assert.deepEqual(decideRecorded(plan, op(OperationStatus.OPERATION_STATUS_RETRY_SCHEDULED), false), { kind: "raise", error });
    assert.deepEqual(decideRecorded(plan, op(OperationStatus.OPERATION_STATUS_DEAD), true), { kind: "raise", error });
  });

  test("reconcile: succeeded / failed as for the work; not applied runs the work; raised: unknown(same ref), raised", () => {
    const succeeded = settledOfVerdict(Reconciled.succeeded("reconciled"), "remote-1");
    assert.deepEqual(succeeded, { kind: "value", value: { result: "reconciled", resultRef: "remote-1" }, reconciled: true });
    const plan = decideReport(succeeded!);
    assert.deepEqual(plan.report, { success: { result: new TextEncoder().encode("reconciled"), resultRef: "remote-1" } });
    assert.equal((decideRecorded(plan, undefined, true) as { reconciled: boolean }).reconciled, true);

    const failed = settledOfVerdict(Reconciled.failed("reconciled_failed", "no"), "remote-1");
    assert.ok(failed?.kind === "threw" && failed.error instanceof BusinessError && failed.error.reconciled);
    assert.deepEqual(decideReport(failed).report, { failure: { code: "reconciled_failed", message: "no" } });

    assert.equal(settledOfVerdict(Reconciled.notApplied(), "remote-1"), undefined);

    const error = new Error("psp down");
    const threw = decideReport({ kind: "reconcileThrew", error, remoteRef: "remote-1" });
    assert.equal(threw.kind, "unknown");
    assert.equal(threw.report.unknown?.remoteRef, "remote-1");
    assert.deepEqual(decideRecorded(threw, undefined, true), { kind: "raise", error });
  });

  test("RECONCILE without a callback: unknown(same ref), then ReconcileRequiredError", () => {
    const plan = decideReport({ kind: "handBack", remoteRef: "remote-before" });
    assert.equal(plan.report.unknown?.remoteRef, "remote-before");
    const next = decideRecorded(plan, op(statusOf("unknown")), false);
    assert.ok(next.kind === "raise" && next.error instanceof ReconcileRequiredError && next.error.remoteRef === "remote-before");
  });
});

describe("decide: Renew and Complete errors", () => {
  test("Renew: an error that is no RPC's loses the lease", () => {
    assert.deepEqual(decideRenewFailure(new Error("anything"), 0, 20_000, 0.5), { lost: true });
  });

  test("Complete: a status without ErrorInfo by its code; MESSAGE_TOO_LARGE, Complete's time running out, or no RPC error: in doubt", () => {
    assert.equal(decideCompleteError(refused(GrpcStatus.ABORTED, undefined)), "leaseLost", "ABORTED without ErrorInfo");
    assert.ok(refused(GrpcStatus.ABORTED, undefined) instanceof StaleFencingTokenError);
    assert.ok(refused(GrpcStatus.FAILED_PRECONDITION, ErrorReason.ERROR_REASON_ALREADY_COMPLETED) instanceof AlreadyCompletedError);
    assert.ok(refused(GrpcStatus.UNAVAILABLE, undefined) instanceof UnavailableError);
    for (const error of [
      refused(GrpcStatus.INTERNAL, undefined),
      refused(GrpcStatus.RESOURCE_EXHAUSTED, ErrorReason.ERROR_REASON_MESSAGE_TOO_LARGE),
      new DeadlineExceededError({ message: "Complete's time ran out", code: GrpcStatus.DEADLINE_EXCEEDED }),
      new Error("not an RPC error"),
    ]) {
      assert.equal(decideCompleteError(error), "inDoubt", String(error));
    }
  });
});

describe("decide: Complete in doubt", () => {
  test("recorded: with the Lookup's operation", () => {
    const found = LookupResponse.fromPartial({
      operation: { status: OperationStatus.OPERATION_STATUS_SUCCEEDED },
      executions: [
        { fencingToken: 6n, outcome: ExecutionOutcome.EXECUTION_OUTCOME_RETRYABLE },
        { fencingToken: 7n, outcome: ExecutionOutcome.EXECUTION_OUTCOME_SUCCEEDED },
      ],
    });
    assert.deepEqual(decideCallInDoubt("success", 7n, found), { kind: "recorded", operation: found.operation });
  });
});
