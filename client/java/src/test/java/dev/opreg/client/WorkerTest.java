package dev.opreg.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.ByteString;
import dev.opreg.client.testing.AgainstServer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import opreg.v1.Registry.ClaimRequest;
import opreg.v1.Registry.CompleteRequest;
import opreg.v1.Registry.LookupRequest;
import opreg.v1.Registry.Operation;
import opreg.v1.Registry.OperationStatus;
import opreg.v1.Registry.RetryableError;
import opreg.v1.Registry.UnknownOutcome;
import org.junit.jupiter.api.Test;

/** The ClaimDue worker against the real server. */
class WorkerTest extends AgainstServer {

  /** Registers {@code key} and records {@code outcome} for its first execution (a retry or an unknown outcome). */
  void due(String key, CompleteRequest.Builder outcome) {
    long token = client.claim(ClaimRequest.newBuilder()
        .setNamespace(ns).setOperationKey(key).setOwner("setup")
        .setParameters(Parameters.toStruct(Map.of("amount", 100, "key", key)))
        .setRetryPolicy(RunOptions.retryPolicy(5, Duration.ofMillis(10), Duration.ofMillis(20), Duration.ofSeconds(60)))
        .build()).getLease().getFencingToken();
    client.complete(outcome.setNamespace(ns).setOperationKey(key).setFencingToken(token).build());
  }

  static CompleteRequest.Builder retryable() {
    return CompleteRequest.newBuilder().setRetryable(RetryableError.newBuilder().setErrorClass("Timeout").setMessage("first try"));
  }

  Operation lookup(String key) {
    return client.lookup(LookupRequest.newBuilder().setNamespace(ns).setOperationKey(key).build()).getOperation();
  }

  Thread start(Worker worker, List<Throwable> errors) {
    Thread thread = new Thread(() -> {
      try {
        worker.run();
      } catch (Throwable e) {
        errors.add(e);
      }
    }, "worker-under-test");
    thread.start();
    return thread;
  }

  @Test
  void dueRetriesUnknownOutcomesAndMissingHandlers() throws Exception {
    due("debit:1", retryable());
    due("debit:2", CompleteRequest.newBuilder().setUnknown(UnknownOutcome.newBuilder().setRemoteRef("psp-2")));
    due("refund:3", retryable());
    BlockingQueue<Worker.Finished> finished = new LinkedBlockingQueue<>();
    List<String> reconciled = new CopyOnWriteArrayList<>();
    Worker worker = Worker.builder(client, ns)
        .handler("debit", (operation, lease) -> {
          assertEquals(100.0, Parameters.fromStruct(operation.getParameters()).get("amount"));
          return ("paid " + operation.getOperationKey()).getBytes(StandardCharsets.UTF_8);
        })
        .reconcile((operation, lease) -> {
          reconciled.add(operation.getRemoteRef());
          return Reconciliation.succeeded("reconciled".getBytes(StandardCharsets.UTF_8));
        })
        .pollInterval(Duration.ofMillis(100))
        .listener(finished::add)
        .build();
    List<Throwable> errors = new CopyOnWriteArrayList<>();
    Thread thread = start(worker, errors);
    try {
      Map<String, Worker.Finished> byKey = new java.util.HashMap<>();
      long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
      while (byKey.size() < 3 && System.nanoTime() < end) {
        Worker.Finished one = finished.poll(200, TimeUnit.MILLISECONDS);
        if (one != null) {
          byKey.putIfAbsent(one.operationKey(), one);
        }
      }
      assertEquals(3, byKey.size(), "finished: " + byKey.keySet());
      assertNull(byKey.get("debit:1").error());
      assertEquals("paid debit:1", byKey.get("debit:1").recorded().getResult().toStringUtf8());
      assertNull(byKey.get("debit:2").error());
      assertEquals(List.of("psp-2"), reconciled);
      assertTrue(byKey.get("refund:3").error() instanceof NoHandlerException, String.valueOf(byKey.get("refund:3").error()));
    } finally {
      worker.stop();
      thread.join(10_000);
    }
    assertTrue(errors.isEmpty(), errors.toString());
    assertSame(OperationStatus.OPERATION_STATUS_SUCCEEDED, lookup("debit:1").getStatus());
    assertEquals("reconciled", lookup("debit:2").getResult().toStringUtf8());
    assertEquals(Protocol.NO_HANDLER, lookup("refund:3").getLastErrorClass());
  }

  @Test
  void stoppingCancelsWhatOutlivesTheGracePeriod() throws Exception {
    due("slow:1", retryable());
    CountDownLatch started = new CountDownLatch(1);
    BlockingQueue<Worker.Finished> finished = new LinkedBlockingQueue<>();
    Worker worker = Worker.builder(client, ns)
        .defaultHandler((operation, lease) -> {
          started.countDown();
          lease.await(Duration.ofSeconds(30));
          return "late".getBytes(StandardCharsets.UTF_8);
        })
        .pollInterval(Duration.ofMillis(100))
        .listener(finished::add)
        .build();
    List<Throwable> errors = new CopyOnWriteArrayList<>();
    Thread thread = start(worker, errors);
    assertTrue(started.await(20, TimeUnit.SECONDS));
    long stopping = System.nanoTime();
    worker.stop(Duration.ofMillis(200));
    thread.join(10_000);
    assertTrue(!thread.isAlive());
    assertTrue(System.nanoTime() - stopping < TimeUnit.SECONDS.toNanos(5));
    Worker.Finished one = finished.poll(5, TimeUnit.SECONDS);
    assertTrue(one != null && one.error() instanceof LeaseLostException, String.valueOf(one));
    assertNull(one.recorded());
    assertSame(OperationStatus.OPERATION_STATUS_IN_PROGRESS, lookup("slow:1").getStatus());
    assertTrue(errors.isEmpty(), errors.toString());
  }

  static ByteString text(String value) {
    return ByteString.copyFromUtf8(value);
  }
}
