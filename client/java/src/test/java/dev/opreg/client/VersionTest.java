package dev.opreg.client;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.opreg.client.testing.TestServer;
import java.io.IOException;
import java.nio.file.Files;
import org.junit.jupiter.api.Test;

class VersionTest {
  @Test
  void thePackageVersionIsTheRepositorysVersion() throws IOException {
    String version = Files.readString(TestServer.repo().resolve("VERSION")).strip();
    assertEquals(version, Version.get(), "client/java/pom.xml's <version> differs from ../../VERSION");
    assertEquals(version, OpregClient.version());
  }
}
