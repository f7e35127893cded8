package dev.opreg.client.testing;

import dev.opreg.client.OpregClient;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.time.Duration;
import java.util.Comparator;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import java.util.stream.Stream;

/**
 * A real opreg-server over its own embedded PostgreSQL: started from $OPREG_SERVER_BIN (default
 * &lt;repo&gt;/target/debug/opreg-server), ready once its log says "opreg serving", stopped with
 * SIGTERM (then killed, if it does not stop in 30 s), its data removed.
 */
public final class TestServer implements AutoCloseable {
  private static final Duration START_TIMEOUT = Duration.ofSeconds(90);
  private static final Duration STOP_TIMEOUT = Duration.ofSeconds(30);

  private final Process process;
  private final Path dataRoot;
  private final Path log;
  private final String address;
  private final Thread hook;

  private TestServer(Process process, Path dataRoot, Path log, String address) {
    this.process = process;
    this.dataRoot = dataRoot;
    this.log = log;
    this.address = address;
    this.hook = new Thread(process::destroyForcibly, "opreg-test-server-kill");
    Runtime.getRuntime().addShutdownHook(hook);
  }

  /** The repository's root. */
  public static Path repo() {
    String property = System.getProperty("opreg.repo");
    if (property != null) {
      return Path.of(property).toAbsolutePath().normalize();
    }
    Path here = Path.of("").toAbsolutePath();
    while (here != null && !Files.exists(here.resolve("VERSION"))) {
      here = here.getParent();
    }
    if (here == null) {
      throw new IllegalStateException("cannot find the repository (no VERSION above " + Path.of("").toAbsolutePath() + ")");
    }
    return here;
  }

  /** A binary: $ENV, else the system property the build sets, else &lt;repo&gt;/target/debug/NAME. */
  public static Path binary(String env, String property, String name) {
    String path = System.getenv(env);
    if (path == null || path.isEmpty()) {
      path = System.getProperty(property);
    }
    Path binary = path == null || path.isEmpty() ? repo().resolve("target/debug/" + name) : Path.of(path);
    if (!Files.isRegularFile(binary)) {
      throw new IllegalStateException("no " + name + " at " + binary + ": build it with cargo, or set " + env);
    }
    return binary;
  }

  public static TestServer start() {
    return start(directory -> Map.of());
  }

  /** A server whose extra settings come from its scratch directory (e.g. certificates made there). */
  public static TestServer start(Function<Path, Map<String, String>> extraEnv) {
    Path binary = binary("OPREG_SERVER_BIN", "opreg.server.bin", "opreg-server");
    try {
      Path dataRoot = Files.createTempDirectory("opreg-java-");
      // As root the embedded PostgreSQL runs as another user that must traverse this.
      Files.setPosixFilePermissions(dataRoot, PosixFilePermissions.fromString("rwxr-xr-x"));
      Map<String, String> extra = extraEnv.apply(dataRoot);
      for (int attempt = 0; attempt < 3; attempt++) {
        TestServer server = tryStart(binary, dataRoot, attempt, extra);
        if (server != null) {
          return server;
        }
      }
      throw new IllegalStateException("could not find a free port for opreg-server");
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  private static TestServer tryStart(Path binary, Path dataRoot, int attempt, Map<String, String> extra) throws IOException {
    int port = freePort();
    Path log = dataRoot.resolve("server-" + attempt + ".log");
    ProcessBuilder builder = new ProcessBuilder(binary.toString())
        .redirectErrorStream(true)
        .redirectOutput(log.toFile())
        .redirectInput(ProcessBuilder.Redirect.from(new java.io.File("/dev/null")));
    Map<String, String> env = builder.environment();
    env.remove("OPREG_DATABASE_URL");
    env.put("OPREG_DATA_DIR", dataRoot.resolve("pg-" + attempt).toString());
    env.put("OPREG_LISTEN_ADDR", "127.0.0.1:" + port);
    env.put("OPREG_METRICS_ADDR", "127.0.0.1:0");
    env.put("OPREG_SHUTDOWN_GRACE", "5s");
    env.put("NO_COLOR", "1");
    env.putAll(extra);
    Process process = builder.start();
    long end = System.nanoTime() + START_TIMEOUT.toNanos();
    while (System.nanoTime() < end) {
      String text = read(log);
      if (text.contains("opreg serving")) {
        return new TestServer(process, dataRoot, log, "127.0.0.1:" + port);
      }
      if (!process.isAlive()) {
        if (text.toLowerCase().contains("in use")) {
          return null; // lost the race for the port: try another
        }
        throw new IllegalStateException("opreg-server exited with " + process.exitValue() + ":\n" + text);
      }
      sleep(50);
    }
    process.destroyForcibly();
    throw new IllegalStateException("opreg-server did not start within " + START_TIMEOUT + ":\n" + read(log));
  }

  /** host:port. */
  public String address() {
    return address;
  }

  /** The scratch directory of this server (its data, its log, what extraEnv made). */
  public Path directory() {
    return dataRoot;
  }

  /** A new plaintext client to this server, with a 10 s default timeout. */
  public OpregClient client() {
    return OpregClient.builder(address).timeout(Duration.ofSeconds(10)).build();
  }

  public String log() {
    return read(log);
  }

  @Override
  public void close() {
    try {
      if (process.isAlive()) {
        process.destroy(); // SIGTERM
        if (!process.waitFor(STOP_TIMEOUT.toSeconds(), TimeUnit.SECONDS)) {
          process.destroyForcibly();
          process.waitFor(STOP_TIMEOUT.toSeconds(), TimeUnit.SECONDS);
        }
      }
    } catch (InterruptedException e) {
      process.destroyForcibly();
      Thread.currentThread().interrupt();
    } finally {
      try {
        Runtime.getRuntime().removeShutdownHook(hook);
      } catch (IllegalStateException shuttingDown) {
        // the hook runs anyway
      }
      deleteTree(dataRoot);
    }
  }

  static int freePort() throws IOException {
    try (ServerSocket socket = new ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
      return socket.getLocalPort();
    }
  }

  static String read(Path file) {
    try {
      return Files.exists(file) ? Files.readString(file, StandardCharsets.UTF_8) : "";
    } catch (IOException e) {
      return "";
    }
  }

  public static void deleteTree(Path root) {
    if (!Files.exists(root)) {
      return;
    }
    try (Stream<Path> paths = Files.walk(root)) {
      paths.sorted(Comparator.reverseOrder()).forEach(path -> path.toFile().delete());
    } catch (IOException | UncheckedIOException e) {
      // best effort
    }
  }

  private static void sleep(long millis) {
    try {
      Thread.sleep(millis);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted", e);
    }
  }
}
