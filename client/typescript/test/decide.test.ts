// The decision table of client/PROTOCOL.md, row by row, on the pure functions of
// src/decide.ts (no server).
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { Metadata, type ServiceError } from "@grpc/grpc-js";

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
  claimWaitMs,
  decideClaim,
  decideCompleteError,
  decideDue,
  decideInDoubt,
  decideRecorded,
  decideRenewError,
  decideReport,
  isTransient,
  settledOfVerdict,
  type ClaimContext,
  type ReportKind,
} from "../src/decide";
import { encodeStatus } from "./statusEncoding";

const lease = { owner: "me", fencingToken: 7n, expiresAt: undefined, attempt: 1, takeover: false };
const NOW = 1_000_000;
const ctx = (over: Partial<ClaimContext> = {}): ClaimContext => ({
  hasReconcile: false,
  now: NOW,
  deadlineAt: NOW + 20_000,
  pollIntervalMs: 1_000,
  random: 0.5,
  what: "test",
  ...over,
});
const op = (status: OperationStatus, over: Partial<Operation> = {}) => ({ namespace: "n", operationKey: "k", status, ...over }) as Operation;
const claim = (outcome: ClaimOutcome, over: Partial<ClaimResponse> = {}) => ClaimResponse.fromPartial({ outcome, ...over });

/** The typed error for a status with an opreg ErrorInfo of `reason` (and `code`). */
function refused(code: GrpcStatus, reason: KnownErrorReason | undefined, message = "refused"): OpregError {
  const metadata = new Metadata();
  if (reason !== undefined) metadata.set("grpc-status-details-bin", Buffer.from(encodeStatus(code, message, reasonName(reason))));
  const error = Object.assign(new Error(message), { code, details: message, metadata }) as ServiceError;
  return fromServiceError(error);
}

describe("decide: Claim", () => {
  test("ACQUIRED runs the work under the lease", () => {
    assert.deepEqual(decideClaim(claim(ClaimOutcome.CLAIM_OUTCOME_ACQUIRED, { lease }), ctx()), {
      kind: "execute",
      lease,
      step: { kind: "work" },
    });
  });

  test("REPLAYED SUCCEEDED returns the stored result; FAILED is a replayed business failure", () => {
    const succeeded = op(OperationStatus.OPERATION_STATUS_SUCCEEDED, { result: Buffer.from("r") });
    assert.deepEqual(decideClaim(claim(ClaimOutcome.CLAIM_OUTCOME_REPLAYED, { operation: succeeded }), ctx()).kind, "replayed");
    const failed = op(OperationStatus.OPERATION_STATUS_FAILED, { failure: { code: "declined", message: "no" } });
    const decision = decideClaim(claim(ClaimOutcome.CLAIM_OUTCOME_REPLAYED, { operation: failed }), ctx());
    assert.equal(decision.kind, "raise");
    const error = (decision as { error: unknown }).error;
    assert.ok(error instanceof BusinessError && error.code === "declined" && error.replayed);
  });

  test("IN_PROGRESS waits retry_after, at most the poll interval, plus jitter; RETRY_LATER waits retry_after", () => {
    const inProgress = decideClaim(claim(ClaimOutcome.CLAIM_OUTCOME_IN_PROGRESS, { retryAfter: durationFromMillis(25_000) }), ctx({ deadlineAt: NOW + 60_000 }));
    assert.deepEqual(inProgress, { kind: "wait", waitMs: claimWaitMs(1_000, 0.5) });
    const short = decideClaim(claim(ClaimOutcome.CLAIM_OUTCOME_IN_PROGRESS, { retryAfter: durationFromMillis(200) }), ctx());
    assert.deepEqual(short, { kind: "wait", waitMs: claimWaitMs(200, 0.5) });
    const later = decideClaim(claim(ClaimOutcome.CLAIM_OUTCOME_RETRY_LATER, { retryAfter: durationFromMillis(5_000) }), ctx());
    assert.deepEqual(later, { kind: "wait", waitMs: claimWaitMs(5_000, 0.5) });
    assert.ok(claimWaitMs(5_000, 0) > 5_000 && claimWaitMs(5_000, 0.999) <= 5_000 + 10 + 1_000);
  });

  test("a wait that ends past the deadline is DeadlineExceededError at once", () => {
    for (const outcome of [ClaimOutcome.CLAIM_OUTCOME_IN_PROGRESS, ClaimOutcome.CLAIM_OUTCOME_RETRY_LATER]) {
      const decision = decideClaim(claim(outcome, { retryAfter: durationFromMillis(30_000) }), ctx({ deadlineAt: NOW + 600 }));
      assert.equal(decision.kind, "raise");
      assert.ok((decision as { error: unknown }).error instanceof DeadlineExceededError);
    }
  });

  test("RECONCILE reconciles with a callback, hands the lease back without one", () => {
    const operation = op(OperationStatus.OPERATION_STATUS_IN_PROGRESS, { remoteRef: "remote-1" });
    const response = claim(ClaimOutcome.CLAIM_OUTCOME_RECONCILE, { lease, operation });
    assert.deepEqual(decideClaim(response, ctx({ hasReconcile: true })), { kind: "execute", lease, step: { kind: "reconcile", remoteRef: "remote-1" } });
    assert.deepEqual(decideClaim(response, ctx()), { kind: "execute", lease, step: { kind: "handBack", remoteRef: "remote-1" } });
  });

  test("DEAD and HELD are raised; HELD carries retry_after", () => {
    const dead = decideClaim(claim(ClaimOutcome.CLAIM_OUTCOME_DEAD, { operation: op(OperationStatus.OPERATION_STATUS_DEAD) }), ctx());
    assert.ok(dead.kind === "raise" && dead.error instanceof OperationDeadError);
    const held = decideClaim(claim(ClaimOutcome.CLAIM_OUTCOME_HELD, { retryAfter: durationFromMillis(60_000) }), ctx());
    assert.ok(held.kind === "raise" && held.error instanceof OperationHeldError && held.error.retryAfterMs === 60_000);
  });

  test("an answer without a lease, or without an outcome, is raised", () => {
    assert.equal(decideClaim(claim(ClaimOutcome.CLAIM_OUTCOME_ACQUIRED), ctx()).kind, "raise");
    assert.equal(decideClaim(claim(ClaimOutcome.CLAIM_OUTCOME_UNSPECIFIED), ctx()).kind, "raise");
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

describe("decide: transient errors", () => {
  test("UNAVAILABLE, DEADLINE_EXCEEDED, a server's CANCELLED 'Timeout expired', RATE_LIMITED; not MESSAGE_TOO_LARGE", () => {
    assert.ok(isTransient(refused(GrpcStatus.UNAVAILABLE, undefined)));
    assert.ok(isTransient(refused(GrpcStatus.UNAVAILABLE, ErrorReason.ERROR_REASON_OPERATION_BUSY)));
    assert.ok(isTransient(refused(GrpcStatus.UNAVAILABLE, ErrorReason.ERROR_REASON_STORE_UNAVAILABLE)));
    assert.ok(isTransient(refused(GrpcStatus.UNAVAILABLE, ErrorReason.ERROR_REASON_OVERLOADED)));
    assert.ok(isTransient(refused(GrpcStatus.DEADLINE_EXCEEDED, undefined)));
    assert.ok(isTransient(refused(GrpcStatus.DEADLINE_EXCEEDED, ErrorReason.ERROR_REASON_DEADLINE_EXCEEDED)));
    assert.ok(isTransient(refused(GrpcStatus.CANCELLED, undefined, "Timeout expired")));
    assert.ok(isTransient(refused(GrpcStatus.RESOURCE_EXHAUSTED, ErrorReason.ERROR_REASON_RATE_LIMITED)));
    assert.ok(!isTransient(refused(GrpcStatus.RESOURCE_EXHAUSTED, ErrorReason.ERROR_REASON_MESSAGE_TOO_LARGE)));
    assert.ok(!isTransient(refused(GrpcStatus.CANCELLED, undefined, "Cancelled on client")));
    assert.ok(!isTransient(refused(GrpcStatus.FAILED_PRECONDITION, ErrorReason.ERROR_REASON_LEASE_NOT_HELD)));
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
  test("Renew: transient errors are retried, any other error loses the lease", () => {
    assert.equal(decideRenewError(refused(GrpcStatus.UNAVAILABLE, undefined)), "retry");
    assert.equal(decideRenewError(refused(GrpcStatus.DEADLINE_EXCEEDED, undefined)), "retry");
    for (const [code, reason] of [
      [GrpcStatus.ABORTED, ErrorReason.ERROR_REASON_STALE_FENCING_TOKEN],
      [GrpcStatus.FAILED_PRECONDITION, ErrorReason.ERROR_REASON_LEASE_NOT_HELD],
      [GrpcStatus.NOT_FOUND, ErrorReason.ERROR_REASON_OPERATION_NOT_FOUND],
      [GrpcStatus.PERMISSION_DENIED, ErrorReason.ERROR_REASON_PERMISSION_DENIED],
      [GrpcStatus.INTERNAL, ErrorReason.ERROR_REASON_INTERNAL],
    ] as const) {
      assert.equal(decideRenewError(refused(code, reason)), "lost", reasonName(reason));
    }
    assert.equal(decideRenewError(new Error("anything")), "lost");
  });

  test("Complete: STALE_FENCING_TOKEN / LEASE_NOT_HELD lose the lease; definitive refusals are raised; the rest is in doubt", () => {
    assert.equal(decideCompleteError(refused(GrpcStatus.ABORTED, ErrorReason.ERROR_REASON_STALE_FENCING_TOKEN)), "leaseLost");
    assert.equal(decideCompleteError(refused(GrpcStatus.FAILED_PRECONDITION, ErrorReason.ERROR_REASON_LEASE_NOT_HELD)), "leaseLost");
    assert.equal(decideCompleteError(refused(GrpcStatus.ABORTED, undefined)), "leaseLost", "ABORTED without ErrorInfo");
    for (const [code, reason] of [
      [GrpcStatus.FAILED_PRECONDITION, ErrorReason.ERROR_REASON_ALREADY_COMPLETED],
      [GrpcStatus.INVALID_ARGUMENT, ErrorReason.ERROR_REASON_INVALID_ARGUMENT],
      [GrpcStatus.NOT_FOUND, ErrorReason.ERROR_REASON_OPERATION_NOT_FOUND],
      [GrpcStatus.ALREADY_EXISTS, ErrorReason.ERROR_REASON_PARAMETER_CONFLICT],
      [GrpcStatus.FAILED_PRECONDITION, ErrorReason.ERROR_REASON_ORIGINAL_OUTCOME_UNKNOWN],
      [GrpcStatus.FAILED_PRECONDITION, ErrorReason.ERROR_REASON_NOTHING_TO_COMPENSATE],
      [GrpcStatus.FAILED_PRECONDITION, ErrorReason.ERROR_REASON_ALREADY_COMPENSATED],
    ] as const) {
      assert.equal(decideCompleteError(refused(code, reason)), "raise", reasonName(reason));
    }
    assert.ok(refused(GrpcStatus.FAILED_PRECONDITION, ErrorReason.ERROR_REASON_ALREADY_COMPLETED) instanceof AlreadyCompletedError);
    for (const error of [
      refused(GrpcStatus.INTERNAL, ErrorReason.ERROR_REASON_INTERNAL),
      refused(GrpcStatus.INTERNAL, undefined),
      refused(GrpcStatus.UNAVAILABLE, undefined),
      refused(GrpcStatus.RESOURCE_EXHAUSTED, ErrorReason.ERROR_REASON_MESSAGE_TOO_LARGE),
      refused(GrpcStatus.PERMISSION_DENIED, ErrorReason.ERROR_REASON_PERMISSION_DENIED),
      new DeadlineExceededError({ message: "Complete's time ran out", code: GrpcStatus.DEADLINE_EXCEEDED }),
      new Error("not an RPC error"),
    ]) {
      assert.equal(decideCompleteError(error), "inDoubt", String(error));
    }
    assert.ok(refused(GrpcStatus.ABORTED, undefined) instanceof StaleFencingTokenError);
    assert.ok(refused(GrpcStatus.UNAVAILABLE, undefined) instanceof UnavailableError);
  });
});

describe("decide: Complete in doubt", () => {
  const lookup = (executions: { fencingToken: bigint; outcome: ExecutionOutcome }[]) =>
    LookupResponse.fromPartial({ operation: { status: OperationStatus.OPERATION_STATUS_SUCCEEDED }, executions });

  test("exactly the outcome we reported: recorded, with the Lookup's operation", () => {
    const found = lookup([
      { fencingToken: 6n, outcome: ExecutionOutcome.EXECUTION_OUTCOME_RETRYABLE },
      { fencingToken: 7n, outcome: ExecutionOutcome.EXECUTION_OUTCOME_SUCCEEDED },
    ]);
    const decision = decideInDoubt(found, 7n, "success");
    assert.equal(decision.kind, "recorded");
    assert.equal((decision as { operation: Operation }).operation.status, OperationStatus.OPERATION_STATUS_SUCCEEDED);
    for (const [kind, outcome] of [
      ["failure", ExecutionOutcome.EXECUTION_OUTCOME_FAILED],
      ["retryable", ExecutionOutcome.EXECUTION_OUTCOME_RETRYABLE],
      ["unknown", ExecutionOutcome.EXECUTION_OUTCOME_UNKNOWN],
    ] as const) {
      assert.equal(decideInDoubt(lookup([{ fencingToken: 7n, outcome }]), 7n, kind).kind, "recorded", kind);
    }
  });

  test("SUPERSEDED or REVOKED: the lease is lost", () => {
    for (const outcome of [ExecutionOutcome.EXECUTION_OUTCOME_SUPERSEDED, ExecutionOutcome.EXECUTION_OUTCOME_REVOKED]) {
      assert.deepEqual(decideInDoubt(lookup([{ fencingToken: 7n, outcome }]), 7n, "success"), { kind: "leaseLost" });
    }
  });

  test("still RUNNING, another outcome, no such execution, or no Lookup: not recorded", () => {
    for (const outcome of [
      ExecutionOutcome.EXECUTION_OUTCOME_RUNNING,
      ExecutionOutcome.EXECUTION_OUTCOME_FAILED,
      ExecutionOutcome.EXECUTION_OUTCOME_UNKNOWN,
    ]) {
      assert.equal(decideInDoubt(lookup([{ fencingToken: 7n, outcome }]), 7n, "success").kind, "notRecorded", ExecutionOutcome[outcome]);
    }
    assert.equal(decideInDoubt(lookup([{ fencingToken: 8n, outcome: ExecutionOutcome.EXECUTION_OUTCOME_SUCCEEDED }]), 7n, "success").kind, "notRecorded");
    assert.equal(decideInDoubt(undefined, 7n, "success").kind, "notRecorded");
  });
});
