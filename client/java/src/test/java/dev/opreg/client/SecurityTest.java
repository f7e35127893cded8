package dev.opreg.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.opreg.client.testing.TestServer;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import opreg.v1.Registry.ClaimRequest;
import opreg.v1.Registry.LookupRequest;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;

/**
 * A secured server: TLS with client certificates required (mutual TLS) and an access policy. The
 * client reaches it with a CA, a client certificate and an API key; each refusal arrives as its
 * typed error. The certificates are signed here, for this run, with the openssl command.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class SecurityTest {
  static final String API_KEY = "java-secret-key";
  static final String IDENTITY = "spiffe://opreg.test/java-reader";

  TestServer secured;
  Path pki;

  static void openssl(Path directory, String... args) {
    try {
      List<String> command = new java.util.ArrayList<>(List.of("openssl"));
      command.addAll(List.of(args));
      Process process = new ProcessBuilder(command).directory(directory.toFile()).redirectErrorStream(true).start();
      String output = new String(process.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
      if (process.waitFor() != 0) {
        throw new IllegalStateException("openssl " + String.join(" ", args) + " failed:\n" + output);
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(e);
    }
  }

  /** {@code name.pem} and {@code name.key}, signed by the CA in {@code directory}. */
  static void issue(Path directory, String name, String subjectAltName) throws IOException {
    Files.writeString(directory.resolve(name + ".ext"), "subjectAltName=" + subjectAltName + "\n");
    openssl(directory, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", name + ".key", "-out", name + ".csr", "-subj", "/CN=" + name);
    openssl(directory, "x509", "-req", "-in", name + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "1", "-extfile", name + ".ext", "-out", name + ".pem");
  }

  static Map<String, String> secure(Path directory) {
    try {
      Path pki = Files.createDirectory(directory.resolve("pki"));
      openssl(pki, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
          "-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=opreg java test CA");
      issue(pki, "server", "DNS:localhost,IP:127.0.0.1");
      issue(pki, "client", "URI:" + IDENTITY);
      String keyHash = HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(API_KEY.getBytes(StandardCharsets.UTF_8)));
      Path policy = directory.resolve("policy.toml");
      Files.writeString(policy, """
          [[principal]]
          name = "java-worker"
          api_key_sha256 = "%s"
          namespaces = ["java-*"]
          roles = ["worker"]

          [[principal]]
          name = "java-reader"
          tls_identity = "%s"
          namespaces = ["java-*"]
          roles = ["reader"]
          """.formatted(keyHash, IDENTITY));
      return Map.of(
          "OPREG_TLS_CERT", pki.resolve("server.pem").toString(),
          "OPREG_TLS_KEY", pki.resolve("server.key").toString(),
          "OPREG_TLS_CLIENT_CA", pki.resolve("ca.pem").toString(),
          "OPREG_AUTH_FILE", policy.toString());
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    } catch (java.security.NoSuchAlgorithmException e) {
      throw new IllegalStateException(e);
    }
  }

  @BeforeAll
  void start() {
    secured = TestServer.start(SecurityTest::secure);
    pki = secured.directory().resolve("pki");
  }

  @AfterAll
  void stop() {
    if (secured != null) {
      secured.close();
    }
  }

  OpregClient connect(boolean certificate, String apiKey) throws IOException {
    OpregClient.Builder builder = OpregClient.builder("https://" + secured.address())
        .caCertificate(Files.readAllBytes(pki.resolve("ca.pem")))
        .timeout(Duration.ofSeconds(5));
    if (certificate) {
      builder.clientCertificate(Files.readAllBytes(pki.resolve("client.pem")), Files.readAllBytes(pki.resolve("client.key")));
    }
    if (apiKey != null) {
      builder.apiKey(apiKey);
    }
    return builder.build();
  }

  static String namespace() {
    return "java-" + UUID.randomUUID().toString().substring(0, 8);
  }

  static ClaimRequest claim(String namespace) {
    return ClaimRequest.newBuilder().setNamespace(namespace).setOperationKey("k").setOwner("w")
        .setParameters(Parameters.toStruct(Map.of("a", 1))).build();
  }

  @Test
  void anApiKeyOverMutualTlsIsTheWorker() throws IOException {
    try (OpregClient client = connect(true, API_KEY)) {
      assertTrue(client.claim(claim(namespace())).getLease().getFencingToken() > 0);
      PermissionDeniedException denied = assertThrows(PermissionDeniedException.class, () -> client.claim(claim("billing")));
      assertEquals(List.of("java-worker", "billing", "worker"), List.of(denied.principal(), denied.namespace(), denied.role()));
      // The helper too: by the key, over TLS.
      Result result = client.runOnce(namespace(), "run", Map.of("a", 1), lease -> "ok".getBytes(StandardCharsets.UTF_8));
      assertEquals("ok", result.text());
    }
  }

  @Test
  void theCertificateAloneIsTheReader() throws IOException {
    try (OpregClient client = connect(true, null)) {
      String ns = namespace();
      assertThrows(OperationNotFoundException.class,
          () -> client.lookup(LookupRequest.newBuilder().setNamespace(ns).setOperationKey("nothing").build()));
      PermissionDeniedException denied = assertThrows(PermissionDeniedException.class, () -> client.claim(claim(ns)));
      assertEquals(List.of("java-reader", "worker"), List.of(denied.principal(), denied.role()));
    }
  }

  @Test
  void aWrongKeyIsUnauthenticated() throws IOException {
    try (OpregClient client = connect(true, "guessed")) {
      assertThrows(UnauthenticatedException.class,
          () -> client.lookup(LookupRequest.newBuilder().setNamespace(namespace()).setOperationKey("k").build()));
    }
  }

  @Test
  void withoutAClientCertificateNoConnectionIsMade() throws IOException {
    try (OpregClient client = connect(false, API_KEY)) {
      assertThrows(UnavailableException.class,
          () -> client.lookup(LookupRequest.newBuilder().setNamespace(namespace()).setOperationKey("k").build()));
    }
  }

  @Test
  void plaintextToATlsServerIsRefusedAndNotRetried() {
    try (OpregClient client = OpregClient.builder(secured.address()).timeout(Duration.ofSeconds(5)).build()) {
      // grpc-java answers INTERNAL ("First received frame was not SETTINGS"): not transient.
      OpregException error = assertThrows(OpregException.class,
          () -> client.lookup(LookupRequest.newBuilder().setNamespace(namespace()).setOperationKey("k").build()));
      assertTrue(!error.isTransient(), error.toString());
    }
  }
}
