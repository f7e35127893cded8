package dev.opreg.client.testing;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * opreg-fault-proxy ($OPREG_FAULT_PROXY_BIN, default &lt;repo&gt;/target/debug/opreg-fault-proxy) in
 * front of an upstream server: prints {@code listening HOST:PORT} first, logs one line per call,
 * exits once its stdin closes and the calls in flight are logged ({@link #finish()}). Given the
 * expected calls ({@code --expect}), it matches the calls it saw against them (client/PROTOCOL.md,
 * "Matching calls"), prints its verdict as its last stdout line and exits 0 if they matched, 3 if not.
 */
public final class FaultProxy implements AutoCloseable {
  private static final long START_TIMEOUT_SECONDS = 10;
  private static final long EXIT_TIMEOUT_SECONDS = 30; // a takeover waits up to 15 s for a lease to lapse
  private static final long STDOUT_TIMEOUT_SECONDS = 5; // the rest of stdout, once the proxy exited

  /**
   * How the proxy ended: its exit status (non-zero with {@code --expect}: the calls did not match,
   * or the proxy failed), its last line of stdout after {@code listening} ({@code ""} if none: the
   * verdict with {@code --expect}), and its log of the calls.
   */
  public record Exit(int status, String lastLine, String log) {}

  private final Process process;
  private final Path log;
  private final Path stderr;
  private final String address;
  private final List<String> stdout = new ArrayList<>(); // after `listening`, guarded by itself
  private final Thread drain;

  /** {@code expectJson}: the expected calls as a JSON array, passed as {@code --expect}; null for none. */
  public FaultProxy(String upstream, String faultsJson, String expectJson, Path scratch) {
    Path binary = TestServer.binary("OPREG_FAULT_PROXY_BIN", "opreg.fault.proxy.bin", "opreg-fault-proxy");
    this.log = scratch.resolve("calls.log");
    this.stderr = scratch.resolve("proxy.stderr");
    List<String> command = new ArrayList<>(List.of(
        binary.toString(), "--upstream", "http://" + upstream, "--faults", faultsJson, "--log", log.toString()));
    if (expectJson != null) {
      command.addAll(List.of("--expect", expectJson));
    }
    try {
      process = new ProcessBuilder(command).redirectError(stderr.toFile()).start();
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    BufferedReader out = new BufferedReader(new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8));
    CompletableFuture<String> first = CompletableFuture.supplyAsync(() -> {
      try {
        String line = out.readLine();
        return line == null ? "" : line.trim();
      } catch (IOException e) {
        return "";
      }
    });
    String line;
    try {
      line = first.get(START_TIMEOUT_SECONDS, TimeUnit.SECONDS);
    } catch (TimeoutException | java.util.concurrent.ExecutionException e) {
      line = "";
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      line = "";
    }
    if (!line.startsWith("listening ")) {
      process.destroyForcibly();
      throw new IllegalStateException(
          "opreg-fault-proxy did not print 'listening HOST:PORT' (got '" + line + "'):\n" + stderr());
    }
    this.address = line.substring("listening ".length()).trim();
    // Keep reading stdout, so the proxy never blocks on a full pipe, for its last line.
    drain = new Thread(() -> {
      try {
        String next;
        while ((next = out.readLine()) != null) {
          synchronized (stdout) {
            stdout.add(next.trim());
          }
        }
      } catch (IOException ignored) {
        // the proxy exited
      }
    }, "opreg-fault-proxy-stdout");
    drain.setDaemon(true);
    drain.start();
  }

  /** host:port. */
  public String address() {
    return address;
  }

  /**
   * Closes stdin; waits for the proxy to log the calls in flight and exit, and for the rest of its
   * stdout. A proxy that does not exit in time is killed: its status is then non-zero, and its log
   * says so.
   */
  public Exit finish() {
    try {
      process.getOutputStream().close();
    } catch (IOException ignored) {
      // already closed
    }
    String note = "";
    try {
      if (!process.waitFor(EXIT_TIMEOUT_SECONDS, TimeUnit.SECONDS)) {
        note = "\n(the proxy did not exit within " + EXIT_TIMEOUT_SECONDS + "s after stdin closed: killed)";
        process.destroyForcibly();
        process.waitFor(5, TimeUnit.SECONDS);
      }
      drain.join(TimeUnit.SECONDS.toMillis(STDOUT_TIMEOUT_SECONDS));
    } catch (InterruptedException e) {
      process.destroyForcibly();
      Thread.currentThread().interrupt();
    }
    int status = process.isAlive() ? -1 : process.exitValue();
    String lastLine;
    synchronized (stdout) {
      lastLine = stdout.isEmpty() ? "" : stdout.get(stdout.size() - 1);
    }
    return new Exit(status, lastLine, log() + note);
  }

  public String log() {
    return TestServer.read(log);
  }

  public String stderr() {
    return TestServer.read(stderr);
  }

  @Override
  public void close() {
    if (process.isAlive()) {
      finish();
    }
  }
}
