package dev.opreg.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;

import com.google.protobuf.ByteString;
import java.time.Duration;
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

/**
 * The pure functions of {@link Protocol} beyond its decisions, which DecisionsTest checks against
 * client/testdata/decisions.json (no server).
 */
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

  // -- Claim -----------------------------------------------------------------------------------

  // What the Claim decisions carry beyond the decision (decided against client/testdata/decisions.json
  // in DecisionsTest).

  @Test
  void aReplayedResultKeepsItsRef() {
    Operation succeeded = operation(OperationStatus.OPERATION_STATUS_SUCCEEDED).toBuilder()
        .setResult(ByteString.copyFromUtf8("before")).setResultRef("ref").build();
    Protocol.ClaimStep step = Protocol.decideClaimAnswer(claim(ClaimOutcome.CLAIM_OUTCOME_REPLAYED, succeeded, null), PLENTY, POLL, 0.5, null);
    assertEquals("ref", ((Protocol.Replayed) step).result().resultRef());
  }

  @Test
  void heldAndLateClaimsSayWhy() {
    OperationHeldException held = assertThrows(OperationHeldException.class, () -> Protocol.decideClaimAnswer(
        claim(ClaimOutcome.CLAIM_OUTCOME_HELD, operation(OperationStatus.OPERATION_STATUS_IN_PROGRESS), Duration.ofSeconds(5)),
        PLENTY, POLL, 0, null));
    assertEquals(Duration.ofSeconds(5), held.retryAfter());
    Operation running = operation(OperationStatus.OPERATION_STATUS_IN_PROGRESS);
    DeadlineExceededException late = assertThrows(DeadlineExceededException.class, () -> Protocol.decideClaimAnswer(
        claim(ClaimOutcome.CLAIM_OUTCOME_RETRY_LATER, running, Duration.ofSeconds(3)), Duration.ofSeconds(2).toNanos(), POLL, 0.0, null));
    assertSame(ClaimOutcome.CLAIM_OUTCOME_RETRY_LATER, late.lastOutcome());
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
  void completesTimeRunningOutIsInDoubt() {
    assertSame(Protocol.CompleteError.IN_DOUBT, Protocol.decideCompleteError(new DeadlineExceededException("time", null, null, null)));
  }

  static LookupResponse lookup(long token, ExecutionOutcome outcome) {
    return LookupResponse.newBuilder()
        .setOperation(operation(OperationStatus.OPERATION_STATUS_SUCCEEDED))
        .addExecutions(Execution.newBuilder().setFencingToken(token - 1).setOutcome(ExecutionOutcome.EXECUTION_OUTCOME_SUCCEEDED))
        .addExecutions(Execution.newBuilder().setFencingToken(token).setOutcome(outcome))
        .build();
  }

  @Test
  void whatTheLookupShowed() {
    assertEquals("Lookup failed", Protocol.lookupShowed(null, 7));
    assertEquals("no execution", Protocol.lookupShowed(lookup(7, ExecutionOutcome.EXECUTION_OUTCOME_RUNNING), 9));
    assertEquals("EXECUTION_OUTCOME_RUNNING", Protocol.lookupShowed(lookup(7, ExecutionOutcome.EXECUTION_OUTCOME_RUNNING), 7));
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

  // -- the lease and retries -----------------------------------------------------------------------

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
  void aClaimsLeaseStartsAfterTheServersWaitOnlyWhenItsFirstAttemptWasAnswered() {
    long sent = 1_000;
    ClaimResponse waited = ClaimResponse.newBuilder()
        .setOutcome(ClaimOutcome.CLAIM_OUTCOME_ACQUIRED)
        .setWaited(Durations.toProto(Duration.ofSeconds(4)))
        .build();
    assertEquals(sent + Duration.ofSeconds(4).toNanos(), Protocol.claimLeaseStart(sent, waited, true));
    // An earlier, lost attempt may have been granted the lease after a shorter wait.
    assertEquals(sent, Protocol.claimLeaseStart(sent, waited, false));
    // A server that does not wait.
    assertEquals(sent, Protocol.claimLeaseStart(sent, waited.toBuilder().clearWaited().build(), true));
  }

  @Test
  void aClaimWaitsTheRestOfTheDeadlineAtMostAndIsGivenThatMuchMoreTime() {
    Duration max = RunOptions.DEFAULT_MAX_CLAIM_WAIT;
    assertEquals(max, Protocol.serverWait(max, PLENTY));
    assertEquals(Duration.ofMillis(800), Protocol.serverWait(max, Duration.ofMillis(800).toNanos()));
    assertEquals(Duration.ZERO, Protocol.serverWait(max, -1));
    assertEquals(Duration.ofMillis(10_800), Protocol.claimTimeout(Duration.ofSeconds(10), Duration.ofMillis(800)));
  }

  @Test
  void aTrysTimeoutNeverPassesTheDeadline() {
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
