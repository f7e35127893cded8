package dev.opreg.client;

import java.lang.System.Logger.Level;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ThreadLocalRandom;
import java.util.function.Consumer;
import opreg.v1.Registry.ClaimDueRequest;
import opreg.v1.Registry.ClaimDueResponse;
import opreg.v1.Registry.DueOperation;
import opreg.v1.Registry.Operation;

/**
 * Pulls due work from one namespace with ClaimDue (due retries, expired leases, unknown outcomes)
 * and runs each operation it is handed, at most {@code maxInFlight} at a time on threads of its
 * own, under that operation's lease by the run-once rules (renewals, loss, Complete, Lookup on
 * doubt). An operation is never claimed again by the worker itself: a recorded retry is handed out
 * by a later ClaimDue.
 *
 * <p>The handler is picked by the operation's kind, its key up to the first {@code :}. RECONCILE
 * operations go to the reconcile callback ({@code notApplied()} runs the handler under the same
 * lease); without one they are left alone until their reconcile lease expires. An operation whose
 * kind has no handler is recorded retryable with error class {@code NO_HANDLER}.
 *
 * <pre>{@code
 * Worker worker = Worker.builder(client, "payments")
 *     .handler("debit", (operation, lease) -> debit(operation.getParameters()))
 *     .reconcile((operation, lease) -> psp.check(operation.getRemoteRef()))
 *     .build();
 * Runtime.getRuntime().addShutdownHook(new Thread(worker::stop));
 * worker.run(); // until stop()
 * }</pre>
 */
public final class Worker {
  private static final System.Logger LOG = System.getLogger("dev.opreg.worker");

  /** What became of one operation the worker ran. */
  public record Finished(Operation operation, Operation recorded, Throwable error) {
    /** The operation's key. */
    public String operationKey() {
      return operation.getOperationKey();
    }
  }

  private final OpregClient client;
  private final RunOptions settings;
  private final String owner;
  private final Map<String, Handler> handlers;
  private final Handler defaultHandler;
  private final WorkerReconciler reconciler;
  private final int maxInFlight;
  private final Consumer<Finished> listener;
  private volatile Duration grace;

  private final Object wake = new Object();
  private final Map<Lease, Runner> inFlight = new ConcurrentHashMap<>();
  private boolean stopping; // guarded by wake
  private boolean started; // guarded by wake
  private int failures; // ClaimDue's transient failures in a row
  private final ExecutorService threads;

  private Worker(Builder b) {
    this.client = b.client;
    this.owner = b.owner != null ? b.owner : RunOptions.defaultOwner();
    RunOptions.Builder options = RunOptions.builder(b.namespace, "")
        .owner(owner)
        .executionId(b.executionId)
        .leaseTtl(b.leaseTtl)
        .callTimeout(b.callTimeout)
        .pollInterval(b.pollInterval)
        .transportBackoff(b.backoffInitial, b.backoffMax)
        .retryTransient(false);
    if (b.renewInterval != null) {
      options.renewInterval(b.renewInterval);
    }
    this.settings = options.buildForWorker();
    this.handlers = Map.copyOf(b.handlers);
    this.defaultHandler = b.defaultHandler;
    this.reconciler = b.reconciler;
    this.maxInFlight = b.maxInFlight;
    this.grace = b.grace;
    this.listener = b.listener;
    this.threads = Executors.newCachedThreadPool(OpregClient.daemonThreads("opreg-worker-" + b.namespace + "-"));
  }

  public static Builder builder(OpregClient client, String namespace) {
    return new Builder(client, namespace);
  }

  public String namespace() {
    return settings.namespace;
  }

  /** The owner every lease of this worker is held by. */
  public String owner() {
    return owner;
  }

  /** How many operations are running now. */
  public int inFlight() {
    return inFlight.size();
  }

  /**
   * Pulls and runs due operations until {@link #stop}; then lets the in-flight ones finish (within
   * the grace period; after it their leases are marked lost and their threads interrupted) and
   * returns. Throws what ClaimDue threw other than a transient error.
   */
  public void run() {
    synchronized (wake) {
      if (started) {
        throw new IllegalStateException("a worker runs once; make a new one");
      }
      started = true;
    }
    try {
      pull();
    } finally {
      drain();
    }
  }

  /** Stop pulling; in-flight operations get the grace period to finish. Returns at once. */
  public void stop() {
    synchronized (wake) {
      stopping = true;
      wake.notifyAll();
    }
  }

  /** {@link #stop()} with another grace period. */
  public void stop(Duration grace) {
    this.grace = Objects.requireNonNull(grace);
    stop();
  }

  private void pull() {
    while (true) {
      int free;
      synchronized (wake) {
        while (!stopping && Protocol.freeSlots(maxInFlight, inFlight.size()) <= 0) {
          waitOn(Duration.ofSeconds(1));
        }
        if (stopping) {
          return;
        }
        free = Protocol.freeSlots(maxInFlight, inFlight.size());
      }
      long claimedAt = System.nanoTime(); // the leases end at the latest lease TTL after this
      ClaimDueResponse response;
      try {
        response = client.claimDue(
            ClaimDueRequest.newBuilder()
                .setNamespace(settings.namespace)
                .setOwner(owner)
                .setExecutionId(settings.executionId)
                .setLeaseTtl(Durations.toProto(settings.leaseTtl))
                .setLimit(free)
                .build(),
            settings.callTimeout);
      } catch (OpregException error) {
        if (!error.isTransient()) {
          throw error;
        }
        Duration wait = Protocol.retryDelay(
            failures++, error.retryDelay().orElse(null), ThreadLocalRandom.current().nextDouble(),
            settings.backoffInitial, settings.backoffMax);
        LOG.log(Level.WARNING, "{0}: ClaimDue failed ({1}); again in {2}", namespace(), error, Durations.seconds(wait));
        sleep(wait);
        continue;
      }
      failures = 0;
      for (DueOperation due : response.getOperationsList()) {
        start(due, claimedAt);
      }
      if (response.getOperationsCount() == 0) {
        sleep(Protocol.idleWait(settings.pollInterval, ThreadLocalRandom.current().nextDouble()));
      }
    }
  }

  private void start(DueOperation due, long claimedAt) {
    Operation operation = due.getOperation();
    String key = operation.getOperationKey();
    switch (Protocol.planDue(due, reconciler != null)) {
      case NO_RECONCILER:
        LOG.log(Level.WARNING,
            "{0}/{1}: the last outcome is unknown (remote_ref={2}) and this worker has no reconcile callback;"
                + " left alone until its reconcile lease expires",
            namespace(), key, operation.getRemoteRef());
        return;
      case UNEXPECTED:
        LOG.log(Level.ERROR, "{0}/{1}: ClaimDue answered {2}; left alone", namespace(), key, due.getOutcome());
        return;
      case RUN:
      default:
        break;
    }
    String kind = Protocol.kindOf(key);
    Handler handler = handlers.getOrDefault(kind, defaultHandler);
    Work work = handler == null
        ? lease -> {
            throw new NoHandlerException(kind);
          }
        : lease -> handler.handle(lease.operation(), lease);
    Reconciler reconcile = reconciler == null ? null : (lease, remoteRef) -> reconciler.reconcile(lease.operation(), lease);
    Runner runner = new Runner(client, settings.forOperation(key, owner, reconcile), work);
    Runner.Attempt attempt = runner.attemptFor(due, claimedAt);
    inFlight.put(attempt.lease, runner); // counted before the next ClaimDue asks for free slots
    threads.execute(() -> {
      Throwable error = null;
      try {
        runner.runDue(attempt);
      } catch (Throwable e) {
        error = e;
      } finally {
        inFlight.remove(attempt.lease);
        finished(operation, attempt, error);
        synchronized (wake) {
          wake.notifyAll();
        }
      }
    });
  }

  private void finished(Operation operation, Runner.Attempt attempt, Throwable error) {
    String where = namespace() + "/" + operation.getOperationKey();
    Operation recorded = attempt != null ? attempt.recorded : null;
    if (recorded != null) {
      String what = "recorded " + attempt.report.getOutcomeCase().name().toLowerCase(java.util.Locale.ROOT)
          + " (now " + recorded.getStatus() + ")";
      if (error instanceof NoHandlerException noHandler) {
        LOG.log(Level.WARNING, "{0}: no handler for kind ''{1}''; {2}", where, noHandler.kind(), what);
      } else if (error instanceof OperationDeadException) {
        LOG.log(Level.WARNING, "{0}: {1}; the retry budget is spent, an operator decides", where, what);
      } else if (error == null
          || error instanceof BusinessFailureException
          || error instanceof TransientException
          || error instanceof OutcomeUnknownException) {
        LOG.log(Level.INFO, "{0}: {1}", where, what);
      } else {
        LOG.log(Level.WARNING, where + ": raised " + error + "; " + what, error);
      }
    } else if (error instanceof LeaseLostException || error instanceof RunCancelledException) {
      LOG.log(Level.WARNING, "{0}: {1}; nothing recorded", where, error.getMessage());
    } else {
      LOG.log(Level.ERROR, where + ": the outcome was not recorded: " + error, error);
    }
    if (listener != null) {
      try {
        listener.accept(new Finished(operation, recorded, error));
      } catch (RuntimeException e) {
        LOG.log(Level.WARNING, "the worker's listener failed", e);
      }
    }
  }

  private void drain() {
    synchronized (wake) {
      stopping = true;
      long end = System.nanoTime() + grace.toNanos();
      while (!inFlight.isEmpty() && System.nanoTime() < end) {
        waitOn(Duration.ofNanos(end - System.nanoTime()));
      }
      if (!inFlight.isEmpty()) {
        LOG.log(Level.WARNING, "{0}: {1} operation(s) still running after the {2} grace period; cancelling their work",
            namespace(), inFlight.size(), Durations.seconds(grace));
        for (Runner runner : inFlight.values()) {
          runner.cancel("the worker stopped and its " + Durations.seconds(grace) + " grace period ran out");
        }
        long unwind = System.nanoTime() + Protocol.UNWIND_TIMEOUT.toNanos();
        while (!inFlight.isEmpty() && System.nanoTime() < unwind) {
          waitOn(Duration.ofNanos(unwind - System.nanoTime()));
        }
        if (!inFlight.isEmpty()) {
          LOG.log(Level.WARNING, "{0}: {1} cancelled operation(s) did not unwind within {2}; their leases are no longer renewed",
              namespace(), inFlight.size(), Durations.seconds(Protocol.UNWIND_TIMEOUT));
        }
      }
    }
    threads.shutdown();
  }

  private void waitOn(Duration wait) {
    try {
      wake.wait(Math.max(1, wait.toMillis()));
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      stopping = true;
    }
  }

  private void sleep(Duration wait) {
    synchronized (wake) {
      long end = System.nanoTime() + wait.toNanos();
      while (!stopping && System.nanoTime() < end) {
        waitOn(Duration.ofNanos(end - System.nanoTime()));
      }
    }
  }

  /** Builds a {@link Worker}. */
  public static final class Builder {
    private final OpregClient client;
    private final String namespace;
    private final Map<String, Handler> handlers = new HashMap<>();
    private Handler defaultHandler;
    private WorkerReconciler reconciler;
    private String owner;
    private String executionId = "";
    private int maxInFlight = 8;
    private Duration leaseTtl = RunOptions.DEFAULT_LEASE_TTL;
    private Duration pollInterval = RunOptions.DEFAULT_POLL_INTERVAL;
    private Duration grace = Duration.ofSeconds(30);
    private Duration renewInterval;
    private Duration callTimeout = RunOptions.DEFAULT_CALL_TIMEOUT;
    private Duration backoffInitial = RunOptions.DEFAULT_BACKOFF_INITIAL;
    private Duration backoffMax = RunOptions.DEFAULT_BACKOFF_MAX;
    private Consumer<Finished> listener;

    private Builder(OpregClient client, String namespace) {
      this.client = Objects.requireNonNull(client);
      this.namespace = Objects.requireNonNull(namespace);
    }

    /** The handler of the operations of {@code kind} (the key up to its first {@code :}). */
    public Builder handler(String kind, Handler handler) {
      handlers.put(kind, Objects.requireNonNull(handler));
      return this;
    }

    /** The handler of every kind that has none of its own. */
    public Builder defaultHandler(Handler handler) {
      this.defaultHandler = handler;
      return this;
    }

    public Builder reconcile(WorkerReconciler reconciler) {
      this.reconciler = reconciler;
      return this;
    }

    public Builder owner(String owner) {
      this.owner = owner;
      return this;
    }

    public Builder executionId(String executionId) {
      this.executionId = Objects.requireNonNull(executionId);
      return this;
    }

    public Builder maxInFlight(int maxInFlight) {
      if (maxInFlight < 1) {
        throw new IllegalArgumentException("maxInFlight must be at least 1, not " + maxInFlight);
      }
      this.maxInFlight = maxInFlight;
      return this;
    }

    public Builder leaseTtl(Duration leaseTtl) {
      this.leaseTtl = leaseTtl;
      return this;
    }

    /** The wait after ClaimDue handed out nothing (give or take a fifth). */
    public Builder pollInterval(Duration pollInterval) {
      this.pollInterval = pollInterval;
      return this;
    }

    /** How long in-flight operations get to finish after {@link Worker#stop()}. */
    public Builder grace(Duration grace) {
      this.grace = grace;
      return this;
    }

    public Builder renewInterval(Duration renewInterval) {
      this.renewInterval = renewInterval;
      return this;
    }

    public Builder callTimeout(Duration callTimeout) {
      this.callTimeout = callTimeout;
      return this;
    }

    public Builder transportBackoff(Duration initial, Duration max) {
      this.backoffInitial = initial;
      this.backoffMax = max;
      return this;
    }

    /** Told what became of each operation the worker ran (on the operation's thread). */
    public Builder listener(Consumer<Finished> listener) {
      this.listener = listener;
      return this;
    }

    public Worker build() {
      if (handlers.isEmpty() && defaultHandler == null) {
        throw new IllegalStateException("give handlers by kind, a default handler, or both");
      }
      return new Worker(this);
    }
  }
}
