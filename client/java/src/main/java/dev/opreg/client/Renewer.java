package dev.opreg.client;

import java.time.Duration;
import java.util.concurrent.ThreadLocalRandom;
import opreg.v1.Registry.RenewRequest;
import opreg.v1.Registry.RenewResponse;

/**
 * Renews one lease every renew interval on a thread of its own until stopped; marks it lost when a
 * renewal is refused (any error that is not transient) or it could not be renewed in time.
 */
final class Renewer implements Runnable {
  private final OpregClient client;
  private final Lease lease;
  private final RunOptions options;
  private final Thread thread;
  private volatile boolean stopped;

  Renewer(OpregClient client, Lease lease, RunOptions options) {
    this.client = client;
    this.lease = lease;
    this.options = options;
    this.thread = new Thread(this, "opreg-renew-" + lease.fencingToken());
    this.thread.setDaemon(true);
  }

  void start() {
    thread.start();
  }

  /** Stops the renewals (an in-flight Renew is cancelled) and waits for the thread to end. */
  void stop() {
    stopped = true;
    lease.wake();
    thread.interrupt();
    boolean interrupted = false;
    while (thread.isAlive()) {
      try {
        thread.join();
      } catch (InterruptedException e) {
        interrupted = true;
      }
    }
    if (interrupted) {
      Thread.currentThread().interrupt();
    }
  }

  @Override
  public void run() {
    Duration wait = options.renewInterval;
    int failures = 0;
    RenewRequest request = RenewRequest.newBuilder()
        .setNamespace(lease.namespace())
        .setOperationKey(lease.operationKey())
        .setOwner(lease.owner())
        .setFencingToken(lease.fencingToken())
        .setLeaseTtl(Durations.toProto(options.leaseTtl))
        .build();
    while (true) {
      if (lease.awaitStop(wait, () -> stopped) || stopped || lease.isLost()) {
        return;
      }
      long sent = System.nanoTime();
      try {
        RenewResponse response = client.renew(
            request, Protocol.renewTimeout(options.callTimeout, lease.localExpiryNanos(), options.leaseTtl, sent));
        lease.renewed(response.getLease(), Protocol.localExpiry(sent, options.leaseTtl));
        failures = 0;
        wait = options.renewInterval;
      } catch (RuntimeException error) {
        if (stopped) {
          return;
        }
        long trustedLeft = Protocol.trustedUntil(lease.localExpiryNanos(), options.leaseTtl) - System.nanoTime();
        Protocol.RenewStep step = Protocol.decideRenewFailure(
            error, failures++, trustedLeft, ThreadLocalRandom.current().nextDouble(), options.backoffInitial, options.backoffMax);
        if (step instanceof Protocol.RenewAgain again) {
          wait = again.delay();
        } else {
          lease.markLost(error);
          return;
        }
      }
    }
  }
}
