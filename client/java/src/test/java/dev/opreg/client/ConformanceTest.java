package dev.opreg.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.opreg.client.testing.FaultProxy;
import dev.opreg.client.testing.ServerExtension;
import dev.opreg.client.testing.TestServer;
import java.io.IOException;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.stream.Stream;
import opreg.v1.Registry.ClaimOutcome;
import opreg.v1.Registry.ClaimRequest;
import opreg.v1.Registry.ClaimResponse;
import opreg.v1.Registry.CompleteRequest;
import opreg.v1.Registry.Failure;
import opreg.v1.Registry.LookupRequest;
import opreg.v1.Registry.RetryPolicy;
import opreg.v1.Registry.Success;
import opreg.v1.Registry.UnknownOutcome;
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
  static final String BEFORE_OWNER = "conformance-before";
  /** No scenario comes near this; a helper that hangs fails instead of blocking the run. */
  static final long HELPER_TIMEOUT_SECONDS = 60;

  static final ObjectMapper JSON = new ObjectMapper();

  /** What {@code fail_unexpected} throws: an error of no opreg kind. */
  static final class UnexpectedWorkError extends Exception {
    private static final long serialVersionUID = 1L;

    UnexpectedWorkError(String message) {
      super(message);
    }
  }

  static JsonNode scenarios() {
    try {
      return JSON.readTree(Files.readString(SCENARIO_FILE, StandardCharsets.UTF_8));
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** One scenario with the file's defaults. */
  record Scenario(JsonNode raw, JsonNode defaults) {
    String name() {
      return raw.get("name").asText();
    }

    JsonNode setting(String name) {
      return raw.has(name) ? raw.get(name) : defaults.get(name);
    }

    Duration millis(String name) {
      return Duration.ofMillis(setting(name).asLong());
    }

    Duration leaseTtl() {
      return millis("lease_ttl_ms");
    }

    RetryPolicy retryPolicy() {
      JsonNode policy = setting("retry_policy");
      return RunOptions.retryPolicy(
          policy.get("max_attempts").asInt(),
          Duration.ofMillis(policy.get("initial_backoff_ms").asLong()),
          Duration.ofMillis(policy.get("max_backoff_ms").asLong()),
          Duration.ofMillis(policy.get("deadline_ms").asLong()));
    }

    Map<String, Object> parameters() {
      Map<String, Object> parameters = new LinkedHashMap<>();
      parameters.put("amount", 100);
      parameters.put("scenario", name());
      return parameters;
    }

    List<String> work() {
      List<String> actions = new ArrayList<>();
      raw.get("work").forEach(action -> actions.add(action.asText()));
      return actions;
    }

    JsonNode expect() {
      return raw.get("expect");
    }

    String reconcile() {
      return raw.has("reconcile") ? raw.get("reconcile").asText() : null;
    }

    String faults() {
      return json(raw.has("faults") ? raw.get("faults") : JSON.createArrayNode());
    }

    /** {@code expect.calls} as JSON, for the proxy's {@code --expect}; null when the scenario has none. */
    String expectedCalls() {
      return expect().has("calls") ? json(expect().get("calls")) : null;
    }

    private static String json(JsonNode node) {
      try {
        return JSON.writeValueAsString(node);
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }
  }

  static List<Scenario> all() {
    JsonNode file = scenarios();
    List<Scenario> all = new ArrayList<>();
    file.get("scenarios").forEach(raw -> all.add(new Scenario(raw, file.get("defaults"))));
    return all;
  }

  @Test
  void theScenarioNamesAreUnique() {
    List<Scenario> all = all();
    Set<String> names = new HashSet<>();
    all.forEach(scenario -> assertTrue(names.add(scenario.name()), "duplicate scenario " + scenario.name()));
    assertFalse(all.isEmpty());
  }

  @Test
  void aRunThatDiffersFromTheExpectationIsReported() throws IOException {
    Scenario scenario = new Scenario(JSON.readTree(
        "{\"name\": \"x\", \"work\": [\"succeed\"], \"expect\": {\"error\": \"business_failure\", \"code\": \"c\","
            + " \"replayed\": false, \"calls\": [\"Claim:ACQUIRED\", \"Complete:FAILED\"], \"status\": \"FAILED\","
            + " \"reconcile_saw\": \"r\"}}"),
        scenarios().get("defaults"));
    Run run = new Run();
    run.result = new Result(bytes("done"), "", false, null);
    String mismatched = "calls mismatched: expected [\"Claim:ACQUIRED\",\"Complete:FAILED\"],"
        + " saw [\"Claim:ACQUIRED\",\"Complete:SUCCEEDED\"]";
    List<String> problems = differences(scenario, run, new FaultProxy.Exit(3, mismatched, ""), "SUCCEEDED");
    assertEquals(4, problems.size(), problems.toString());
    assertTrue(problems.stream().anyMatch(problem -> problem.contains(mismatched)), problems.toString());
    run.result = null;
    run.error = new BusinessFailureException("m", null, "other", "", true, null);
    run.reconcileSaw.add("r");
    problems = differences(scenario, run, new FaultProxy.Exit(0, "calls matched: [...]", ""), "FAILED");
    assertEquals(1, problems.size(), problems.toString());
    assertEquals("not a conformance kind: dev.opreg.client.WorkException", kindOf(new WorkException("w", new IllegalStateException())));
  }

  // -- the work and the reconcile callback ---------------------------------------------------

  /** What the helper did: its result or error, and what the callbacks saw. */
  static final class Run {
    Result result;
    Throwable error;
    int executions;
    final List<String> reconcileSaw = new ArrayList<>();
  }

  static Work work(Scenario scenario, Run run) {
    List<String> actions = scenario.work();
    return lease -> {
      String action = actions.get(Math.min(run.executions, actions.size() - 1)); // the last one repeats
      run.executions++;
      switch (action) {
        case "succeed":
          return bytes("done");
        case "fail_business":
          throw new BusinessException("insufficient_funds", "the balance is below the amount");
        case "fail_transient":
          throw new TransientException("the downstream service is unavailable");
        case "fail_unexpected":
          throw new UnexpectedWorkError("a bug in the work");
        case "report_unknown":
          throw new SentButUnconfirmedException("remote-1", "timed out after the request was sent");
        case "hang":
          lease.await(Duration.ofSeconds(10)); // until the lease is reported lost
          return bytes("done");
        case "hang_ignoring_lease": {
          // Sleeps through everything, the interrupt of a lost lease included.
          long end = System.nanoTime() + scenario.leaseTtl().multipliedBy(2).toNanos();
          long left;
          while ((left = end - System.nanoTime()) > 0) {
            try {
              Thread.sleep(Math.max(1, left / 1_000_000));
            } catch (InterruptedException ignored) {
              // ignored on purpose
            }
          }
          return bytes("done");
        }
        default:
          throw new AssertionError("unknown work action " + action);
      }
    };
  }

  static Reconciler reconciler(Scenario scenario, Run run) {
    String verdict = scenario.reconcile();
    if (verdict == null) {
      return null;
    }
    return (lease, remoteRef) -> {
      run.reconcileSaw.add(remoteRef);
      return switch (verdict) {
        case "succeeded" -> Reconciliation.succeeded(bytes("reconciled"));
        case "failed" -> Reconciliation.failed("reconciled_failed");
        case "not_applied" -> Reconciliation.notApplied();
        default -> throw new AssertionError("unknown reconcile verdict " + verdict);
      };
    };
  }

  static byte[] bytes(String text) {
    return text.getBytes(StandardCharsets.UTF_8);
  }

  // -- the helper through the proxy ----------------------------------------------------------

  enum Variant {
    BLOCKING,
    FUTURE
  }

  static RunOptions options(Scenario scenario, String key, Run run) {
    return RunOptions.builder(NAMESPACE, key)
        .parameters(scenario.parameters())
        .leaseTtl(scenario.leaseTtl())
        .deadline(scenario.millis("deadline_ms"))
        .callTimeout(scenario.millis("call_timeout_ms"))
        .retryPolicy(scenario.retryPolicy())
        .reconcile(reconciler(scenario, run))
        .build();
  }

  static Run runHelper(Variant variant, Scenario scenario, String address, String key) {
    Run run = new Run();
    Work work = work(scenario, run);
    ExecutorService pool = Executors.newSingleThreadExecutor();
    try (OpregClient client = OpregClient.connect(address)) {
      RunOptions options = options(scenario, key, run);
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

  /** The scenario's {@code before}, directly against the server. */
  static void before(OpregClient client, Scenario scenario, String key) {
    if (!scenario.raw().has("before")) {
      return;
    }
    String action = scenario.raw().get("before").asText();
    ClaimResponse claimed = client.claim(ClaimRequest.newBuilder()
        .setNamespace(NAMESPACE)
        .setOperationKey(key)
        .setOwner(BEFORE_OWNER)
        .setParameters(Parameters.toStruct(scenario.parameters()))
        .setLeaseTtl(Durations.toProto(action.equals("in_progress") ? Duration.ofSeconds(30) : scenario.leaseTtl()))
        .setRetryPolicy(scenario.retryPolicy())
        .build());
    assertEquals(ClaimOutcome.CLAIM_OUTCOME_ACQUIRED, claimed.getOutcome());
    CompleteRequest.Builder complete = CompleteRequest.newBuilder()
        .setNamespace(NAMESPACE)
        .setOperationKey(key)
        .setFencingToken(claimed.getLease().getFencingToken());
    switch (action) {
      case "in_progress":
        return;
      case "success":
        complete.setSuccess(Success.newBuilder().setResult(com.google.protobuf.ByteString.copyFromUtf8("before")));
        break;
      case "failure":
        complete.setFailure(Failure.newBuilder().setCode("before_failed").setMessage("recorded before"));
        break;
      case "unknown":
        complete.setUnknown(UnknownOutcome.newBuilder().setRemoteRef("remote-before").setMessage("recorded before"));
        break;
      default:
        throw new AssertionError("unknown before action " + action);
    }
    client.complete(complete.build());
  }

  static String statusOf(OpregClient client, String key) {
    try {
      return client.lookup(LookupRequest.newBuilder().setNamespace(NAMESPACE).setOperationKey(key).build())
          .getOperation().getStatus().name().replaceFirst("^OPERATION_STATUS_", "");
    } catch (OperationNotFoundException e) {
      return "NOT_FOUND";
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
    if (error instanceof WorkException && error.getCause() instanceof UnexpectedWorkError) return "work_error";
    return "not a conformance kind: " + error.getClass().getName();
  }

  /**
   * What differs from the scenario's expectation. The calls are the proxy's to judge (it was given
   * {@code expect.calls} as {@code --expect}): a non-zero exit status fails the scenario.
   */
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
    if (expect.has("calls") && proxy.status() != 0) {
      problems.add("the proxy's verdict on the calls (exit status " + proxy.status() + "): "
          + (proxy.lastLine().isEmpty() ? "(no verdict line)" : proxy.lastLine()));
    }
    if (expect.has("status") && !expect.get("status").asText().equals(status)) {
      problems.add("expected the status " + expect.get("status").asText() + ", the Lookup found " + status);
    }
    if (expect.has("reconcile_saw") && !run.reconcileSaw.equals(List.of(expect.get("reconcile_saw").asText()))) {
      problems.add("expected the reconcile callback to see " + expect.get("reconcile_saw") + ", it saw " + run.reconcileSaw);
    }
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
    String key = scenario.name() + "-java-" + UUID.randomUUID().toString().replace("-", "").substring(0, 12);
    Path scratch = Files.createTempDirectory("opreg-conformance-");
    try (OpregClient client = server.client()) {
      before(client, scenario, key);
      FaultProxy proxy = new FaultProxy(server.address(), scenario.faults(), scenario.expectedCalls(), scratch);
      long started = System.nanoTime();
      Run run;
      FaultProxy.Exit exit;
      try {
        run = runHelper(variant, scenario, proxy.address(), key);
      } finally {
        exit = proxy.finish();
      }
      double took = (System.nanoTime() - started) / 1e9;
      String status = statusOf(client, key);
      List<String> problems = differences(scenario, run, exit, status);
      if (!problems.isEmpty()) {
        String stderr = proxy.stderr().strip();
        String log = exit.log().strip();
        fail(String.format("scenario %s (%s helper, key %s/%s, %.2fs):%n- %s%n%nthe proxy's whole log:%n%s%s",
            scenario.name(), variant.name().toLowerCase(), NAMESPACE, key, took, String.join("\n- ", problems),
            log.isEmpty() ? "(empty)" : log,
            stderr.isEmpty() ? "" : "\n\nthe proxy's stderr:\n" + stderr));
      }
    } finally {
      try (Stream<Path> files = Files.walk(scratch)) {
        files.sorted(java.util.Comparator.reverseOrder()).forEach(path -> path.toFile().delete());
      }
    }
  }
}
