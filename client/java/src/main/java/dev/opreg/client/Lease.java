package dev.opreg.client;

import com.google.protobuf.ByteString;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import opreg.v1.Registry.FencedWriteRequest;
import opreg.v1.Registry.FencedWriteResponse;
import opreg.v1.Registry.Operation;

/**
 * The lease an execution holds, handed to the work and the reconcile callback.
 *
 * <p>{@link #isLost()} turns true (and stays true) when a renewal is refused (any error that is not
 * transient), no renewal succeeded before the lease's local expiry, or the helper was cancelled. Then
 * the work's thread is interrupted, {@link #await} returns, {@link #check()} throws, and nothing the
 * work returns is reported: the helper throws {@link LeaseLostException}.
 */
public final class Lease {
  private final OpregClient client;
  private final String namespace;
  private final String operationKey;
  private final String owner;
  private final long fencingToken;
  private final int attempt;
  private final boolean takeover;
  private final boolean reconciling;
  private final String remoteRef;
  private final Operation operation;
  private final Duration leaseTtl;

  private final Object lock = new Object();
  private final List<Runnable> onLost = new ArrayList<>();
  private volatile Instant expiresAt;
  private volatile long localExpiryNanos;
  private volatile boolean lost;
  private volatile Throwable lostReason;
  private volatile String resultRef = "";
  private Thread workThread; // guarded by lock: the thread running the work, interrupted on loss
  private boolean interruptedWork; // guarded by lock

  Lease(
      OpregClient client,
      String namespace,
      String operationKey,
      opreg.v1.Registry.Lease lease,
      boolean reconciling,
      Operation operation,
      Duration leaseTtl,
      long localExpiryNanos) {
    this.client = client;
    this.namespace = namespace;
    this.operationKey = operationKey;
    this.owner = lease.getOwner();
    this.fencingToken = lease.getFencingToken();
    this.attempt = lease.getAttempt();
    this.takeover = lease.getTakeover();
    this.reconciling = reconciling;
    this.remoteRef = operation.getRemoteRef();
    this.operation = operation;
    this.leaseTtl = leaseTtl;
    this.expiresAt = instant(lease);
    this.localExpiryNanos = localExpiryNanos;
  }

  public String namespace() {
    return namespace;
  }

  public String operationKey() {
    return operationKey;
  }

  public String owner() {
    return owner;
  }

  public long fencingToken() {
    return fencingToken;
  }

  /** The attempt this execution runs as (a reconciliation shares the attempt it checks). */
  public int attempt() {
    return attempt;
  }

  /** True when this lease took over an expired one. */
  public boolean takeover() {
    return takeover;
  }

  /** True for a reconcile lease (Claim answered RECONCILE). */
  public boolean reconciling() {
    return reconciling;
  }

  /** The remote reference of the unknown attempt being reconciled ({@code ""} otherwise). */
  public String remoteRef() {
    return remoteRef;
  }

  /** The operation as Claim (or ClaimDue, with its parameters) answered it. */
  public Operation operation() {
    return operation;
  }

  public Duration leaseTtl() {
    return leaseTtl;
  }

  /** The server's expiry of the lease, as granted or last renewed. */
  public Instant expiresAt() {
    return expiresAt;
  }

  public boolean isLost() {
    return lost;
  }

  /** Why the lease was lost, once it was. */
  public Optional<Throwable> lostReason() {
    return Optional.ofNullable(lostReason);
  }

  /** Throws {@link LeaseLostException} if the lease was lost. */
  public void check() {
    if (lost) {
      throw lostError(lostReason);
    }
  }

  /**
   * Sleeps up to {@code timeout}; returns true as soon as the lease is lost (false when the time
   * passed with the lease still held, or the thread was interrupted for another reason).
   */
  public boolean await(Duration timeout) {
    long end = System.nanoTime() + timeout.toNanos();
    synchronized (lock) {
      while (!lost) {
        long left = end - System.nanoTime();
        if (left <= 0) {
          return false;
        }
        try {
          lock.wait(left / 1_000_000, (int) (left % 1_000_000));
        } catch (InterruptedException e) {
          if (lost) {
            return true;
          }
          Thread.currentThread().interrupt();
          return false;
        }
      }
      return true;
    }
  }

  /** Runs {@code callback} once, when the lease is lost (at once if it already is). */
  public void onLost(Runnable callback) {
    synchronized (lock) {
      if (!lost) {
        onLost.add(callback);
        return;
      }
    }
    callback.run();
  }

  /** The {@code result_ref} to record with the work's result (e.g. a ledger entry). */
  public void setResultRef(String resultRef) {
    this.resultRef = resultRef == null ? "" : resultRef;
  }

  public String resultRef() {
    return resultRef;
  }

  /**
   * FencedWrite of {@code resource} with this lease's token. A refusal ({@code STALE_FENCING_TOKEN}:
   * another execution took over) loses the lease and throws {@link LeaseLostException}.
   */
  public FencedWriteResponse fencedWrite(String resource, byte[] value) {
    check();
    try {
      return client.fencedWrite(FencedWriteRequest.newBuilder()
          .setNamespace(namespace)
          .setResource(resource)
          .setOperationKey(operationKey)
          .setFencingToken(fencingToken)
          .setValue(ByteString.copyFrom(value))
          .build());
    } catch (StaleFencingTokenException e) {
      throw lose(e);
    }
  }

  @Override
  public String toString() {
    return "Lease[" + namespace + "/" + operationKey + ", owner=" + owner + ", fencingToken=" + fencingToken
        + ", attempt=" + attempt + ", lost=" + lost + "]";
  }

  // -- the helper's side ---------------------------------------------------------------------

  long localExpiryNanos() {
    return localExpiryNanos;
  }

  void renewed(opreg.v1.Registry.Lease lease, long newLocalExpiryNanos) {
    this.expiresAt = instant(lease);
    this.localExpiryNanos = newLocalExpiryNanos;
  }

  /** Marks the lease lost (once): interrupts the work, wakes {@link #await}, runs the callbacks. */
  void markLost(Throwable reason) {
    List<Runnable> callbacks;
    synchronized (lock) {
      if (lost) {
        return;
      }
      lostReason = reason;
      lost = true;
      if (workThread != null) {
        interruptedWork = true;
        workThread.interrupt();
      }
      lock.notifyAll();
      callbacks = new ArrayList<>(onLost);
      onLost.clear();
    }
    for (Runnable callback : callbacks) {
      try {
        callback.run();
      } catch (RuntimeException e) {
        // A callback's failure must not keep the others from running.
      }
    }
  }

  /** Marks the lease lost; the error to throw. */
  LeaseLostException lose(Throwable reason) {
    markLost(reason);
    return lostError(lostReason);
  }

  LeaseLostException lostError(Throwable cause) {
    return new LeaseLostException(
        "lease " + fencingToken + " on " + namespace + "/" + operationKey + " was lost: " + lostReason,
        cause != null ? cause : lostReason,
        fencingToken);
  }

  /** Wakes whatever waits on the lease (a stopping renewer). */
  void wake() {
    synchronized (lock) {
      lock.notifyAll();
    }
  }

  /** Waits up to {@code wait} for {@code stop} or the loss of the lease; true when either happened. */
  boolean awaitStop(Duration wait, java.util.function.BooleanSupplier stop) {
    long end = System.nanoTime() + wait.toNanos();
    synchronized (lock) {
      while (!lost && !stop.getAsBoolean()) {
        long left = end - System.nanoTime();
        if (left <= 0) {
          return false;
        }
        try {
          lock.wait(Math.max(1, left / 1_000_000));
        } catch (InterruptedException e) {
          return true;
        }
      }
      return true;
    }
  }

  /** Something the work or the reconcile callback does. */
  @FunctionalInterface
  interface Body<T> {
    T run() throws Exception;
  }

  /** Runs {@code body} on this thread, which the loss of the lease interrupts. */
  <T> T runInterruptibly(Body<T> body) throws Exception {
    synchronized (lock) {
      workThread = Thread.currentThread();
      if (lost) {
        interruptedWork = true;
        workThread.interrupt();
      }
    }
    try {
      return body.run();
    } finally {
      synchronized (lock) {
        workThread = null;
        if (interruptedWork) {
          Thread.interrupted(); // the interrupt was ours: do not leak it to the caller
          interruptedWork = false;
        }
      }
    }
  }

  private static Instant instant(opreg.v1.Registry.Lease lease) {
    return Instant.ofEpochSecond(lease.getExpiresAt().getSeconds(), lease.getExpiresAt().getNanos());
  }
}
