package dev.opreg.client.testing;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * opreg-fault-proxy ($OPREG_FAULT_PROXY_BIN, default &lt;repo&gt;/target/debug/opreg-fault-proxy) in
 * front of an upstream server: prints {@code listening HOST:PORT} first, logs one line per call,
 * exits once its stdin closes and the calls in flight are logged ({@link #finish()}).
 */
public final class FaultProxy implements AutoCloseable {
  private static final long START_TIMEOUT_SECONDS = 10;
  private static final long EXIT_TIMEOUT_SECONDS = 30; // a takeover waits up to 15 s for a lease to lapse

  private final Process process;
  private final Path log;
  private final Path stderr;
  private final String address;

  public FaultProxy(String upstream, String faultsJson, Path scratch) {
    Path binary = TestServer.binary("OPREG_FAULT_PROXY_BIN", "opreg.fault.proxy.bin", "opreg-fault-proxy");
    this.log = scratch.resolve("calls.log");
    this.stderr = scratch.resolve("proxy.stderr");
    try {
      process = new ProcessBuilder(
              binary.toString(), "--upstream", "http://" + upstream, "--faults", faultsJson, "--log", log.toString())
          .redirectError(stderr.toFile())
          .start();
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
    // Keep draining stdout so the proxy never blocks on a full pipe.
    Thread drain = new Thread(() -> {
      try {
        while (out.readLine() != null) {
          // discard
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

  /** Closes stdin; waits for the proxy to log the calls in flight and exit; returns its log. */
  public String finish() {
    try {
      process.getOutputStream().close();
    } catch (IOException ignored) {
      // already closed
    }
    try {
      if (!process.waitFor(EXIT_TIMEOUT_SECONDS, TimeUnit.SECONDS)) {
        process.destroyForcibly();
        process.waitFor(5, TimeUnit.SECONDS);
        return log() + "\n(the proxy did not exit within " + EXIT_TIMEOUT_SECONDS + "s after stdin closed: killed)";
      }
    } catch (InterruptedException e) {
      process.destroyForcibly();
      Thread.currentThread().interrupt();
    }
    return log();
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
