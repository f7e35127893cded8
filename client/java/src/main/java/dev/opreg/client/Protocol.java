package dev.opreg.client;

import java.time.Duration;
import java.util.List;
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
import opreg.v1.Registry.RetryableError;
import opreg.v1.Registry.Success;
import opreg.v1.Registry.UnknownOutcome;

/**
 * The decisions of the run-once protocol ({@code client/PROTOCOL.md}), without I/O: no call, no
 * sleep, no clock and no randomness of its own (times and random numbers are arguments). The
 * run-once helper and the worker make the calls, sleep the waits and run the renewals these
 * functions describe.
 */
final class Protocol {
  private Protocol() {}

  /** Complete (and the Lookup that settles a doubtful Complete) gets this many call timeouts of its own. */
  static final int COMPLETE_CALL_TIMEOUTS = 3;

  /** The shortest timeout a Renew is sent with, however close the lease's local expiry. */
  static final Duration MIN_RENEW_TIMEOUT = Duration.ofMillis(50);

  /** How long executions cancelled at the end of a worker's grace period get to unwind. */
  static final Duration UNWIND_TIMEOUT = Duration.ofSeconds(5);

  /** The error class recorded for an operation whose kind has no handler. */
  static final String NO_HANDLER = "NO_HANDLER";

  /** ClaimDue hands out at most this many operations per call. */
  static final int MAX_CLAIM_DUE_LIMIT = 1000;

  // -- transient errors and backoff -----------------------------------------------------------

  /** True for the transient errors (the only ones retried): see {@link UnavailableException}. */
  static boolean isTransient(Throwable error) {
    return OpregErrors.isTransient(error);
  }

  /**
   * The wait before retrying after the {@code attempt}-th (from 0) transient error in a row: full
   * jitter over min(max, initial · 2^attempt), but at least the server's RetryInfo delay
   * ({@code retryInfo}, null for none) stretched by up to a tenth, so that callers told the same delay
   * do not come back together. {@code random} in [0, 1) draws both.
   */
  static Duration retryDelay(int attempt, Duration retryInfo, double random, Duration initial, Duration max) {
    double ceiling = Math.min(max.toNanos(), initial.toNanos() * Math.pow(2, Math.min(attempt, 62)));
    long backoff = (long) (random * ceiling);
    if (retryInfo == null) {
      return Duration.ofNanos(backoff);
    }
    long stretched = retryInfo.toNanos() + (long) (random * retryInfo.toNanos() / 10);
    return Duration.ofNanos(Math.max(backoff, stretched));
  }

  /** The timeout of the next try of a retried call; {@code null} when no time is left. */
  static Duration tryTimeout(Duration callTimeout, long remainingNanos) {
    if (remainingNanos <= 0) {
      return null;
    }
    return callTimeout.toNanos() < remainingNanos ? callTimeout : Duration.ofNanos(remainingNanos);
  }

  /** A wait, never past the time that is left. */
  static Duration notPast(Duration wait, long remainingNanos) {
    long left = Math.max(remainingNanos, 0);
    return wait.toNanos() < left ? wait : Duration.ofNanos(left);
  }

  // -- Claim ---------------------------------------------------------------------------------

  /** What to do with a Claim's answer. */
  sealed interface ClaimStep permits Replayed, Wait, Execute {}

  /** REPLAYED, SUCCEEDED: return the stored result. */
  record Replayed(Result result) implements ClaimStep {}

  /** IN_PROGRESS / RETRY_LATER: sleep this long (zero after a server's wait), then claim again. */
  record Wait(Duration delay) implements ClaimStep {}

  /** ACQUIRED / RECONCILE: run under the lease (reconcile first when {@code reconciling}). */
  record Execute(boolean reconciling) implements ClaimStep {}

  /** The server wait a Claim asks for: the rest of the overall deadline, at most {@code maxClaimWait}. */
  static Duration serverWait(Duration maxClaimWait, long remainingNanos) {
    return notPast(maxClaimWait, remainingNanos);
  }

  /**
   * A Claim's timeout: the call timeout plus its server wait, which the server may spend holding the
   * call before it answers (so a Claim is not cut at the deadline its wait ends on).
   */
  static Duration claimTimeout(Duration callTimeout, Duration serverWait) {
    return callTimeout.plus(serverWait);
  }

  /**
   * Where a Claim's lease is measured from (PROTOCOL.md, the lease): the send of the first attempt
   * ({@code firstSentNanos}), plus the server's {@code waited} when the answer came to that attempt
   * itself. An answer to a retry adds nothing: an earlier, lost attempt may have been granted the
   * lease after a shorter wait.
   */
  static long claimLeaseStart(long firstSentNanos, ClaimResponse response, boolean answeredFirstAttempt) {
    if (!answeredFirstAttempt || !response.hasWaited()) {
      return firstSentNanos;
    }
    return firstSentNanos + Durations.fromProto(response.getWaited()).toNanos();
  }

  /**
   * The decision table "Claim" of PROTOCOL.md. IN_PROGRESS / RETRY_LATER after a server's wait
   * ({@code waited} set) claim again at once. From a server that does not wait they wait RETRY_LATER's
   * {@code retry_after} (the poll interval without one); for IN_PROGRESS at most {@code pollInterval}
   * (the holder may finish before its lease ends); plus 5 ms and up to a fifth of it, at most a
   * second, of jitter ({@code random} in [0, 1)). Throws the recorded
   * {@link BusinessFailureException} (REPLAYED, FAILED), {@link OperationDeadException} (DEAD),
   * {@link OperationHeldException} (HELD) and {@link DeadlineExceededException} (a wait that would end
   * at or past the deadline).
   */
  static ClaimStep decideClaimAnswer(
      ClaimResponse response, long remainingNanos, Duration pollInterval, double random, Throwable lastError) {
    Operation operation = response.getOperation();
    ClaimOutcome outcome = response.getOutcome();
    switch (outcome) {
      case CLAIM_OUTCOME_REPLAYED:
        return new Replayed(replayed(operation));
      case CLAIM_OUTCOME_DEAD:
        throw dead(operation, lastError);
      case CLAIM_OUTCOME_HELD:
        // Not waited out like IN_PROGRESS: an operator froze it, and the caller must learn that.
        throw held(response, lastError);
      case CLAIM_OUTCOME_IN_PROGRESS:
      case CLAIM_OUTCOME_RETRY_LATER: {
        // The server held the call until the operation moved or its wait ended: nothing to sleep out.
        Duration wait = response.hasWaited() ? Duration.ZERO : pollWait(response, pollInterval, random);
        if (wait.toNanos() >= remainingNanos) {
          throw new DeadlineExceededException(
              where(operation) + ": deadline exceeded waiting after " + outcome + waitedText(response, wait),
              lastError,
              outcome,
              operation);
        }
        return new Wait(wait);
      }
      case CLAIM_OUTCOME_ACQUIRED:
        return new Execute(false);
      case CLAIM_OUTCOME_RECONCILE:
        return new Execute(true);
      default:
        throw new OpregException("unexpected claim outcome " + outcome, lastError);
    }
  }

  /**
   * The sleep before claiming again after IN_PROGRESS / RETRY_LATER from a server that does not
   * wait: {@code retry_after} (the poll interval without one; for IN_PROGRESS at most the poll
   * interval), plus 5 ms and up to a fifth of it, at most a second, so that callers told the same
   * time do not return together.
   */
  static Duration pollWait(ClaimResponse response, Duration pollInterval, double random) {
    long after = response.hasRetryAfter() ? Durations.fromProto(response.getRetryAfter()).toNanos() : pollInterval.toNanos();
    if (response.getOutcome() == ClaimOutcome.CLAIM_OUTCOME_IN_PROGRESS) {
      after = Math.min(after, pollInterval.toNanos());
    }
    after = Math.max(after, 0);
    return Duration.ofNanos(after + 5_000_000L + (long) (random * Math.min(0.2 * after, 1e9)));
  }

  /** How DeadlineExceeded tells what the Claim was waiting for. */
  private static String waitedText(ClaimResponse response, Duration wait) {
    if (response.hasWaited()) {
      return " (the server waited " + Durations.seconds(Durations.fromProto(response.getWaited())) + ")";
    }
    return " (next claim in " + Durations.seconds(wait) + ")";
  }

  /** The answer to REPLAYED: the stored result, or the stored failure thrown. */
  static Result replayed(Operation operation) {
    if (operation.getStatus() == OperationStatus.OPERATION_STATUS_SUCCEEDED) {
      return new Result(operation.getResult().toByteArray(), operation.getResultRef(), true, operation);
    }
    if (operation.getStatus() == OperationStatus.OPERATION_STATUS_FAILED) {
      Failure failure = operation.getFailure();
      throw new BusinessFailureException(
          where(operation) + ": recorded business failure " + failure.getCode(),
          null,
          failure.getCode(),
          failure.getMessage(),
          true,
          operation);
    }
    throw new OpregException(where(operation) + ": REPLAYED with status " + operation.getStatus());
  }

  static OperationDeadException dead(Operation operation, Throwable cause) {
    String last = operation.getLastErrorClass().isEmpty()
        ? ""
        : "; last error " + operation.getLastErrorClass() + ": " + operation.getLastErrorMessage();
    return new OperationDeadException(
        where(operation) + " is DEAD after " + operation.getAttempts() + " attempt(s)" + last, cause, operation);
  }

  static OperationHeldException held(ClaimResponse response, Throwable cause) {
    Operation operation = response.getOperation();
    Duration retryAfter = response.hasRetryAfter() ? Durations.fromProto(response.getRetryAfter()) : null;
    return new OperationHeldException(
        where(operation) + " is held by an operator"
            + (retryAfter != null ? "; claim again after " + Durations.seconds(retryAfter) + " or ask the operator" : ""),
        cause,
        retryAfter,
        operation);
  }

  static ReconcileRequiredException reconcileRequired(Operation operation) {
    return new ReconcileRequiredException(
        where(operation) + ": the last outcome is unknown (remote_ref=" + operation.getRemoteRef()
            + ") and no reconcile callback was given",
        null,
        operation.getRemoteRef(),
        operation);
  }

  // -- reports -------------------------------------------------------------------------------

  /** Complete(success) for what the work returned ({@code null}: an empty result). */
  static CompleteRequest successReport(byte[] value, String resultRef) {
    Success.Builder success = Success.newBuilder();
    if (value != null) {
      success.setResult(com.google.protobuf.ByteString.copyFrom(value));
    }
    if (resultRef != null) {
      success.setResultRef(resultRef);
    }
    return CompleteRequest.newBuilder().setSuccess(success).build();
  }

  /** The report for an exception the work threw (the table "The work returns"). */
  static CompleteRequest errorReport(Throwable error) {
    if (error instanceof BusinessException business) {
      return CompleteRequest.newBuilder()
          .setFailure(Failure.newBuilder().setCode(business.code()).setMessage(business.failureMessage()))
          .build();
    }
    if (error instanceof TransientException transientError) {
      RetryableError.Builder retryable = RetryableError.newBuilder()
          .setErrorClass(transientError.errorClass())
          .setMessage(message(transientError));
      if (transientError.retryAfter() != null) {
        retryable.setRetryAfter(Durations.toProto(transientError.retryAfter()));
      }
      return CompleteRequest.newBuilder().setRetryable(retryable).build();
    }
    if (error instanceof SentButUnconfirmedException unconfirmed) {
      return CompleteRequest.newBuilder()
          .setUnknown(UnknownOutcome.newBuilder().setRemoteRef(unconfirmed.remoteRef()).setMessage(unconfirmed.detail()))
          .build();
    }
    return CompleteRequest.newBuilder()
        .setRetryable(RetryableError.newBuilder().setErrorClass(error.getClass().getSimpleName()).setMessage(message(error)))
        .build();
  }

  /** The report for a reconcile verdict; {@code null} for not applied (the work runs). */
  static CompleteRequest reconcileReport(Reconciliation reconciliation) {
    if (reconciliation == null) {
      throw new IllegalArgumentException(
          "reconcile must return Reconciliation.succeeded(...), .failed(...) or .notApplied(), not null");
    }
    return switch (reconciliation.kind()) {
      case SUCCEEDED -> successReport(reconciliation.result(), reconciliation.resultRef());
      case FAILED -> CompleteRequest.newBuilder()
          .setFailure(Failure.newBuilder().setCode(reconciliation.code()).setMessage(reconciliation.message()))
          .build();
      case NOT_APPLIED -> null;
    };
  }

  /** A reconcile callback that threw leaves the outcome unknown, with the same remote ref. */
  static CompleteRequest reconcileErrorReport(Throwable error, String remoteRef) {
    return CompleteRequest.newBuilder()
        .setUnknown(UnknownOutcome.newBuilder()
            .setRemoteRef(remoteRef)
            .setMessage("reconcile failed: " + error.getClass().getSimpleName() + ": " + message(error)))
        .build();
  }

  /** RECONCILE without a callback: hand the lease back at once, same remote ref. */
  static CompleteRequest handBackReport(String remoteRef) {
    return CompleteRequest.newBuilder()
        .setUnknown(UnknownOutcome.newBuilder().setRemoteRef(remoteRef).setMessage("reconcile required: no reconcile callback"))
        .build();
  }

  /** An error of the work that says the lease is not ours. */
  static boolean isLeaseLoss(Throwable error) {
    return error instanceof LeaseLostException || error instanceof StaleFencingTokenException;
  }

  /** What the caller sees of an unexpected error of the work: typed RPC errors as they are, else a WorkException. */
  static RuntimeException workError(Throwable error) {
    if (error instanceof OpregException opreg) {
      return opreg;
    }
    return new WorkException("the work failed: " + error, error);
  }

  // -- Complete ------------------------------------------------------------------------------

  /** What a failed Complete (retried for its own time) means. */
  enum CompleteError {
    /** STALE_FENCING_TOKEN, LEASE_NOT_HELD: the lease is not ours. */
    LEASE_LOST,
    /** ALREADY_COMPLETED, INVALID_ARGUMENT, OPERATION_NOT_FOUND, PARAMETER_CONFLICT, compensation: raise it. */
    RAISE,
    /** Anything else, or Complete's time ran out: a Lookup decides. */
    IN_DOUBT
  }

  /** The table "Complete": what a Complete error means once its retries are spent. */
  static CompleteError decideCompleteError(Throwable error) {
    if (error instanceof StaleFencingTokenException || error instanceof LeaseNotHeldException) {
      return CompleteError.LEASE_LOST;
    }
    if (error instanceof AlreadyCompletedException
        || error instanceof InvalidArgumentException
        || error instanceof NotFoundException
        || error instanceof ParameterConflictException
        || error instanceof CompensationException
        || error instanceof LeaseLostException) {
      return CompleteError.RAISE;
    }
    return CompleteError.IN_DOUBT;
  }

  /** What the Lookup after a doubtful Complete shows of our report. */
  enum LookupVerdict {
    /** Our token's execution with exactly the outcome we reported: as if Complete had answered. */
    RECORDED,
    /** SUPERSEDED or REVOKED: another execution took over, or an operator revoked the lease; it is lost. */
    LEASE_LOST,
    /** RUNNING, another outcome, no such execution, or the Lookup failed. */
    NOT_RECORDED
  }

  /** The execution outcome each report is recorded as. */
  static ExecutionOutcome recordedAs(CompleteRequest report) {
    return switch (report.getOutcomeCase()) {
      case SUCCESS -> ExecutionOutcome.EXECUTION_OUTCOME_SUCCEEDED;
      case FAILURE -> ExecutionOutcome.EXECUTION_OUTCOME_FAILED;
      case RETRYABLE -> ExecutionOutcome.EXECUTION_OUTCOME_RETRYABLE;
      case UNKNOWN -> ExecutionOutcome.EXECUTION_OUTCOME_UNKNOWN;
      case OUTCOME_NOT_SET -> throw new IllegalArgumentException("a report without an outcome");
    };
  }

  /** Our token's last execution in a Lookup; {@code null} if none (or no Lookup). */
  static Execution ourExecution(LookupResponse response, long fencingToken) {
    if (response == null) {
      return null;
    }
    Execution mine = null;
    for (Execution execution : response.getExecutionsList()) {
      if (execution.getFencingToken() == fencingToken) {
        mine = execution;
      }
    }
    return mine;
  }

  /** The table "Complete in doubt": only exactly the outcome we reported counts as ours. */
  static LookupVerdict decideCallInDoubt(LookupResponse response, long fencingToken, CompleteRequest report) {
    Execution mine = ourExecution(response, fencingToken);
    if (mine == null) {
      return LookupVerdict.NOT_RECORDED;
    }
    if (mine.getOutcome() == ExecutionOutcome.EXECUTION_OUTCOME_SUPERSEDED
        || mine.getOutcome() == ExecutionOutcome.EXECUTION_OUTCOME_REVOKED) {
      return LookupVerdict.LEASE_LOST;
    }
    return mine.getOutcome() == recordedAs(report) ? LookupVerdict.RECORDED : LookupVerdict.NOT_RECORDED;
  }

  /** What the Lookup showed, for OutcomeNotRecorded's message. */
  static String lookupShowed(LookupResponse response, long fencingToken) {
    if (response == null) {
      return "Lookup failed";
    }
    Execution mine = ourExecution(response, fencingToken);
    return mine == null ? "no execution" : mine.getOutcome().name();
  }

  /** After a recorded report: return the result, or claim again. */
  sealed interface Next permits Done, ClaimAgain {}

  record Done(Result result) implements Next {}

  record ClaimAgain() implements Next {}

  /**
   * The table "The work returns", once Complete recorded {@code report}: success returns the result;
   * failure throws {@link BusinessFailureException}; a {@link TransientException} (retryable)
   * throws {@link OperationDeadException} when the report spent the budget, else claims again (with
   * {@code retryTransient} false, the worker's case, it is rethrown); sent but unconfirmed claims again
   * with a reconcile callback, else throws {@link OutcomeUnknownException}; any other exception
   * (recorded retryable) is thrown ({@link #workError}), never claimed again.
   */
  static Next afterComplete(
      Operation operation,
      CompleteRequest report,
      Throwable error,
      boolean retryTransient,
      boolean canReconcile,
      long fencingToken) {
    OperationStatus status = operation.getStatus();
    switch (report.getOutcomeCase()) {
      case SUCCESS:
        if (status != OperationStatus.OPERATION_STATUS_SUCCEEDED) {
          throw new OpregException(where(operation) + ": Complete(success) answered status " + status);
        }
        return new Done(new Result(operation.getResult().toByteArray(), operation.getResultRef(), false, operation));
      case FAILURE: {
        Failure failure = operation.hasFailure() ? operation.getFailure() : report.getFailure();
        String code = failure.getCode().isEmpty() ? report.getFailure().getCode() : failure.getCode();
        String message = failure.getMessage().isEmpty() ? report.getFailure().getMessage() : failure.getMessage();
        throw new BusinessFailureException(
            where(operation) + ": business failure " + code + " recorded", error, code, message, false, operation);
      }
      case UNKNOWN:
        if (retryTransient && canReconcile) {
          return new ClaimAgain();
        }
        throw new OutcomeUnknownException(
            where(operation) + ": the outcome of execution " + fencingToken + " is unknown (remote_ref="
                + report.getUnknown().getRemoteRef() + ", recorded as " + status
                + ") and no reconcile callback was given to find out what happened",
            error,
            report.getUnknown().getRemoteRef(),
            fencingToken,
            operation);
      case RETRYABLE:
        if (error == null) {
          throw new OpregException(where(operation) + ": a retryable report without an error");
        }
        if (!(error instanceof TransientException transientError)) {
          // An unexpected error: the caller's to see; the queue keeps the retry.
          throw workError(error);
        }
        if (status == OperationStatus.OPERATION_STATUS_DEAD) {
          throw dead(operation, error);
        }
        if (retryTransient) {
          return new ClaimAgain();
        }
        throw transientError;
      default:
        throw new IllegalArgumentException("a report without an outcome");
    }
  }

  // -- the lease -----------------------------------------------------------------------------

  /** How long before its local expiry an unrenewed lease is given up: a tenth of its TTL. */
  static Duration expiryMargin(Duration leaseTtl) {
    return leaseTtl.dividedBy(10);
  }

  /**
   * The local expiry of a lease granted or renewed by a call sent at {@code startNanos} (for a Claim,
   * see {@link #claimLeaseStart}): the server's lease began no earlier than the send, so a slow answer
   * shortens the trusted time.
   */
  static long localExpiry(long startNanos, Duration leaseTtl) {
    return startNanos + leaseTtl.toNanos();
  }

  /** The time until which the lease is trusted: local expiry less the margin. */
  static long trustedUntil(long localExpiryNanos, Duration leaseTtl) {
    return localExpiryNanos - expiryMargin(leaseTtl).toNanos();
  }

  /** A Renew's timeout: the call timeout, never past the trusted time, at least {@link #MIN_RENEW_TIMEOUT}. */
  static Duration renewTimeout(Duration callTimeout, long localExpiryNanos, Duration leaseTtl, long nowNanos) {
    long left = trustedUntil(localExpiryNanos, leaseTtl) - nowNanos;
    long timeout = Math.max(MIN_RENEW_TIMEOUT.toNanos(), Math.min(callTimeout.toNanos(), left));
    return Duration.ofNanos(timeout);
  }

  /** What a failed Renew means. */
  sealed interface RenewStep permits Lost, RenewAgain {}

  /** The lease is lost: signal the work, send no Complete. */
  record Lost() implements RenewStep {}

  /** Retry the Renew after this wait. */
  record RenewAgain(Duration delay) implements RenewStep {}

  /**
   * The table "The lease", after the {@code attempt}-th (from 0) failed Renew in a row: any
   * non-transient error loses the lease; a transient one is retried after {@link #retryDelay}, never
   * past the trusted time ({@code trustedLeftNanos} from now), and once none is left the lease is lost.
   */
  static RenewStep decideRenewFailure(
      Throwable error, int attempt, long trustedLeftNanos, double random, Duration initial, Duration max) {
    if (!isTransient(error) || trustedLeftNanos <= 0) {
      return new Lost();
    }
    Duration retryInfo = ((OpregException) error).retryDelay().orElse(null); // transient: an UnavailableException
    Duration wait = retryDelay(attempt, retryInfo, random, initial, max);
    return new RenewAgain(notPast(wait, trustedLeftNanos));
  }

  // -- the worker ----------------------------------------------------------------------------

  /** What the worker does with one operation ClaimDue handed out. */
  enum DuePlan {
    /** ACQUIRED, or RECONCILE with a reconcile callback: run it. */
    RUN,
    /** RECONCILE without a callback: left alone until its reconcile lease expires. */
    NO_RECONCILER,
    /** Any other outcome (none is expected): left alone. */
    UNEXPECTED
  }

  static DuePlan planDue(DueOperation due, boolean hasReconciler) {
    return switch (due.getOutcome()) {
      case CLAIM_OUTCOME_ACQUIRED -> DuePlan.RUN;
      case CLAIM_OUTCOME_RECONCILE -> hasReconciler ? DuePlan.RUN : DuePlan.NO_RECONCILER;
      default -> DuePlan.UNEXPECTED;
    };
  }

  /** The kind a worker picks the handler by: the key up to its first {@code :} (all of it if none). */
  static String kindOf(String operationKey) {
    int colon = operationKey.indexOf(':');
    return colon < 0 ? operationKey : operationKey.substring(0, colon);
  }

  /** The wait after ClaimDue handed out nothing: the poll interval, give or take a fifth. */
  static Duration idleWait(Duration pollInterval, double random) {
    return Duration.ofNanos((long) (pollInterval.toNanos() * (0.8 + 0.4 * random)));
  }

  /** How many operations the next ClaimDue may ask for. */
  static int freeSlots(int maxInFlight, int inFlight) {
    return Math.min(maxInFlight - inFlight, MAX_CLAIM_DUE_LIMIT);
  }

  // -- text ------------------------------------------------------------------------------------

  static String where(Operation operation) {
    return operation.getNamespace() + "/" + operation.getOperationKey();
  }

  static String message(Throwable error) {
    return error.getMessage() == null ? "" : error.getMessage();
  }

  static List<String> describe(List<Execution> executions) {
    return executions.stream().map(e -> e.getFencingToken() + ":" + e.getOutcome()).toList();
  }
}
