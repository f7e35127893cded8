package dev.opreg.client;

import static dev.opreg.client.Conformance.bytes;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.fasterxml.jackson.databind.JsonNode;
import dev.opreg.client.Conformance.Callbacks;
import dev.opreg.client.Conformance.Scenario;
import dev.opreg.client.testing.FaultProxy;
import dev.opreg.client.testing.ServerExtension;
import dev.opreg.client.testing.TestServer;
import java.io.IOException;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.stream.Stream;
import opreg.v1.Registry.ClaimResponse;
import opreg.v1.Registry.CompleteRequest;
import org.junit.jupiter.api.DynamicContainer;
import org.junit.jupiter.api.DynamicNode;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * The run-once conformance scenarios ({@code client/testdata/run_once_scenarios.json}, format in
 * {@code client/PROTOCOL.md}) against the real server through a fresh opreg-fault-proxy each, with
 * the blocking helper and the CompletableFuture one. Every scenario in the file runs; a new one
 * needs no new code.
 */
@ExtendWith(ServerExtension.class)
class ConformanceTest {
  static final Path SCENARIO_FILE = TestServer.repo().resolve("client/testdata/run_once_scenarios.json");
  static final String NAMESPACE = "conformance";
  /** An {@code in_progress} before holds its lease through the scenario, unless {@code before_lease_ttl_ms} says otherwise. */
  static final Duration IN_PROGRESS_LEASE = Duration.ofSeconds(30);
  /** No scenario comes near this; a helper that hangs fails instead of blocking the run. */
  static final long HELPER_TIMEOUT_SECONDS = 60;

  static List<Scenario> all() {
    return Conformance.load(SCENARIO_FILE);
  }

  @Test
  void theScenarioNamesAreUnique() {
    Conformance.assertNamesUnique(all());
  }

  @Test
  void aRunThatDiffersFromTheExpectationIsReported() throws IOException {
    Scenario scenario = new Scenario(Conformance.JSON.readTree(
        "{\"name\": \"x\", \"work\": [\"succeed\"], \"expect\": {\"error\": \"business_failure\", \"code\": \"c\","
            + " \"replayed\": false, \"calls\": [\"Claim:ACQUIRED\", \"Complete:FAILED\"], \"status\": \"FAILED\","
            + " \"reconcile_saw\": \"r\"}}"),
        all().get(0).defaults());
    Run run = new Run(new Callbacks(scenario));
    run.result = new Result(bytes("done"), "", false, null);
    String mismatched = "calls mismatched: expected [\"Claim:ACQUIRED\",\"Complete:FAILED\"],"
        + " saw [\"Claim:ACQUIRED\",\"Complete:SUCCEEDED\"]";
    List<String> problems = differences(scenario, run, new FaultProxy.Exit(3, mismatched, ""), "SUCCEEDED");
    assertEquals(4, problems.size(), problems.toString());
    assertTrue(problems.stream().anyMatch(problem -> problem.contains(mismatched)), problems.toString());
    run.result = null;
    run.error = new BusinessFailureException("m", null, "other", "", true, null);
    run.callbacks.reconcileSaw().add("r");
    problems = differences(scenario, run, new FaultProxy.Exit(0, "calls matched: [...]", ""), "FAILED");
    assertEquals(1, problems.size(), problems.toString());
    assertEquals("not a conformance kind: dev.opreg.client.WorkException", kindOf(new WorkException("w", new IllegalStateException())));
  }

  // -- the helper through the proxy ----------------------------------------------------------

  /** What the helper did: its result or error, and what the callbacks saw. */
  static final class Run {
    final Callbacks callbacks;
    Result result;
    Throwable error;

    Run(Callbacks callbacks) {
      this.callbacks = callbacks;
    }
  }

  enum Variant {
    BLOCKING,
    FUTURE
  }

  static RunOptions options(Scenario scenario, String key, Callbacks callbacks) {
    return RunOptions.builder(NAMESPACE, key)
        .parameters(scenario.parameters())
        .leaseTtl(scenario.leaseTtl())
        .deadline(scenario.millis("deadline_ms"))
        .callTimeout(scenario.millis("call_timeout_ms"))
        .retryPolicy(scenario.retryPolicy())
        .reconcile(scenario.reconcile() == null ? null : callbacks::reconcile)
        .build();
  }

  static Run runHelper(Variant variant, Scenario scenario, String address, String key) {
    Run run = new Run(new Callbacks(scenario));
    Work work = run.callbacks::work;
    ExecutorService pool = Executors.newSingleThreadExecutor();
    try (OpregClient client = OpregClient.connect(address)) {
      RunOptions options = options(scenario, key, run.callbacks);
      Future<Result> future = variant == Variant.BLOCKING
          ? pool.submit(() -> client.runOnce(options, work))
          : client.runOnceAsync(options, work);
      try {
        run.result = future.get(HELPER_TIMEOUT_SECONDS, TimeUnit.SECONDS);
      } catch (ExecutionException e) {
        run.error = e.getCause();
      } catch (TimeoutException e) {
        future.cancel(true);
        run.error = new AssertionError("runOnce did not return within " + HELPER_TIMEOUT_SECONDS + "s");
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        run.error = e;
      }
    } finally {
      pool.shutdownNow();
    }
    return run;
  }

  /**
   * The lease of the scenario's {@code before} Claim: the scenario's, but for {@code in_progress}:
   * {@code before_lease_ttl_ms}, by default {@link #IN_PROGRESS_LEASE}.
   */
  static Duration beforeLease(Scenario scenario) {
    if (!"in_progress".equals(scenario.before())) {
      return scenario.leaseTtl();
    }
    return Duration.ofMillis(scenario.raw().path("before_lease_ttl_ms").asLong(IN_PROGRESS_LEASE.toMillis()));
  }

  /**
   * {@code before_complete_after_ms}: that long after the helper is started, the {@code before}
   * owner completes its lease with success, directly against the server (a waiting Claim of the
   * helper is woken by it). Already done when the scenario has none.
   */
  static CompletableFuture<Void> completeBeforeLater(OpregClient client, Scenario scenario, String key, ClaimResponse before) {
    JsonNode after = scenario.raw().get("before_complete_after_ms");
    if (after == null) {
      return CompletableFuture.completedFuture(null);
    }
    assertEquals("in_progress", scenario.before(), "before_complete_after_ms completes the lease of before: in_progress");
    CompleteRequest complete = CompleteRequest.newBuilder()
        .setNamespace(NAMESPACE)
        .setOperationKey(key)
        .setFencingToken(before.getLease().getFencingToken())
        .setSuccess(Conformance.BEFORE_SUCCESS)
        .build();
    return CompletableFuture.runAsync(
        () -> client.complete(complete), CompletableFuture.delayedExecutor(after.asLong(), TimeUnit.MILLISECONDS));
  }

  /** Waits for the {@code before} owner's late Complete to finish: what went wrong with it, if anything. */
  static List<String> lateCompleteProblems(CompletableFuture<Void> lateComplete) {
    try {
      lateComplete.get(HELPER_TIMEOUT_SECONDS, TimeUnit.SECONDS);
      return List.of();
    } catch (ExecutionException e) {
      return List.of("the before owner's Complete (before_complete_after_ms) failed: " + e.getCause());
    } catch (TimeoutException e) {
      return List.of("the before owner's Complete (before_complete_after_ms) did not finish within " + HELPER_TIMEOUT_SECONDS + "s");
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return List.of("interrupted waiting for the before owner's Complete");
    }
  }

  /** The conformance kind of an error (PROTOCOL.md, "Errors and their conformance kinds"). */
  static String kindOf(Throwable error) {
    if (error instanceof BusinessFailureException) return "business_failure";
    if (error instanceof OperationDeadException) return "dead";
    if (error instanceof OperationHeldException) return "held";
    if (error instanceof LeaseLostException) return "lease_lost";
    if (error instanceof OutcomeUnknownException) return "outcome_unknown";
    if (error instanceof ReconcileRequiredException) return "reconcile_required";
    if (error instanceof DeadlineExceededException) return "deadline_exceeded";
    if (error instanceof OutcomeNotRecordedException) return "outcome_not_recorded";
    if (error instanceof WorkException && error.getCause() instanceof Conformance.UnexpectedWorkError) return "work_error";
    return "not a conformance kind: " + error.getClass().getName();
  }

  /** What differs from the scenario's expectation: the helper's answer, then what both runners check. */
  static List<String> differences(Scenario scenario, Run run, FaultProxy.Exit proxy, String status) {
    JsonNode expect = scenario.expect();
    List<String> problems = new ArrayList<>();
    if (expect.has("result")) {
      JsonNode want = expect.get("result");
      if (run.result == null) {
        problems.add("expected the result " + want + ", got " + describe(run.error));
      } else if (!run.result.text().equals(want.get("value").asText()) || run.result.replayed() != want.get("replayed").asBoolean()) {
        problems.add("expected the result " + want + ", got " + run.result);
      }
    } else {
      String wantKind = expect.get("error").asText();
      if (run.error == null) {
        problems.add("expected the error " + wantKind + ", got the result " + run.result);
      } else if (!kindOf(run.error).equals(wantKind)) {
        problems.add("expected the error " + wantKind + ", got " + describe(run.error));
      } else if (wantKind.equals("business_failure")) {
        BusinessFailureException failure = (BusinessFailureException) run.error;
        String wantCode = expect.path("code").asText(null);
        boolean wantReplayed = expect.path("replayed").asBoolean(false);
        if (!failure.failureCode().equals(wantCode) || failure.replayed() != wantReplayed) {
          problems.add("expected the business failure {code=" + wantCode + ", replayed=" + wantReplayed + "}, got {code="
              + failure.failureCode() + ", replayed=" + failure.replayed() + "}");
        }
      }
    }
    problems.addAll(Conformance.sharedDifferences(scenario, proxy, status, run.callbacks));
    return problems;
  }

  static String describe(Throwable error) {
    if (error == null) {
      return "no error";
    }
    StringWriter trace = new StringWriter();
    error.printStackTrace(new PrintWriter(trace));
    return kindOf(error) + ":\n" + trace.toString().strip();
  }

  @TestFactory
  Stream<DynamicNode> scenarios(TestServer server) {
    return all().stream().map(scenario -> DynamicContainer.dynamicContainer(
        scenario.name(),
        Stream.of(Variant.values()).map(variant -> DynamicTest.dynamicTest(
            variant.name().toLowerCase(), () -> runScenario(server, scenario, variant)))));
  }

  static void runScenario(TestServer server, Scenario scenario, Variant variant) throws IOException {
    String key = scenario.name() + "-java-" + Conformance.randomHex();
    Path scratch = Files.createTempDirectory("opreg-conformance-");
    try (OpregClient client = server.client()) {
      ClaimResponse before = Conformance.before(client, scenario, NAMESPACE, key, beforeLease(scenario));
      FaultProxy proxy = new FaultProxy(server.address(), scenario.faults(), scenario.expectedCalls(), scratch);
      long started = System.nanoTime();
      CompletableFuture<Void> lateComplete = completeBeforeLater(client, scenario, key, before);
      Run run;
      FaultProxy.Exit exit;
      try {
        run = runHelper(variant, scenario, proxy.address(), key);
      } finally {
        exit = proxy.finish();
      }
      double took = (System.nanoTime() - started) / 1e9;
      // The late Complete is part of the scenario: finished (or failed) before the status is read.
      List<String> problems = new ArrayList<>(lateCompleteProblems(lateComplete));
      String status = Conformance.statusOf(Conformance.lookup(client, NAMESPACE, key));
      problems.addAll(differences(scenario, run, exit, status));
      if (!problems.isEmpty()) {
        fail(Conformance.report(String.format("scenario %s (%s helper, key %s/%s, %.2fs)",
            scenario.name(), variant.name().toLowerCase(), NAMESPACE, key, took), problems, proxy, exit));
      }
    } finally {
      TestServer.deleteTree(scratch);
    }
  }
}
