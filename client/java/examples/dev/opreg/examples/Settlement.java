package dev.opreg.examples;

import com.google.protobuf.ByteString;
import dev.opreg.client.AlreadyCompensatedException;
import dev.opreg.client.Durations;
import dev.opreg.client.Lease;
import dev.opreg.client.OpregClient;
import dev.opreg.client.OpregException;
import dev.opreg.client.ParameterConflictException;
import dev.opreg.client.Parameters;
import dev.opreg.client.Reconciliation;
import dev.opreg.client.ResourceNotFoundException;
import dev.opreg.client.Result;
import dev.opreg.client.RunOptions;
import dev.opreg.client.StaleFencingTokenException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import opreg.v1.Registry.ClaimOutcome;
import opreg.v1.Registry.ClaimRequest;
import opreg.v1.Registry.ClaimResponse;
import opreg.v1.Registry.CompleteRequest;
import opreg.v1.Registry.FencedWriteRequest;
import opreg.v1.Registry.GetResourceRequest;
import opreg.v1.Registry.LookupRequest;
import opreg.v1.Registry.LookupResponse;
import opreg.v1.Registry.Operation;
import opreg.v1.Registry.OperationStatus;
import opreg.v1.Registry.Success;
import opreg.v1.Registry.UnknownOutcome;

/**
 * The idempotency lab of the seed article, replayed against a running opreg server, one line per
 * check (as {@code client/rust/examples/settlement.rs} does): a concurrent claim whose losers wait
 * (the lock wait, observed), the parameter conflict, the unknown result resolved by the operation
 * key, an unknown outcome reconciled before anyone re-executes, the stale token refused after a
 * takeover, the compensation applied once, and the final balance 900.
 *
 * <pre>
 * java -cp "target/classes:target/test-classes:$(cat target/classpath.txt)" dev.opreg.examples.Settlement 127.0.0.1:50051
 * </pre>
 *
 * <p>ADDRESS ({@code host:port} or {@code http://host:port}) defaults to $OPREG_ENDPOINT or
 * 127.0.0.1:50051. Each run uses a fresh namespace, so it can be repeated against the same server.
 * The account balance is an opreg resource written with FencedWrite, so every debit is fenced by
 * the lease of the operation that makes it. Exits 1 when a check fails.
 */
public final class Settlement {
  static final String ACCOUNT = "account:1";

  private final OpregClient client;
  private final String namespace;
  private int failures;

  Settlement(OpregClient client, String namespace) {
    this.client = client;
    this.namespace = namespace;
  }

  public static void main(String[] args) {
    String address = args.length > 0 ? args[0] : System.getenv().getOrDefault("OPREG_ENDPOINT", "127.0.0.1:50051");
    int failed;
    try (OpregClient client = OpregClient.builder(address).timeout(Duration.ofSeconds(10)).build()) {
      failed = run(client, "lab-" + System.currentTimeMillis() + "-" + ProcessHandle.current().pid());
    }
    System.exit(failed == 0 ? 0 : 1);
  }

  /** Runs every check in {@code namespace}; the number that failed. */
  public static int run(OpregClient client, String namespace) {
    Settlement lab = new Settlement(client, namespace);
    try {
      lab.openAccount();
      lab.concurrentDebit();
      lab.parameterConflict();
      lab.lostResponse();
      lab.unknownOutcome();
      lab.staleToken();
      lab.compensation();
      long balance = lab.balance();
      lab.check(balance == 900, "finalBalance=" + balance + " (1000 - 100 - 100 + 100)");
    } catch (Exception e) {
      System.out.println("FAIL lab aborted: " + e);
      lab.failures++;
    }
    System.out.println(lab.failures == 0 ? "all checks passed" : lab.failures + " check(s) failed");
    return lab.failures;
  }

  void check(boolean ok, String line) {
    System.out.println((ok ? "ok   " : "FAIL ") + line);
    if (!ok) {
      failures++;
    }
  }

  ClaimRequest request(String key, String owner, Map<String, ?> params) {
    return ClaimRequest.newBuilder()
        .setNamespace(namespace)
        .setOperationKey(key)
        .setOwner(owner)
        .setExecutionId(owner + "-run")
        .setParameters(Parameters.toStruct(params))
        .build();
  }

  /** The account balance; an account never written holds 0. */
  long balance() {
    try {
      return Long.parseLong(client.getResource(GetResourceRequest.newBuilder()
          .setNamespace(namespace).setResource(ACCOUNT).build()).getValue().toStringUtf8());
    } catch (ResourceNotFoundException e) {
      return 0;
    }
  }

  /** Adds {@code delta} to the balance, fenced by the token of {@code key}. */
  long write(String key, long token, long delta) {
    long balance = balance() + delta;
    client.fencedWrite(FencedWriteRequest.newBuilder()
        .setNamespace(namespace).setResource(ACCOUNT).setOperationKey(key).setFencingToken(token)
        .setValue(ByteString.copyFromUtf8(Long.toString(balance))).build());
    return balance;
  }

  /** Adds {@code delta} under the lease of {@code key}, then records success. */
  long apply(String key, long token, long delta) {
    long balance = write(key, token, delta);
    complete(key, token, "balance=" + balance);
    return balance;
  }

  Operation complete(String key, long token, String result) {
    return client.complete(CompleteRequest.newBuilder()
        .setNamespace(namespace).setOperationKey(key).setFencingToken(token)
        .setSuccess(Success.newBuilder().setResult(ByteString.copyFromUtf8(result)).setResultRef("ledger:" + key))
        .build()).getOperation();
  }

  static long token(ClaimResponse response) {
    if (!response.hasLease()) {
      throw new IllegalStateException("expected a lease, got " + response.getOutcome());
    }
    return response.getLease().getFencingToken();
  }

  static String outcome(ClaimResponse response) {
    return response.getOutcome().name().replaceFirst("^CLAIM_OUTCOME_", "");
  }

  void openAccount() {
    ClaimResponse opened = client.claim(request("open:account:1", "setup", Map.of("balance", 1000)));
    apply("open:account:1", token(opened), 1000);
  }

  /**
   * Sixteen workers claim order-A at once: one acquires it, the others are told another live lease
   * holds it (IN_PROGRESS, with when to come back): the lock wait. A late run-once call waits on it
   * and, once the winner has debited, replays its result instead of debiting again.
   */
  void concurrentDebit() throws Exception {
    Map<String, Object> params = Map.of("account", 1, "amount", 100);
    ExecutorService pool = Executors.newFixedThreadPool(16);
    List<Future<ClaimResponse>> racers = new ArrayList<>();
    CountDownLatch go = new CountDownLatch(1);
    try {
      for (int worker = 0; worker < 16; worker++) {
        ClaimRequest request = request("order-A", "worker-" + worker, params);
        racers.add(pool.submit(() -> {
          go.await();
          return client.claim(request);
        }));
      }
      go.countDown();
      ClaimResponse winner = null;
      int acquired = 0;
      int waiting = 0;
      boolean told = true;
      for (Future<ClaimResponse> racer : racers) {
        ClaimResponse response = racer.get(30, TimeUnit.SECONDS);
        if (response.getOutcome() == ClaimOutcome.CLAIM_OUTCOME_ACQUIRED) {
          acquired++;
          winner = response;
        } else if (response.getOutcome() == ClaimOutcome.CLAIM_OUTCOME_IN_PROGRESS) {
          waiting++;
          told &= response.hasRetryAfter();
        }
      }
      check(acquired == 1 && waiting == 15 && told,
          "concurrentClaim: ACQUIRED=" + acquired + " IN_PROGRESS=" + waiting + " lockWaitObserved=" + (waiting > 0 && told));
      if (winner == null) {
        throw new IllegalStateException("nobody acquired order-A");
      }

      AtomicInteger lateRuns = new AtomicInteger();
      CompletableFuture<Result> late = client.runOnceAsync(
          RunOptions.builder(namespace, "order-A").parameters(Map.of("amount", 100, "account", 1))
              .owner("worker-late").pollInterval(Duration.ofMillis(100)).build(),
          lease -> {
            lateRuns.incrementAndGet();
            return bytes("debited twice");
          });
      Thread.sleep(400);
      boolean waited = !late.isDone();
      long balance = apply("order-A", token(winner), -100);
      Result replay = late.get(30, TimeUnit.SECONDS);
      check(waited && replay.replayed() && lateRuns.get() == 0 && balance == 900,
          "replay: waited=" + waited + " replayed=" + replay.replayed() + " result=" + replay.text() + " balance=" + balance);
    } finally {
      pool.shutdownNow();
    }
  }

  void parameterConflict() {
    String reason;
    String fields = "";
    try {
      client.claim(request("order-A", "worker-x", Map.of("account", 1, "amount", 101)));
      reason = "accepted";
    } catch (ParameterConflictException conflict) {
      reason = conflict.reason();
      fields = String.join(",", conflict.differingFields());
    }
    check(reason.equals("PARAMETER_CONFLICT") && fields.equals("amount"),
        "amount 101 for order-A: " + reason + " differingFields=" + fields);
  }

  /** The debit commits but its answer is lost: Lookup by key settles it. */
  void lostResponse() {
    ClaimResponse claimed = client.claim(request("order-B", "worker-1", Map.of("account", 1, "amount", 100)));
    apply("order-B", token(claimed), -100); // its answer is dropped: the caller does not know
    LookupResponse found = client.lookup(LookupRequest.newBuilder()
        .setNamespace(namespace).setOperationKey("order-B").setIncludeExecutions(true).build());
    OperationStatus status = found.getOperation().getStatus();
    ClaimResponse again = client.claim(request("order-B", "worker-2", Map.of("account", 1, "amount", 100)));
    check(status == OperationStatus.OPERATION_STATUS_SUCCEEDED && again.getOutcome() == ClaimOutcome.CLAIM_OUTCOME_REPLAYED,
        "unknownResult=resolvedByOperationKey status=" + status.name().replaceFirst("^OPERATION_STATUS_", "")
            + " executions=" + found.getExecutionsCount() + " retry=" + outcome(again));
  }

  /**
   * A payout whose answer timed out after it was sent is reconciled before anyone re-executes it:
   * the remote system has no record of it, so it runs once, under the same lease.
   */
  void unknownOutcome() {
    Map<String, Object> params = Map.of("payout", 42);
    ClaimResponse claimed = client.claim(request("payout-7", "worker-1", params));
    client.complete(CompleteRequest.newBuilder()
        .setNamespace(namespace).setOperationKey("payout-7").setFencingToken(token(claimed))
        .setUnknown(UnknownOutcome.newBuilder().setRemoteRef("psp-7").setMessage("timeout after send")).build());
    List<String> seen = new ArrayList<>();
    AtomicInteger paid = new AtomicInteger();
    Result result = client.runOnce(
        RunOptions.builder(namespace, "payout-7").parameters(params).owner("worker-2")
            .reconcile((lease, remoteRef) -> {
              seen.add(remoteRef + (lease.reconciling() ? " (reconcile lease)" : ""));
              return Reconciliation.notApplied(); // psp-7 has no record of it
            })
            .build(),
        lease -> {
          paid.incrementAndGet();
          return bytes("paid:psp-8");
        });
    check(seen.equals(List.of("psp-7 (reconcile lease)")) && paid.get() == 1 && !result.replayed(),
        "unknown outcome: reconciled remote_ref=psp-7 first, notApplied, paid once: " + result.text());
  }

  /** The first holder's lease lapses and another takes over; the old token is refused. */
  void staleToken() throws InterruptedException {
    ClaimRequest first = request("settle", "worker-A", Map.of("task", "settle")).toBuilder()
        .setLeaseTtl(Durations.toProto(Duration.ofSeconds(1))).build();
    long old = token(client.claim(first));
    Thread.sleep(1200);
    ClaimResponse taken = client.claim(request("settle", "worker-B", Map.of("task", "settle")));
    long current = token(taken);
    String stale;
    try {
      client.fencedWrite(write(old, "10"));
      stale = "accepted";
    } catch (StaleFencingTokenException refused) {
      stale = refused.reason();
    }
    String now;
    try {
      client.fencedWrite(write(current, "20"));
      now = "accepted";
    } catch (OpregException refused) {
      now = "refused";
    }
    String stored = client.getResource(GetResourceRequest.newBuilder().setNamespace(namespace).setResource("lab:resource").build())
        .getValue().toStringUtf8();
    check(current > old && taken.getLease().getTakeover() && stale.equals("STALE_FENCING_TOKEN") && now.equals("accepted") && stored.equals("20"),
        "oldToken=" + old + " newToken=" + current + " staleWrite=" + stale + " currentWrite=" + now + " resource=" + stored);
  }

  FencedWriteRequest write(long token, String value) {
    return FencedWriteRequest.newBuilder()
        .setNamespace(namespace).setResource("lab:resource").setOperationKey("settle").setFencingToken(token)
        .setValue(ByteString.copyFromUtf8(value)).build();
  }

  /** The refund of order-A, by the run-once helper: applied once, replayed after, refused under another key. */
  void compensation() {
    Map<String, Object> params = Map.of("refund", "order-A", "amount", 100);
    AtomicInteger refunds = new AtomicInteger();
    RunOptions refund = RunOptions.builder(namespace, "refund:order-A").parameters(params).compensates("order-A").build();
    Result first = client.runOnce(refund, lease -> refundInto(lease, refunds));
    Result repeated = client.runOnce(refund, lease -> refundInto(lease, refunds));
    String another;
    String by = "";
    try {
      client.runOnce(
          RunOptions.builder(namespace, "refund-again:order-A").parameters(params).compensates("order-A").build(),
          lease -> refundInto(lease, refunds));
      another = "applied";
    } catch (AlreadyCompensatedException refused) {
      another = refused.reason();
      by = refused.compensatedBy();
    }
    check(refunds.get() == 1 && !first.replayed() && repeated.replayed() && another.equals("ALREADY_COMPENSATED"),
        "compensation applied once: refunds=" + refunds.get() + " repeat=" + (repeated.replayed() ? "REPLAYED" : "RAN")
            + " another=" + another + " compensatedBy=" + by);
  }

  byte[] refundInto(Lease lease, AtomicInteger refunds) {
    refunds.incrementAndGet();
    long balance = balance() + 100;
    lease.fencedWrite(ACCOUNT, bytes(Long.toString(balance)));
    return bytes("balance=" + balance);
  }

  static byte[] bytes(String text) {
    return text.getBytes(StandardCharsets.UTF_8);
  }
}
