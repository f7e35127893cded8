package dev.opreg.client;

import static org.junit.jupiter.api.Assertions.fail;

import com.fasterxml.jackson.databind.JsonNode;
import dev.opreg.client.Conformance.Callbacks;
import dev.opreg.client.Conformance.Scenario;
import dev.opreg.client.testing.FaultProxy;
import dev.opreg.client.testing.ServerExtension;
import dev.opreg.client.testing.TestServer;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicReference;
import java.util.stream.Stream;
import opreg.v1.Registry.Operation;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * The worker conformance scenarios ({@code client/testdata/worker_scenarios.json}, format in
 * {@code client/PROTOCOL.md}, "Worker scenarios"): each drives a {@link Worker} on a namespace of
 * its own through a fresh opreg-fault-proxy, stops it once the proxy logged the scenario's {@code
 * stop_after} line, and checks the proxy's verdict and the operation by a direct Lookup. Every
 * scenario in the file runs; a new one needs no new code.
 */
@ExtendWith(ServerExtension.class)
class WorkerConformanceTest {
  static final Path SCENARIO_FILE = TestServer.repo().resolve("client/testdata/worker_scenarios.json");
  /** The {@code before} Claim's lease: it is Completed at once, so it only has to outlast that. */
  static final Duration BEFORE_LEASE = Duration.ofSeconds(30);
  static final Duration LOG_POLL = Duration.ofMillis(20);
  static final Duration STOP_AFTER_TIMEOUT = Duration.ofSeconds(10);
  /** Past the grace: the worker's cancelled work unwinds and its last calls are answered. */
  static final Duration RETURN_MARGIN = Duration.ofSeconds(5);

  static List<Scenario> all() {
    return Conformance.load(SCENARIO_FILE);
  }

  @Test
  void theScenarioNamesAreUnique() {
    Conformance.assertNamesUnique(all());
  }

  @TestFactory
  Stream<DynamicTest> scenarios(TestServer server) {
    return all().stream().map(scenario -> DynamicTest.dynamicTest(scenario.name(), () -> runScenario(server, scenario)));
  }

  static void runScenario(TestServer server, Scenario scenario) throws IOException {
    String random = Conformance.randomHex();
    String namespace = "conformance-java-" + random;
    String key = "payout:" + scenario.name() + "-java-" + random;
    Path scratch = Files.createTempDirectory("opreg-worker-conformance-");
    try (OpregClient direct = server.client()) {
      Conformance.before(direct, scenario, namespace, key, BEFORE_LEASE);
      FaultProxy proxy = new FaultProxy(server.address(), scenario.faults(), scenario.expectedCalls(), scratch);
      Callbacks callbacks = new Callbacks(scenario);
      long started = System.nanoTime();
      List<String> problems = new ArrayList<>();
      FaultProxy.Exit exit;
      try (OpregClient client = OpregClient.connect(proxy.address())) {
        problems.addAll(runWorker(worker(client, scenario, namespace, callbacks), scenario, proxy));
      } finally {
        exit = proxy.finish();
      }
      double took = (System.nanoTime() - started) / 1e9;
      problems.addAll(differences(scenario, exit, Conformance.lookup(direct, namespace, key), callbacks));
      if (!problems.isEmpty()) {
        fail(Conformance.report(String.format("worker scenario %s (key %s/%s, %.2fs)", scenario.name(), namespace, key, took),
            problems, proxy, exit));
      }
    } finally {
      TestServer.deleteTree(scratch);
    }
  }

  /** The worker the scenario describes: its handlers ({@code *}: the default one), callback and timings. */
  static Worker worker(OpregClient client, Scenario scenario, String namespace, Callbacks callbacks) {
    Worker.Builder worker = Worker.builder(client, namespace)
        .leaseTtl(scenario.leaseTtl())
        .pollInterval(scenario.millis("poll_interval_ms"))
        .grace(scenario.millis("grace_ms"))
        .callTimeout(scenario.millis("call_timeout_ms"));
    Handler handler = (operation, lease) -> callbacks.work(lease);
    for (String kind : Conformance.texts(scenario.setting("handlers"))) {
      if (kind.equals("*")) {
        worker.defaultHandler(handler);
      } else {
        worker.handler(kind, handler);
      }
    }
    if (scenario.reconcile() != null) {
      worker.reconcile((operation, lease) -> callbacks.reconcile(lease, operation.getRemoteRef()));
    }
    return worker.build();
  }

  /**
   * Runs the worker on a thread of its own until the proxy logged {@code stop_after}, then stops it
   * the way a user does ({@link Worker#stop()}) and waits for {@link Worker#run()} to return, for
   * the grace and a margin. Returns what went wrong.
   */
  static List<String> runWorker(Worker worker, Scenario scenario, FaultProxy proxy) {
    List<String> problems = new ArrayList<>();
    AtomicReference<Throwable> raised = new AtomicReference<>();
    Thread running = new Thread(() -> {
      try {
        worker.run();
      } catch (Throwable e) {
        raised.set(e);
      }
    }, "worker-conformance-" + scenario.name());
    running.setDaemon(true); // a worker that never returns fails the scenario; it must not hold up the JVM
    running.start();
    String stopAfter = scenario.raw().get("stop_after").asText();
    if (!awaitLogLine(proxy, stopAfter)) {
      problems.add("the proxy's log did not show " + stopAfter + " within " + Durations.seconds(STOP_AFTER_TIMEOUT));
    }
    worker.stop();
    Duration bound = scenario.millis("grace_ms").plus(RETURN_MARGIN);
    try {
      running.join(bound.toMillis());
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    if (running.isAlive()) {
      problems.add("the worker did not return within " + Durations.seconds(bound) + " of stop()");
    } else if (raised.get() != null) {
      problems.add("the worker raised " + raised.get());
    }
    return problems;
  }

  /** Reads the proxy's log every {@link #LOG_POLL} until it holds {@code line}; false after {@link #STOP_AFTER_TIMEOUT}. */
  static boolean awaitLogLine(FaultProxy proxy, String line) {
    long end = System.nanoTime() + STOP_AFTER_TIMEOUT.toNanos();
    while (!proxy.log().lines().anyMatch(line::equals)) {
      if (System.nanoTime() - end > 0) {
        return false;
      }
      try {
        Thread.sleep(LOG_POLL.toMillis());
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        return false;
      }
    }
    return true;
  }

  /** What differs from the scenario's expectation: what both runners check, then the worker's own. */
  static List<String> differences(Scenario scenario, FaultProxy.Exit proxy, Optional<Operation> operation, Callbacks callbacks) {
    JsonNode expect = scenario.expect();
    List<String> problems = Conformance.sharedDifferences(scenario, proxy, Conformance.statusOf(operation), callbacks);
    if (expect.has("last_error_class")) {
      String want = expect.get("last_error_class").asText();
      String found = operation.map(Operation::getLastErrorClass).orElse("(no operation)");
      if (!want.equals(found)) {
        problems.add("expected the last error class " + want + ", the Lookup found " + (found.isEmpty() ? "none" : found));
      }
    }
    if (expect.has("work_runs") && expect.get("work_runs").asInt() != callbacks.workRuns()) {
      problems.add("expected the work to begin " + expect.get("work_runs").asInt() + " time(s), it began " + callbacks.workRuns());
    }
    return problems;
  }
}
