package dev.opreg.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.google.protobuf.Any;
import com.google.protobuf.ByteString;
import com.google.rpc.RetryInfo;
import dev.opreg.client.testing.TestServer;
import io.grpc.Status;
import java.io.IOException;
import java.nio.file.Files;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.function.BiConsumer;
import opreg.v1.Registry.ClaimOutcome;
import opreg.v1.Registry.ClaimResponse;
import opreg.v1.Registry.CompleteRequest;
import opreg.v1.Registry.Execution;
import opreg.v1.Registry.ExecutionOutcome;
import opreg.v1.Registry.Failure;
import opreg.v1.Registry.LookupResponse;
import opreg.v1.Registry.Operation;
import opreg.v1.Registry.OperationStatus;
import org.junit.jupiter.api.DynamicContainer;
import org.junit.jupiter.api.DynamicNode;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.TestFactory;

/**
 * The decisions of {@link Protocol} against every vector of client/testdata/decisions.json, one test
 * per vector named by its {@code name} (no server). Where they disagree, the client is wrong.
 */
class DecisionsTest {
  static final ObjectMapper JSON = new ObjectMapper();

  /** A wait matches within this (the file's rule). */
  static final double WAIT_TOLERANCE_MS = 1.0;

  /** The file's settings: the backoff, the poll interval and the server wait every vector is decided with. */
  record Settings(Duration backoffInitial, Duration backoffMax, Duration pollInterval, Duration maxClaimWait) {}

  @TestFactory
  List<DynamicNode> everyVector() throws IOException {
    JsonNode table = JSON.readTree(Files.readString(TestServer.repo().resolve("client/testdata/decisions.json")));
    JsonNode given = table.get("settings");
    Settings settings = new Settings(
        millis(given.get("backoff_initial_ms")),
        millis(given.get("backoff_max_ms")),
        millis(given.get("poll_interval_ms")),
        millis(given.get("max_claim_wait_ms")));

    Map<String, BiConsumer<JsonNode, Settings>> sections = new LinkedHashMap<>();
    sections.put("transient_error", DecisionsTest::transientError);
    sections.put("retry_delay", DecisionsTest::retryDelay);
    sections.put("claim_answer", DecisionsTest::claimAnswer);
    sections.put("complete_error", DecisionsTest::completeError);
    sections.put("renew_failure", DecisionsTest::renewFailure);
    sections.put("call_in_doubt", DecisionsTest::callInDoubt);

    List<DynamicNode> nodes = new ArrayList<>();
    nodes.add(DynamicTest.dynamicTest("the settings are the client's defaults", () -> assertEquals(
        new Settings(
            RunOptions.DEFAULT_BACKOFF_INITIAL,
            RunOptions.DEFAULT_BACKOFF_MAX,
            RunOptions.DEFAULT_POLL_INTERVAL,
            RunOptions.DEFAULT_MAX_CLAIM_WAIT),
        settings)));
    Set<String> inFile = new HashSet<>();
    table.fieldNames().forEachRemaining(inFile::add);
    inFile.removeAll(Set.of("about", "settings"));
    // A section added to the file fails here until it is decided below.
    nodes.add(DynamicTest.dynamicTest("every section is decided", () -> assertEquals(sections.keySet(), inFile)));
    sections.forEach((section, decide) -> {
      List<DynamicTest> tests = new ArrayList<>();
      for (JsonNode vector : table.get(section)) {
        String name = vector.get("name").asText();
        tests.add(DynamicTest.dynamicTest(name, () -> {
          try {
            decide.accept(vector, settings);
          } catch (AssertionError failed) {
            // Surefire's console names a dynamic test by its index: say which vector failed.
            throw new AssertionError(section + ": " + name + ": " + failed.getMessage(), failed);
          }
        }));
      }
      nodes.add(DynamicContainer.dynamicContainer(section, tests));
    });
    return nodes;
  }

  // -- the sections ------------------------------------------------------------------------------

  static void transientError(JsonNode vector, Settings settings) {
    assertEquals(vector.get("expect").asBoolean(), Protocol.isTransient(error(vector.get("error"))));
  }

  static void retryDelay(JsonNode vector, Settings settings) {
    Duration retryInfo = vector.has("retry_info_ms") ? millis(vector.get("retry_info_ms")) : null;
    Duration wait = Protocol.retryDelay(
        vector.get("attempt").asInt(), retryInfo, vector.get("random").asDouble(), settings.backoffInitial(), settings.backoffMax());
    assertWait(vector.get("expect_ms"), wait);
  }

  static void claimAnswer(JsonNode vector, Settings settings) {
    ClaimResponse response = claimResponse(vector.get("answer"));
    // Without remaining_ms, the whole default deadline is left.
    long remaining = vector.has("remaining_ms") ? millis(vector.get("remaining_ms")).toNanos() : RunOptions.DEFAULT_DEADLINE.toNanos();
    double random = vector.path("random").asDouble(0);
    JsonNode expect = vector.get("expect");
    String step = expect.get("step").asText();
    if (step.equals("raise")) {
      OpregException raised = assertThrows(
          OpregException.class, () -> Protocol.decideClaimAnswer(response, remaining, settings.pollInterval(), random, null));
      assertEquals(expect.get("error").asText(), ConformanceTest.kindOf(raised), raised.toString());
      if (raised instanceof BusinessFailureException business) {
        assertEquals(expect.get("code").asText(), business.failureCode());
        assertEquals(expect.get("replayed").asBoolean(), business.replayed());
      }
      return;
    }
    Protocol.ClaimStep decided = Protocol.decideClaimAnswer(response, remaining, settings.pollInterval(), random, null);
    switch (step) {
      case "execute" ->
          assertEquals(expect.get("reconcile").asBoolean(), assertInstanceOf(Protocol.Execute.class, decided).reconciling());
      case "return" -> {
        Result result = assertInstanceOf(Protocol.Replayed.class, decided).result();
        assertEquals(expect.get("value").asText(), result.text());
        assertEquals(expect.get("replayed").asBoolean(), result.replayed());
      }
      case "wait" -> assertWait(expect.get("wait_ms"), assertInstanceOf(Protocol.Wait.class, decided).delay());
      default -> throw new AssertionError("unknown step " + step + ", decided " + decided);
    }
  }

  static void completeError(JsonNode vector, Settings settings) {
    assertEquals(enumName(vector.get("expect")), Protocol.decideCompleteError(error(vector.get("error"))).name());
  }

  static void renewFailure(JsonNode vector, Settings settings) {
    Protocol.RenewStep step = Protocol.decideRenewFailure(
        error(vector.get("error")),
        vector.get("attempt").asInt(),
        millis(vector.get("trusted_left_ms")).toNanos(),
        vector.get("random").asDouble(),
        settings.backoffInitial(),
        settings.backoffMax());
    JsonNode expect = vector.get("expect");
    if (expect.get("lost").asBoolean()) {
      assertInstanceOf(Protocol.Lost.class, step);
    } else {
      assertWait(expect.get("wait_ms"), assertInstanceOf(Protocol.RenewAgain.class, step).delay());
    }
  }

  static void callInDoubt(JsonNode vector, Settings settings) {
    JsonNode lookup = vector.get("lookup");
    LookupResponse response = null; // null: the Lookup failed
    if (!lookup.isNull()) {
      LookupResponse.Builder builder = LookupResponse.newBuilder().setOperation(operation(lookup));
      for (JsonNode execution : lookup.get("executions")) {
        builder.addExecutions(Execution.newBuilder()
            .setFencingToken(execution.get("token").asLong())
            .setOutcome(ExecutionOutcome.valueOf("EXECUTION_OUTCOME_" + execution.get("outcome").asText())));
      }
      response = builder.build();
    }
    CompleteRequest report = switch (vector.get("reported").asText()) {
      case "success" -> Protocol.successReport("done".getBytes(), null);
      case "failure" -> Protocol.errorReport(new BusinessException("insufficient_funds"));
      case "retryable" -> Protocol.errorReport(new TransientException("down"));
      case "unknown" -> Protocol.errorReport(new SentButUnconfirmedException("remote-1"));
      default -> throw new AssertionError("unknown report " + vector.get("reported"));
    };
    assertEquals(
        enumName(vector.get("expect")),
        Protocol.decideCallInDoubt(response, vector.get("token").asLong(), report).name());
  }

  // -- building the inputs -----------------------------------------------------------------------

  /** The error a real failed call with this status converts to (OpregErrors, as the client does). */
  static OpregException error(JsonNode error) {
    Status.Code code = Status.Code.valueOf(error.get("code").asText());
    String reason = error.has("reason") ? error.get("reason").asText() : null; // absent: no ErrorInfo
    Map<String, String> metadata = new LinkedHashMap<>();
    for (Map.Entry<String, JsonNode> entry : error.path("metadata").properties()) {
      metadata.put(entry.getKey(), entry.getValue().asText());
    }
    List<Any> more = new ArrayList<>();
    if (error.has("retry_delay_ms")) {
      more.add(Any.pack(RetryInfo.newBuilder().setRetryDelay(Durations.toProto(millis(error.get("retry_delay_ms")))).build()));
    }
    return OpregErrors.fromThrowable(
        ErrorsTest.status(code, error.path("message").asText(""), reason, metadata, more.toArray(Any[]::new)));
  }

  static ClaimResponse claimResponse(JsonNode answer) {
    Operation.Builder operation = operation(answer).toBuilder();
    if (answer.has("result")) {
      operation.setResult(ByteString.copyFromUtf8(answer.get("result").asText()));
    }
    if (answer.has("failure")) {
      JsonNode failure = answer.get("failure");
      operation.setFailure(Failure.newBuilder().setCode(failure.get("code").asText()).setMessage(failure.path("message").asText("")));
    }
    if (answer.has("remote_ref")) {
      operation.setRemoteRef(answer.get("remote_ref").asText());
    }
    ClaimResponse.Builder response = ClaimResponse.newBuilder()
        .setOutcome(ClaimOutcome.valueOf("CLAIM_OUTCOME_" + answer.get("outcome").asText()))
        .setOperation(operation);
    if (answer.path("lease").asBoolean(false)) {
      response.setLease(opreg.v1.Registry.Lease.newBuilder().setFencingToken(1));
    }
    if (answer.has("retry_after_ms")) {
      response.setRetryAfter(Durations.toProto(millis(answer.get("retry_after_ms"))));
    }
    if (answer.has("waited_ms")) { // absent: a server that does not wait
      response.setWaited(Durations.toProto(millis(answer.get("waited_ms"))));
    }
    return response.build();
  }

  static Operation operation(JsonNode withStatus) {
    return Operation.newBuilder()
        .setNamespace("decisions")
        .setOperationKey("k")
        .setStatus(status(withStatus.get("status").asText()))
        .build();
  }

  /** An operation status by its name without {@code OPERATION_STATUS_}. */
  static OperationStatus status(String name) {
    return OperationStatus.valueOf("OPERATION_STATUS_" + name);
  }

  static Duration millis(JsonNode ms) {
    return Duration.ofNanos(Math.round(ms.asDouble() * 1e6));
  }

  static String enumName(JsonNode value) {
    return value.asText().toUpperCase(Locale.ROOT);
  }

  static void assertWait(JsonNode expectMs, Duration wait) {
    assertEquals(expectMs.asDouble(), wait.toNanos() / 1e6, WAIT_TOLERANCE_MS, "wait in ms");
  }
}
