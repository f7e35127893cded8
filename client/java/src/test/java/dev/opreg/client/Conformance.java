package dev.opreg.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.google.protobuf.ByteString;
import dev.opreg.client.testing.FaultProxy;
import java.io.IOException;
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
import java.util.Optional;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import opreg.v1.Registry.ClaimOutcome;
import opreg.v1.Registry.ClaimRequest;
import opreg.v1.Registry.ClaimResponse;
import opreg.v1.Registry.CompleteRequest;
import opreg.v1.Registry.Failure;
import opreg.v1.Registry.LookupRequest;
import opreg.v1.Registry.Operation;
import opreg.v1.Registry.RetryPolicy;
import opreg.v1.Registry.RetryableError;
import opreg.v1.Registry.Success;
import opreg.v1.Registry.UnknownOutcome;

/**
 * What the conformance runners share ({@link ConformanceTest} for the run-once helper, {@link
 * WorkerConformanceTest} for the worker): the scenario files' format, their {@code before}, work
 * and reconcile actions, the direct Lookup afterwards, and the checks and report both make
 * (client/PROTOCOL.md, "Conformance scenarios" and "Worker scenarios").
 */
final class Conformance {
  static final String BEFORE_OWNER = "conformance-before";
  /** What the {@code before} owner's success records (PROTOCOL.md: result {@code before}). */
  static final Success BEFORE_SUCCESS = Success.newBuilder().setResult(ByteString.copyFromUtf8("before")).build();
  static final ObjectMapper JSON = new ObjectMapper();

  private Conformance() {}

  /** What {@code fail_unexpected} throws: an error of no opreg kind. */
  static final class UnexpectedWorkError extends Exception {
    private static final long serialVersionUID = 1L;

    UnexpectedWorkError(String message) {
      super(message);
    }
  }

  /** One scenario with its file's defaults. */
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

    /** The {@code before} action; null when the scenario has none. */
    String before() {
      return raw.has("before") ? raw.get("before").asText() : null;
    }

    List<String> work() {
      return texts(raw.get("work"));
    }

    JsonNode expect() {
      return raw.get("expect");
    }

    /** The reconcile verdict; null when the scenario gives no callback. */
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
  }

  static List<Scenario> load(Path file) {
    JsonNode tree;
    try {
      tree = JSON.readTree(Files.readString(file, StandardCharsets.UTF_8));
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    List<Scenario> all = new ArrayList<>();
    tree.get("scenarios").forEach(raw -> all.add(new Scenario(raw, tree.get("defaults"))));
    return all;
  }

  /** The names key the reports (and the dynamic tests): each must be unique. */
  static void assertNamesUnique(List<Scenario> all) {
    Set<String> names = new HashSet<>();
    all.forEach(scenario -> assertTrue(names.add(scenario.name()), "duplicate scenario " + scenario.name()));
    assertFalse(all.isEmpty());
  }

  static List<String> texts(JsonNode array) {
    List<String> texts = new ArrayList<>();
    array.forEach(item -> texts.add(item.asText()));
    return texts;
  }

  /** 12 random hex digits, for namespaces and keys no earlier run used. */
  static String randomHex() {
    return UUID.randomUUID().toString().replace("-", "").substring(0, 12);
  }

  static byte[] bytes(String text) {
    return text.getBytes(StandardCharsets.UTF_8);
  }

  private static String json(JsonNode node) {
    try {
      return JSON.writeValueAsString(node);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  // -- before, directly against the server ---------------------------------------------------

  /**
   * The scenario's {@code before}, directly against the server: a Claim by {@link #BEFORE_OWNER}
   * under {@code leaseTtl} with the scenario's parameters and retry policy, then (but for {@code
   * in_progress}) the Complete the action names. Returns that Claim's answer; null without a {@code before}.
   */
  static ClaimResponse before(OpregClient client, Scenario scenario, String namespace, String key, Duration leaseTtl) {
    String action = scenario.before();
    if (action == null) {
      return null;
    }
    ClaimResponse claimed = client.claim(ClaimRequest.newBuilder()
        .setNamespace(namespace)
        .setOperationKey(key)
        .setOwner(BEFORE_OWNER)
        .setParameters(Parameters.toStruct(scenario.parameters()))
        .setLeaseTtl(Durations.toProto(leaseTtl))
        .setRetryPolicy(scenario.retryPolicy())
        .build());
    assertEquals(ClaimOutcome.CLAIM_OUTCOME_ACQUIRED, claimed.getOutcome());
    CompleteRequest.Builder complete = CompleteRequest.newBuilder()
        .setNamespace(namespace)
        .setOperationKey(key)
        .setFencingToken(claimed.getLease().getFencingToken());
    switch (action) {
      case "in_progress":
        return claimed;
      case "success":
        complete.setSuccess(BEFORE_SUCCESS);
        break;
      case "failure":
        complete.setFailure(Failure.newBuilder().setCode("before_failed").setMessage("recorded before"));
        break;
      case "unknown":
        complete.setUnknown(UnknownOutcome.newBuilder().setRemoteRef("remote-before").setMessage("recorded before"));
        break;
      case "retry_due":
        complete.setRetryable(RetryableError.newBuilder()
            .setErrorClass("BEFORE")
            .setMessage("recorded before")
            .setRetryAfter(Durations.toProto(Duration.ofMillis(1))));
        break;
      default:
        throw new AssertionError("unknown before action " + action);
    }
    client.complete(complete.build());
    return claimed;
  }

  // -- the work and the reconcile callback ---------------------------------------------------

  /** The scenario's work and reconcile callback, and what they saw (safe to call from any thread). */
  static final class Callbacks {
    private final Scenario scenario;
    private final AtomicInteger workRuns = new AtomicInteger();
    private final List<String> reconcileSaw = new CopyOnWriteArrayList<>();

    Callbacks(Scenario scenario) {
      this.scenario = scenario;
    }

    /** How many times the work began. */
    int workRuns() {
      return workRuns.get();
    }

    /** The remote refs the reconcile callback was given, in order. */
    List<String> reconcileSaw() {
      return reconcileSaw;
    }

    /** One run of the work: the next action of {@code work} (the last one repeats). */
    byte[] work(Lease lease) throws Exception {
      List<String> actions = scenario.work();
      String action = actions.get(Math.min(workRuns.getAndIncrement(), actions.size() - 1));
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
        case "slow":
          Thread.sleep(500);
          return bytes("done");
        case "hang":
          lease.await(Duration.ofSeconds(10)); // until the lease is reported lost (a cancellation loses it too)
          return bytes("done");
        case "hang_ignoring_lease":
          sleepIgnoringInterrupts(scenario.leaseTtl().multipliedBy(2));
          return bytes("done");
        default:
          throw new AssertionError("unknown work action " + action);
      }
    }

    /** The reconcile callback: records the remote ref it was given, then answers the scenario's verdict. */
    Reconciliation reconcile(Lease lease, String remoteRef) {
      reconcileSaw.add(remoteRef);
      String verdict = scenario.reconcile();
      return switch (verdict) {
        case "succeeded" -> Reconciliation.succeeded(bytes("reconciled"));
        case "failed" -> Reconciliation.failed("reconciled_failed");
        case "not_applied" -> Reconciliation.notApplied();
        case "hang" -> {
          lease.await(Duration.ofSeconds(10)); // until the lease is reported lost (a cancellation loses it too)
          yield Reconciliation.succeeded(bytes("reconciled"));
        }
        default -> throw new AssertionError("unknown reconcile verdict " + verdict);
      };
    }
  }

  /** Sleeps through everything, the interrupt of a lost lease included. */
  private static void sleepIgnoringInterrupts(Duration duration) {
    long end = System.nanoTime() + duration.toNanos();
    long left;
    while ((left = end - System.nanoTime()) > 0) {
      try {
        Thread.sleep(Math.max(1, left / 1_000_000));
      } catch (InterruptedException ignored) {
        // ignored on purpose
      }
    }
  }

  // -- afterwards ----------------------------------------------------------------------------

  /** The operation by a direct Lookup; empty when there is none. */
  static Optional<Operation> lookup(OpregClient client, String namespace, String key) {
    try {
      return Optional.of(client.lookup(LookupRequest.newBuilder().setNamespace(namespace).setOperationKey(key).build())
          .getOperation());
    } catch (OperationNotFoundException e) {
      return Optional.empty();
    }
  }

  /** The status as the scenarios name it ({@code NOT_FOUND} when there is no operation). */
  static String statusOf(Optional<Operation> operation) {
    return operation.map(found -> found.getStatus().name().replaceFirst("^OPERATION_STATUS_", "")).orElse("NOT_FOUND");
  }

  /**
   * What differs from {@code expect}'s {@code calls}, {@code status} and {@code reconcile_saw}. The
   * calls are the proxy's to judge (it was given {@code expect.calls} as {@code --expect}): a
   * non-zero exit status fails the scenario.
   */
  static List<String> sharedDifferences(Scenario scenario, FaultProxy.Exit proxy, String status, Callbacks callbacks) {
    JsonNode expect = scenario.expect();
    List<String> problems = new ArrayList<>();
    if (expect.has("calls") && proxy.status() != 0) {
      problems.add("the proxy's verdict on the calls (exit status " + proxy.status() + "): "
          + (proxy.lastLine().isEmpty() ? "(no verdict line)" : proxy.lastLine()));
    }
    if (expect.has("status") && !expect.get("status").asText().equals(status)) {
      problems.add("expected the status " + expect.get("status").asText() + ", the Lookup found " + status);
    }
    if (expect.has("reconcile_saw") && !callbacks.reconcileSaw().equals(List.of(expect.get("reconcile_saw").asText()))) {
      problems.add("expected the reconcile callback to see " + expect.get("reconcile_saw") + ", it saw " + callbacks.reconcileSaw());
    }
    return problems;
  }

  /** The failure message of a scenario: {@code headline}, its problems, the proxy's log and stderr. */
  static String report(String headline, List<String> problems, FaultProxy proxy, FaultProxy.Exit exit) {
    String log = exit.log().strip();
    String stderr = proxy.stderr().strip();
    return String.format("%s:%n- %s%n%nthe proxy's whole log:%n%s%s",
        headline, String.join("\n- ", problems), log.isEmpty() ? "(empty)" : log,
        stderr.isEmpty() ? "" : "\n\nthe proxy's stderr:\n" + stderr);
  }
}
