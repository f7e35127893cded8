package dev.opreg.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.ByteString;
import dev.opreg.client.testing.AgainstServer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import opreg.v1.Registry.ClaimRequest;
import opreg.v1.Registry.CompleteRequest;
import opreg.v1.Registry.LookupRequest;
import opreg.v1.Registry.Operation;
import opreg.v1.Registry.OperationStatus;
import opreg.v1.Registry.Success;
import opreg.v1.Registry.UnknownOutcome;
import org.junit.jupiter.api.Test;

/** The run-once helper against the real server, beyond the conformance scenarios. */
class RunOnceTest extends AgainstServer {
  static final Map<String, Object> PARAMS = Map.of("account", "A", "amount", 100);


  static byte[] bytes(String text) {
    return text.getBytes(StandardCharsets.UTF_8);
  }

  Operation lookup(String key) {
    return client.lookup(LookupRequest.newBuilder().setNamespace(ns).setOperationKey(key).build()).getOperation();
  }

  @Test
  void theWorkRunsOnceAndIsReplayedAfter() {
    AtomicInteger runs = new AtomicInteger();
    Result first = client.runOnce(ns, "k", PARAMS, lease -> {
      runs.incrementAndGet();
      assertFalse(lease.isLost());
      lease.setResultRef("ledger:1");
      return bytes("done");
    });
    assertFalse(first.replayed());
    assertEquals("ledger:1", first.resultRef());
    // By a digest computed here: the same operation.
    Result again = client.runOnce(RunOptions.builder(ns, "k").parametersDigest(ParameterDigest.digest(PARAMS)).build(), lease -> {
      runs.incrementAndGet();
      return bytes("again");
    });
    assertTrue(again.replayed());
    assertEquals("done", again.text());
    assertEquals(1, runs.get());
    assertThrows(ParameterConflictException.class, () -> client.runOnce(ns, "k", Map.of("amount", 1), lease -> bytes("x")));
  }

  @Test
  void anotherHoldersResultIsWaitedForAndReplayed() throws Exception {
    long token = client.claim(ClaimRequest.newBuilder()
        .setNamespace(ns).setOperationKey("k").setOwner("other").setParameters(Parameters.toStruct(PARAMS)).build())
        .getLease().getFencingToken();
    CompletableFuture<Result> waiting = client.runOnceAsync(
        RunOptions.builder(ns, "k").parameters(PARAMS).pollInterval(Duration.ofMillis(100)).build(),
        lease -> {
          throw new AssertionError("ran while another held it");
        });
    Thread.sleep(300);
    assertFalse(waiting.isDone());
    client.complete(CompleteRequest.newBuilder().setNamespace(ns).setOperationKey("k").setFencingToken(token)
        .setSuccess(Success.newBuilder().setResult(ByteString.copyFromUtf8("theirs"))).build());
    Result result = waiting.get(10, TimeUnit.SECONDS);
    assertTrue(result.replayed());
    assertEquals("theirs", result.text());
  }

  @Test
  void cancellingTheFutureInterruptsTheWorkAndReportsNothing() throws Exception {
    CountDownLatch started = new CountDownLatch(1);
    AtomicBoolean interrupted = new AtomicBoolean();
    CompletableFuture<Result> running = client.runOnceAsync(RunOptions.builder(ns, "k").parameters(PARAMS).build(), lease -> {
      started.countDown();
      try {
        Thread.sleep(20_000);
      } catch (InterruptedException e) {
        interrupted.set(lease.isLost());
      }
      return bytes("done");
    });
    assertTrue(started.await(10, TimeUnit.SECONDS));
    assertTrue(running.cancel(true));
    long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (!interrupted.get() && System.nanoTime() < end) {
      Thread.sleep(20);
    }
    assertTrue(interrupted.get(), "the work was not interrupted with its lease lost");
    Thread.sleep(200);
    assertSame(OperationStatus.OPERATION_STATUS_IN_PROGRESS, lookup("k").getStatus());
  }

  @Test
  void aFencedWriteAfterATakeoverLosesTheLease() {
    AtomicLong token = new AtomicLong();
    LeaseLostException lost = assertThrows(LeaseLostException.class, () -> client.runOnce(
        RunOptions.builder(ns, "k").parameters(PARAMS).leaseTtl(Duration.ofSeconds(1)).renewInterval(Duration.ofSeconds(30)).build(),
        lease -> {
          token.set(lease.fencingToken());
          Thread.sleep(1200); // the lease lapses (renewals are far apart) ...
          client.claim(ClaimRequest.newBuilder().setNamespace(ns).setOperationKey("k").setOwner("taker")
              .setParameters(Parameters.toStruct(PARAMS)).build()); // ... and another owner takes it over
          lease.fencedWrite("account", bytes("10"));
          return bytes("done");
        }));
    assertEquals(token.get(), lost.fencingToken());
    assertInstanceOf(StaleFencingTokenException.class, lost.getCause());
    assertSame(OperationStatus.OPERATION_STATUS_IN_PROGRESS, lookup("k").getStatus());
  }

  @Test
  void aReconcileCallbackThatThrowsLeavesTheOutcomeUnknown() {
    long token = client.claim(ClaimRequest.newBuilder()
        .setNamespace(ns).setOperationKey("k").setOwner("other").setParameters(Parameters.toStruct(PARAMS)).build())
        .getLease().getFencingToken();
    client.complete(CompleteRequest.newBuilder().setNamespace(ns).setOperationKey("k").setFencingToken(token)
        .setUnknown(UnknownOutcome.newBuilder().setRemoteRef("psp-1")).build());
    IllegalStateException down = new IllegalStateException("the PSP is down");
    WorkException raised = assertThrows(WorkException.class, () -> client.runOnce(
        RunOptions.builder(ns, "k").parameters(PARAMS).reconcile((lease, remoteRef) -> {
          assertEquals("psp-1", remoteRef);
          assertTrue(lease.reconciling());
          throw down;
        }).build(),
        lease -> {
          throw new AssertionError("ran before the unknown outcome was reconciled");
        }));
    assertSame(down, raised.getCause());
    Operation operation = lookup("k");
    assertSame(OperationStatus.OPERATION_STATUS_UNKNOWN, operation.getStatus());
    assertEquals("psp-1", operation.getRemoteRef());
  }

  @Test
  void anUnexpectedErrorIsRecordedRetryableAndRaised() {
    WorkException raised = assertThrows(WorkException.class, () -> client.runOnce(ns, "k", PARAMS, lease -> {
      throw new java.io.IOException("disk full");
    }));
    assertInstanceOf(java.io.IOException.class, raised.getCause());
    Operation operation = lookup("k");
    assertSame(OperationStatus.OPERATION_STATUS_RETRY_SCHEDULED, operation.getStatus());
    assertEquals("IOException", operation.getLastErrorClass());
  }

  @Test
  void theRunOnceDefaultsAreTheProtocols() {
    RunOptions options = RunOptions.builder(ns, "k").parameters(PARAMS).build();
    assertEquals(Duration.ofSeconds(120), options.deadline());
    assertEquals(Duration.ofSeconds(30), options.leaseTtl());
    assertEquals(Duration.ofSeconds(10), options.renewInterval());
    assertEquals(Duration.ofSeconds(10), options.callTimeout());
    assertTrue(RunOptions.defaultOwner().matches("[^/]+/\\d+/[0-9a-f]{12}"), RunOptions.defaultOwner());
  }
}
