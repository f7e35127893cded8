package dev.opreg.client;

import java.time.Duration;
import java.util.concurrent.CancellationException;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicInteger;
import opreg.v1.Registry.ClaimRequest;
import opreg.v1.Registry.ClaimResponse;
import opreg.v1.Registry.CompleteRequest;
import opreg.v1.Registry.CompleteResponse;
import opreg.v1.Registry.DueOperation;
import opreg.v1.Registry.LookupRequest;
import opreg.v1.Registry.LookupResponse;
import opreg.v1.Registry.Operation;

/**
 * One run of the run-once helper (or one operation of the worker): makes the calls {@link Protocol}
 * decides on, sleeps its waits, runs the renewals and the work. Cancellable from another thread.
 */
final class Runner {
  private final OpregClient client;
  private final RunOptions options;
  private final String owner;
  private final Work work;
  private final Reconciler reconciler;
  private volatile boolean cancelled;
  private volatile Thread thread;
  private volatile Lease current;

  Runner(OpregClient client, RunOptions options, Work work) {
    this.client = client;
    this.options = options;
    this.owner = options.owner != null ? options.owner : RunOptions.defaultOwner();
    this.work = work;
    this.reconciler = options.reconciler;
  }

  /** Cancels the run: the current lease is marked lost (no Complete), the run's thread interrupted. */
  void cancel() {
    cancel("the run-once helper was cancelled");
  }

  void cancel(String why) {
    cancelled = true;
    Lease lease = current;
    if (lease != null) {
      lease.markLost(new CancellationException(why));
    }
    Thread running = thread;
    if (running != null) {
      running.interrupt();
    }
  }

  /** The run-once call's overall deadline (System.nanoTime()); null for operations ClaimDue handed out. */
  private Long overallDeadline;

  /** The run-once helper: claim, wait, execute, until a result or an error. */
  Result runOnce() {
    thread = Thread.currentThread();
    try {
      long deadline = System.nanoTime() + options.deadline.toNanos();
      overallDeadline = deadline;
      ClaimRequest request = options.claimRequest(owner);
      Throwable lastError = null; // what the last execution threw when it asked to claim again
      while (true) {
        checkCancelled();
        Claimed claimed = claim(request, deadline, lastError);
        ClaimResponse response = claimed.response();
        Protocol.ClaimStep step = Protocol.decideClaimAnswer(
            response, deadline - System.nanoTime(), options.pollInterval, ThreadLocalRandom.current().nextDouble(), lastError);
        if (step instanceof Protocol.Replayed replayed) {
          return replayed.result();
        }
        if (step instanceof Protocol.Wait wait) {
          sleep(wait.delay());
          continue;
        }
        Attempt attempt = new Attempt(
            response.getLease(), response.getOperation(), ((Protocol.Execute) step).reconciling(), claimed.leaseStart());
        Protocol.Next next = execute(attempt, options.retryTransient);
        if (next instanceof Protocol.Done done) {
          return done.result();
        }
        lastError = attempt.error;
      }
    } finally {
      thread = null;
    }
  }

  /** A Claim's answer, and when its lease began at the earliest (what its local expiry is measured from). */
  private record Claimed(ClaimResponse response, long leaseStart) {}

  /**
   * One Claim, its transient errors retried until the deadline. Each attempt asks the server to wait
   * (the rest of the deadline, at most {@code maxClaimWait}) and is given that much more time than a
   * call timeout.
   */
  private Claimed claim(ClaimRequest request, long deadline, Throwable lastError) {
    long firstSent = System.nanoTime(); // the lease began no earlier than this send
    AtomicInteger attempts = new AtomicInteger();
    // The try's timeout retry() offers is bounded by the deadline; a Claim's is not: the server's
    // wait ends at the deadline, and its answer needs a call timeout more to arrive.
    ClaimResponse response = retry(tryTimeout -> {
      attempts.incrementAndGet();
      Duration wait = Protocol.serverWait(options.maxClaimWait, deadline - System.nanoTime());
      ClaimRequest waiting = request.toBuilder().setWait(Durations.toProto(wait)).build();
      return client.claim(waiting, Protocol.claimTimeout(options.callTimeout, wait));
    }, deadline, "Claim", lastError);
    return new Claimed(response, Protocol.claimLeaseStart(firstSent, response, attempts.get() == 1));
  }

  /** The attempt for an operation ClaimDue handed out (built before it runs, to count it in flight). */
  Attempt attemptFor(DueOperation due, long claimedAt) {
    return new Attempt(
        due.getLease(), due.getOperation(), due.getOutcome() == opreg.v1.Registry.ClaimOutcome.CLAIM_OUTCOME_RECONCILE, claimedAt);
  }

  /**
   * Runs one operation ClaimDue handed out, by the same execution rules; never claimed again here (a
   * recorded retry is handed out by a later ClaimDue): a recorded TransientException is rethrown and
   * an unconfirmed outcome is OutcomeUnknown. Returns the recorded result.
   */
  Result runDue(Attempt attempt) {
    thread = Thread.currentThread();
    try {
      return ((Protocol.Done) execute(attempt, false)).result();
    } finally {
      thread = null;
    }
  }

  /** The state of one execution under a lease. */
  final class Attempt {
    final Lease lease;
    final boolean reconciling;
    CompleteRequest report; // what Complete is to record
    Throwable error; // what the work or the reconcile callback threw
    RuntimeException raiseAfter; // thrown once the report is recorded, whatever it was
    Operation recorded; // the operation once Complete recorded the report

    Attempt(opreg.v1.Registry.Lease grant, Operation operation, boolean reconciling, long leaseStart) {
      this.reconciling = reconciling;
      this.lease = new Lease(
          client,
          options.namespace,
          options.operationKey,
          grant,
          reconciling,
          operation,
          options.leaseTtl,
          Protocol.localExpiry(leaseStart, options.leaseTtl));
      if (reconciling && reconciler == null) {
        // Hand the reconcile lease back at once (Complete(unknown), same remote ref), then raise.
        ReconcileRequiredException required = Protocol.reconcileRequired(operation);
        this.error = required;
        this.raiseAfter = required;
        this.report = Protocol.handBackReport(operation.getRemoteRef());
      }
    }
  }

  private Protocol.Next execute(Attempt attempt, boolean retryTransient) {
    Lease lease = attempt.lease;
    current = lease;
    if (cancelled) {
      lease.markLost(new CancellationException("the run-once helper was cancelled"));
    }
    Renewer renewer = new Renewer(client, lease, options);
    renewer.start();
    CompleteResponse completed;
    try { // the lease is renewed during reconcile, work and Complete
      if (attempt.reconciling && attempt.report == null) {
        try {
          Reconciliation verdict = lease.runInterruptibly(() -> reconciler.reconcile(lease, lease.remoteRef()));
          attempt.report = Protocol.reconcileReport(verdict);
        } catch (Exception e) {
          failed(attempt, e, Protocol.reconcileErrorReport(e, lease.remoteRef()));
          attempt.raiseAfter = Protocol.workError(e);
        }
        lease.check(); // lost during reconcile: stop, do not run the work
      }
      if (attempt.report == null) {
        try {
          byte[] value = lease.runInterruptibly(() -> work.run(lease));
          attempt.report = Protocol.successReport(value, lease.resultRef());
        } catch (Exception e) {
          failed(attempt, e, Protocol.errorReport(e));
        }
      }
      completed = complete(attempt);
    } finally {
      renewer.stop();
      current = null;
    }
    attempt.recorded = completed.getOperation();
    if (attempt.raiseAfter != null) {
      throw attempt.raiseAfter;
    }
    return Protocol.afterComplete(
        completed.getOperation(), attempt.report, attempt.error, retryTransient, reconciler != null, lease.fencingToken());
  }

  private void failed(Attempt attempt, Exception error, CompleteRequest report) {
    Lease lease = attempt.lease;
    if (Protocol.isLeaseLoss(error)) {
      throw lease.lose(error);
    }
    if (lease.isLost()) {
      throw lease.lostError(error);
    }
    if (error instanceof InterruptedException) {
      // Interrupted by someone else than the lease: a cancellation. Nothing is reported; the lease lapses.
      lease.markLost(error);
      Thread.currentThread().interrupt();
      throw new RunCancelledException("the work was interrupted; nothing was reported", error);
    }
    attempt.error = error;
    attempt.report = report;
  }

  /** Complete, retried for its own time; when its result is in doubt, a Lookup decides. */
  private CompleteResponse complete(Attempt attempt) {
    Lease lease = attempt.lease;
    if (lease.isLost()) {
      throw lease.lostError(attempt.error != null ? attempt.error : lease.lostReason().orElse(null));
    }
    CompleteRequest request = attempt.report.toBuilder()
        .setNamespace(options.namespace)
        .setOperationKey(options.operationKey)
        .setFencingToken(lease.fencingToken())
        .build();
    Duration own = options.callTimeout.multipliedBy(Protocol.COMPLETE_CALL_TIMEOUTS);
    // The rest of the overall deadline, and at least its own call timeouts, past the deadline if need be.
    long until = System.nanoTime() + own.toNanos();
    if (overallDeadline != null && overallDeadline - until > 0) {
      until = overallDeadline;
    }
    try {
      return retry(timeout -> client.complete(request, timeout), until, "Complete", attempt.error);
    } catch (OpregException error) {
      switch (Protocol.decideCompleteError(error)) {
        case LEASE_LOST:
          throw lease.lose(error);
        case RAISE:
          throw error;
        case IN_DOUBT:
        default:
          break;
      }
      if (error instanceof RunCancelledException) {
        throw error;
      }
      LookupRequest lookup = LookupRequest.newBuilder()
          .setNamespace(options.namespace)
          .setOperationKey(options.operationKey)
          .setIncludeExecutions(true)
          .build();
      LookupResponse looked;
      try {
        looked = retry(timeout -> client.lookup(lookup, timeout), System.nanoTime() + own.toNanos(), "Lookup after Complete", error);
      } catch (RunCancelledException cancelled) {
        throw cancelled;
      } catch (OpregException lookupError) {
        looked = null;
      }
      switch (Protocol.decideCallInDoubt(looked, lease.fencingToken(), attempt.report)) {
        case RECORDED:
          return CompleteResponse.newBuilder().setOperation(looked.getOperation()).build();
        case LEASE_LOST:
          throw lease.lose(error);
        case NOT_RECORDED:
        default:
          throw new OutcomeNotRecordedException(
              options.namespace + "/" + options.operationKey + ": the outcome of execution " + lease.fencingToken()
                  + " (" + attempt.report.getOutcomeCase() + ") was not recorded: Complete failed (" + error
                  + ") and Lookup shows " + Protocol.lookupShowed(looked, lease.fencingToken()),
              error,
              lease.fencingToken(),
              attempt.report);
      }
    }
  }

  /** One call with a timeout. */
  @FunctionalInterface
  interface Call<T> {
    T call(Duration timeout);
  }

  /**
   * Makes {@code call} until it answers, retrying the transient errors with backoff (at least the
   * server's RetryInfo delay), never past {@code deadline}; then DeadlineExceededException.
   */
  private <T> T retry(Call<T> call, long deadline, String what, Throwable cause) {
    Throwable last = cause;
    int failures = 0;
    while (true) {
      checkCancelled();
      Duration timeout = Protocol.tryTimeout(options.callTimeout, deadline - System.nanoTime());
      if (timeout == null) {
        throw new DeadlineExceededException(
            options.namespace + "/" + options.operationKey + ": deadline exceeded before " + what + " succeeded",
            last,
            null,
            null);
      }
      try {
        return call.call(timeout);
      } catch (OpregException error) {
        checkCancelled();
        if (!error.isTransient()) {
          throw error;
        }
        last = error;
        Duration wait = Protocol.retryDelay(
            failures++, error.retryDelay().orElse(null), ThreadLocalRandom.current().nextDouble(),
            options.backoffInitial, options.backoffMax);
        sleep(Protocol.notPast(wait, deadline - System.nanoTime()));
      }
    }
  }

  private void checkCancelled() {
    if (cancelled || Thread.currentThread().isInterrupted()) {
      throw new RunCancelledException("the run-once helper was cancelled", null);
    }
  }

  private void sleep(Duration wait) {
    try {
      Thread.sleep(wait.toMillis(), (int) (wait.toNanos() % 1_000_000));
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new RunCancelledException("the run-once helper was interrupted", e);
    }
  }
}
