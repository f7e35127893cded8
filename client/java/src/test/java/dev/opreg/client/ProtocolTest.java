package dev.opreg.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.ByteString;
import io.grpc.Status;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import opreg.v1.Registry.ClaimOutcome;
import opreg.v1.Registry.ClaimResponse;
import opreg.v1.Registry.CompleteRequest;
import opreg.v1.Registry.DueOperation;
import opreg.v1.Registry.Execution;
import opreg.v1.Registry.ExecutionOutcome;
import opreg.v1.Registry.Failure;
import opreg.v1.Registry.LookupResponse;
import opreg.v1.Registry.Operation;
import opreg.v1.Registry.OperationStatus;
import org.junit.jupiter.api.Test;

/** The decision tables of client/PROTOCOL.md, as pure functions (no server). */
class ProtocolTest {
  static final Duration POLL = Duration.ofSeconds(1);
  static final long PLENTY = Duration.ofSeconds(100).toNanos();

  static Operation operation(OperationStatus status) {
    return Operation.newBuilder().setNamespace("ns").setOperationKey("k").setStatus(status).build();
  }

  static ClaimResponse claim(ClaimOutcome outcome, Operation operation, Duration retryAfter) {
    ClaimResponse.Builder response = ClaimResponse.newBuilder().setOutcome(outcome).setOperation(operation);
    if (retryAfter != null) {
      response.setRetryAfter(Durations.toProto(retryAfter));
    }
    return response.build();
  }

  static OpregException error(Status.Code code, String reason) {
    return OpregErrors.fromThrowable(ErrorsTest.status(code, "m", reason, Map.of()));
  }

  // -- Claim -----------------------------------------------------------------------------------

  @Test
  void replayedReturnsTheStoredResultOrThrowsTheStoredFailure() {
    Operation succeeded = operation(OperationStatus.OPERATION_STATUS_SUCCEEDED).toBuilder()
        .setResult(ByteString.copyFromUtf8("before")).setResultRef("ref").build();
    Protocol.ClaimStep step = Protocol.afterClaim(claim(ClaimOutcome.CLAIM_OUTCOME_REPLAYED, succeeded, null), PLENTY, POLL, 0.5, null);
    Result result = ((Protocol.Replayed) step).result();
    assertEquals("before", result.text());
    assertEquals("ref", result.resultRef());
    assertTrue(result.replayed());

    Operation failed = operation(OperationStatus.OPERATION_STATUS_FAILED).toBuilder()
        .setFailure(Failure.newBuilder().setCode("before_failed").setMessage("no")).build();
    BusinessFailureException failure = assertThrows(BusinessFailureException.class,
        () -> Protocol.afterClaim(claim(ClaimOutcome.CLAIM_OUTCOME_REPLAYED, failed, null), PLENTY, POLL, 0.5, null));
    assertEquals("before_failed", failure.failureCode());
    assertTrue(failure.replayed());
  }

  @Test
  void inProgressAndRetryLaterWaitThenClaimAgain() {
    Operation running = operation(OperationStatus.OPERATION_STATUS_IN_PROGRESS);
    // IN_PROGRESS polls at most every poll interval, plus jitter.
    Duration wait = ((Protocol.Wait) Protocol.afterClaim(
        claim(ClaimOutcome.CLAIM_OUTCOME_IN_PROGRESS, running, Duration.ofSeconds(30)), PLENTY, POLL, 1.0, null)).delay();
    assertTrue(wait.compareTo(Duration.ofMillis(1005)) >= 0 && wait.compareTo(Duration.ofMillis(1206)) <= 0, wait.toString());
    // RETRY_LATER waits retry_after.
    wait = ((Protocol.Wait) Protocol.afterClaim(
        claim(ClaimOutcome.CLAIM_OUTCOME_RETRY_LATER, running, Duration.ofSeconds(3)), PLENTY, POLL, 0.0, null)).delay();
    assertEquals(Duration.ofMillis(3005), wait);
    // ... unless the wait ends past the deadline: DeadlineExceeded at once.
    DeadlineExceededException late = assertThrows(DeadlineExceededException.class, () -> Protocol.afterClaim(
        claim(ClaimOutcome.CLAIM_OUTCOME_RETRY_LATER, running, Duration.ofSeconds(3)), Duration.ofSeconds(2).toNanos(), POLL, 0.0, null));
    assertSame(ClaimOutcome.CLAIM_OUTCOME_RETRY_LATER, late.lastOutcome());
  }

  @Test
  void deadHeldAndTheLeases() {
    assertThrows(OperationDeadException.class, () -> Protocol.afterClaim(
        claim(ClaimOutcome.CLAIM_OUTCOME_DEAD, operation(OperationStatus.OPERATION_STATUS_DEAD), null), PLENTY, POLL, 0, null));
    OperationHeldException held = assertThrows(OperationHeldException.class, () -> Protocol.afterClaim(
        claim(ClaimOutcome.CLAIM_OUTCOME_HELD, operation(OperationStatus.OPERATION_STATUS_IN_PROGRESS), Duration.ofSeconds(5)),
        PLENTY, POLL, 0, null));
    assertEquals(Duration.ofSeconds(5), held.retryAfter());
    assertFalse(((Protocol.Execute) Protocol.afterClaim(
        claim(ClaimOutcome.CLAIM_OUTCOME_ACQUIRED, operation(OperationStatus.OPERATION_STATUS_IN_PROGRESS), null), PLENTY, POLL, 0, null)).reconciling());
    assertTrue(((Protocol.Execute) Protocol.afterClaim(
        claim(ClaimOutcome.CLAIM_OUTCOME_RECONCILE, operation(OperationStatus.OPERATION_STATUS_UNKNOWN), null), PLENTY, POLL, 0, null)).reconciling());
  }

  // -- reports ---------------------------------------------------------------------------------

  @Test
  void whatTheWorkReturnsIsReported() {
    assertEquals("done", Protocol.successReport("done".getBytes(), "r").getSuccess().getResult().toStringUtf8());
    assertEquals(CompleteRequest.OutcomeCase.SUCCESS, Protocol.successReport(null, "").getOutcomeCase());

    CompleteRequest failure = Protocol.errorReport(new BusinessException("insufficient_funds", "low"));
    assertEquals("insufficient_funds", failure.getFailure().getCode());
    assertEquals("low", failure.getFailure().getMessage());

    CompleteRequest retryable = Protocol.errorReport(new TransientException("down", Duration.ofSeconds(2)));
    assertEquals("TransientException", retryable.getRetryable().getErrorClass());
    assertEquals(2, retryable.getRetryable().getRetryAfter().getSeconds());

    CompleteRequest unknown = Protocol.errorReport(new SentButUnconfirmedException("remote-1", "timed out"));
    assertEquals("remote-1", unknown.getUnknown().getRemoteRef());

    CompleteRequest unexpected = Protocol.errorReport(new IllegalStateException("bug"));
    assertEquals("IllegalStateException", unexpected.getRetryable().getErrorClass());
    assertEquals("bug", unexpected.getRetryable().getMessage());
  }

  @Test
  void reconcileVerdictsAreReported() {
    assertEquals("x", Protocol.reconcileReport(Reconciliation.succeeded("x".getBytes())).getSuccess().getResult().toStringUtf8());
    assertEquals("c", Protocol.reconcileReport(Reconciliation.failed("c")).getFailure().getCode());
    assertNull(Protocol.reconcileReport(Reconciliation.notApplied()));
    assertThrows(IllegalArgumentException.class, () -> Protocol.reconcileReport(null));
    CompleteRequest raised = Protocol.reconcileErrorReport(new RuntimeException("psp down"), "psp-7");
    assertEquals("psp-7", raised.getUnknown().getRemoteRef());
    assertEquals("psp-7", Protocol.handBackReport("psp-7").getUnknown().getRemoteRef());
  }

  // -- Complete --------------------------------------------------------------------------------

  @Test
  void completeErrorsAreLeaseLostDefinitiveOrInDoubt() {
    assertSame(Protocol.CompleteError.LEASE_LOST, Protocol.afterCompleteError(error(Status.Code.ABORTED, "STALE_FENCING_TOKEN")));
    assertSame(Protocol.CompleteError.LEASE_LOST, Protocol.afterCompleteError(error(Status.Code.FAILED_PRECONDITION, "LEASE_NOT_HELD")));
    for (String reason : List.of("ALREADY_COMPLETED", "NOTHING_TO_COMPENSATE", "ALREADY_COMPENSATED", "ORIGINAL_OUTCOME_UNKNOWN")) {
      assertSame(Protocol.CompleteError.DEFINITIVE, Protocol.afterCompleteError(error(Status.Code.FAILED_PRECONDITION, reason)), reason);
    }
    assertSame(Protocol.CompleteError.DEFINITIVE, Protocol.afterCompleteError(error(Status.Code.INVALID_ARGUMENT, "INVALID_ARGUMENT")));
    assertSame(Protocol.CompleteError.DEFINITIVE, Protocol.afterCompleteError(error(Status.Code.NOT_FOUND, "OPERATION_NOT_FOUND")));
    assertSame(Protocol.CompleteError.DEFINITIVE, Protocol.afterCompleteError(error(Status.Code.ALREADY_EXISTS, "PARAMETER_CONFLICT")));
    assertSame(Protocol.CompleteError.IN_DOUBT, Protocol.afterCompleteError(error(Status.Code.INTERNAL, "INTERNAL")));
    assertSame(Protocol.CompleteError.IN_DOUBT, Protocol.afterCompleteError(error(Status.Code.PERMISSION_DENIED, "PERMISSION_DENIED")));
    assertSame(Protocol.CompleteError.IN_DOUBT, Protocol.afterCompleteError(new DeadlineExceededException("time", null, null, null)));
  }

  static LookupResponse lookup(long token, ExecutionOutcome outcome) {
    return LookupResponse.newBuilder()
        .setOperation(operation(OperationStatus.OPERATION_STATUS_SUCCEEDED))
        .addExecutions(Execution.newBuilder().setFencingToken(token - 1).setOutcome(ExecutionOutcome.EXECUTION_OUTCOME_SUCCEEDED))
        .addExecutions(Execution.newBuilder().setFencingToken(token).setOutcome(outcome))
        .build();
  }

  @Test
  void aDoubtfulCompleteAcceptsExactlyOurReport() {
    CompleteRequest success = Protocol.successReport("done".getBytes(), "");
    CompleteRequest failure = Protocol.errorReport(new BusinessException("c"));
    assertSame(Protocol.LookupVerdict.RECORDED, Protocol.afterLookup(lookup(7, ExecutionOutcome.EXECUTION_OUTCOME_SUCCEEDED), 7, success));
    assertSame(Protocol.LookupVerdict.RECORDED, Protocol.afterLookup(lookup(7, ExecutionOutcome.EXECUTION_OUTCOME_FAILED), 7, failure));
    assertSame(Protocol.LookupVerdict.NOT_RECORDED, Protocol.afterLookup(lookup(7, ExecutionOutcome.EXECUTION_OUTCOME_FAILED), 7, success));
    assertSame(Protocol.LookupVerdict.NOT_RECORDED, Protocol.afterLookup(lookup(7, ExecutionOutcome.EXECUTION_OUTCOME_RUNNING), 7, success));
    assertSame(Protocol.LookupVerdict.SUPERSEDED, Protocol.afterLookup(lookup(7, ExecutionOutcome.EXECUTION_OUTCOME_REVOKED), 7, success));
    assertSame(Protocol.LookupVerdict.SUPERSEDED, Protocol.afterLookup(lookup(7, ExecutionOutcome.EXECUTION_OUTCOME_SUPERSEDED), 7, success));
    assertSame(Protocol.LookupVerdict.NOT_RECORDED, Protocol.afterLookup(lookup(7, ExecutionOutcome.EXECUTION_OUTCOME_SUCCEEDED), 9, success));
    assertSame(Protocol.LookupVerdict.NOT_RECORDED, Protocol.afterLookup(null, 7, success));
    assertEquals("Lookup failed", Protocol.lookupShowed(null, 7));
    assertEquals("no execution", Protocol.lookupShowed(lookup(7, ExecutionOutcome.EXECUTION_OUTCOME_RUNNING), 9));
  }

  @Test
  void afterTheReportIsRecorded() {
    Operation succeeded = operation(OperationStatus.OPERATION_STATUS_SUCCEEDED).toBuilder().setResult(ByteString.copyFromUtf8("done")).build();
    Protocol.Next next = Protocol.afterComplete(succeeded, Protocol.successReport("done".getBytes(), ""), null, true, false, 1);
    assertFalse(((Protocol.Done) next).result().replayed());

    Operation failed = operation(OperationStatus.OPERATION_STATUS_FAILED).toBuilder()
        .setFailure(Failure.newBuilder().setCode("insufficient_funds")).build();
    BusinessException business = new BusinessException("insufficient_funds");
    BusinessFailureException failure = assertThrows(BusinessFailureException.class,
        () -> Protocol.afterComplete(failed, Protocol.errorReport(business), business, true, false, 1));
    assertFalse(failure.replayed());
    assertSame(business, failure.getCause());

    Operation scheduled = operation(OperationStatus.OPERATION_STATUS_RETRY_SCHEDULED);
    TransientException down = new TransientException("down");
    assertInstanceOf(Protocol.ClaimAgain.class, Protocol.afterComplete(scheduled, Protocol.errorReport(down), down, true, false, 1));
    assertSame(down, assertThrows(TransientException.class, () -> Protocol.afterComplete(scheduled, Protocol.errorReport(down), down, false, true, 1)));
    assertThrows(OperationDeadException.class,
        () -> Protocol.afterComplete(operation(OperationStatus.OPERATION_STATUS_DEAD), Protocol.errorReport(down), down, true, false, 1));

    IllegalStateException bug = new IllegalStateException("bug");
    WorkException work = assertThrows(WorkException.class, () -> Protocol.afterComplete(scheduled, Protocol.errorReport(bug), bug, true, true, 1));
    assertSame(bug, work.getCause());

    Operation unknown = operation(OperationStatus.OPERATION_STATUS_UNKNOWN);
    SentButUnconfirmedException unconfirmed = new SentButUnconfirmedException("remote-1");
    assertInstanceOf(Protocol.ClaimAgain.class, Protocol.afterComplete(unknown, Protocol.errorReport(unconfirmed), unconfirmed, true, true, 1));
    OutcomeUnknownException outcomeUnknown = assertThrows(OutcomeUnknownException.class,
        () -> Protocol.afterComplete(unknown, Protocol.errorReport(unconfirmed), unconfirmed, true, false, 1));
    assertEquals("remote-1", outcomeUnknown.remoteRef());
    assertThrows(OutcomeUnknownException.class,
        () -> Protocol.afterComplete(unknown, Protocol.errorReport(unconfirmed), unconfirmed, false, true, 1));
  }

  // -- the lease and backoff ---------------------------------------------------------------------

  @Test
  void theLeaseIsTrustedFromTheSendLessATenth() {
    Duration ttl = Duration.ofSeconds(30);
    long sent = 1_000;
    long expiry = Protocol.localExpiry(sent, ttl);
    assertEquals(sent + ttl.toNanos(), expiry);
    assertEquals(expiry - Duration.ofSeconds(3).toNanos(), Protocol.trustedUntil(expiry, ttl));
    // A Renew's timeout never reaches past the trusted time, and is at least 50 ms.
    assertEquals(Duration.ofSeconds(10), Protocol.renewTimeout(Duration.ofSeconds(10), expiry, ttl, sent));
    assertEquals(Duration.ofSeconds(2), Protocol.renewTimeout(Duration.ofSeconds(10), expiry, ttl, sent + Duration.ofSeconds(25).toNanos()));
    assertEquals(Duration.ofMillis(50), Protocol.renewTimeout(Duration.ofSeconds(10), expiry, ttl, sent + Duration.ofSeconds(29).toNanos()));
  }

  @Test
  void anyNonTransientRenewErrorLosesTheLease() {
    Duration ttl = Duration.ofSeconds(30);
    long expiry = Protocol.localExpiry(0, ttl);
    for (OpregException refusal : List.of(
        error(Status.Code.ABORTED, "STALE_FENCING_TOKEN"),
        error(Status.Code.FAILED_PRECONDITION, "LEASE_NOT_HELD"),
        error(Status.Code.NOT_FOUND, "OPERATION_NOT_FOUND"),
        error(Status.Code.PERMISSION_DENIED, "PERMISSION_DENIED"),
        error(Status.Code.INTERNAL, "INTERNAL"))) {
      assertInstanceOf(Protocol.Lost.class, Protocol.afterRenewFailure(refusal, 0, expiry, ttl, Duration.ofMillis(100)), refusal.reason());
    }
    OpregException unavailable = error(Status.Code.UNAVAILABLE, null);
    Protocol.RenewStep again = Protocol.afterRenewFailure(unavailable, 0, expiry, ttl, Duration.ofMillis(100));
    assertEquals(Duration.ofMillis(100), ((Protocol.RenewAgain) again).delay());
    // Retried never past the trusted time; then lost.
    long late = Duration.ofSeconds(26).toNanos();
    assertEquals(Duration.ofSeconds(1), ((Protocol.RenewAgain) Protocol.afterRenewFailure(unavailable, late, expiry, ttl, Duration.ofSeconds(5))).delay());
    assertInstanceOf(Protocol.Lost.class, Protocol.afterRenewFailure(unavailable, Duration.ofSeconds(27).toNanos(), expiry, ttl, Duration.ofMillis(1)));
  }

  @Test
  void backoffIsFullJitterCapped() {
    Duration initial = Duration.ofMillis(100);
    Duration max = Duration.ofSeconds(5);
    assertEquals(Duration.ZERO, Protocol.fullJitter(3, initial, max, 0.0));
    assertEquals(Duration.ofMillis(200), Protocol.fullJitter(2, initial, max, 0.5));
    assertEquals(Duration.ofMillis(2500), Protocol.fullJitter(60, initial, max, 0.5));
    assertNull(Protocol.tryTimeout(Duration.ofSeconds(10), 0));
    assertEquals(Duration.ofMillis(5), Protocol.tryTimeout(Duration.ofSeconds(10), 5_000_000));
    assertEquals(Duration.ofSeconds(10), Protocol.tryTimeout(Duration.ofSeconds(10), PLENTY));
  }

  // -- the worker ------------------------------------------------------------------------------

  @Test
  void theWorkersPlan() {
    DueOperation acquired = DueOperation.newBuilder().setOutcome(ClaimOutcome.CLAIM_OUTCOME_ACQUIRED).build();
    DueOperation reconcile = DueOperation.newBuilder().setOutcome(ClaimOutcome.CLAIM_OUTCOME_RECONCILE).build();
    assertSame(Protocol.DuePlan.RUN, Protocol.planDue(acquired, false));
    assertSame(Protocol.DuePlan.RUN, Protocol.planDue(reconcile, true));
    assertSame(Protocol.DuePlan.NO_RECONCILER, Protocol.planDue(reconcile, false));
    assertSame(Protocol.DuePlan.UNEXPECTED,
        Protocol.planDue(DueOperation.newBuilder().setOutcome(ClaimOutcome.CLAIM_OUTCOME_REPLAYED).build(), true));
    assertEquals("debit", Protocol.kindOf("debit:order-7:x"));
    assertEquals("plain", Protocol.kindOf("plain"));
    Duration idle = Protocol.idleWait(POLL, 1.0);
    assertEquals(Duration.ofMillis(1200), idle);
    assertEquals(3, Protocol.freeSlots(8, 5));
  }
}
