package dev.opreg.client.testing;

import dev.opreg.client.OpregClient;
import java.util.UUID;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.extension.ExtendWith;

/** A test class against the run's one server: a client connected to it and a fresh namespace per test. */
@ExtendWith(ServerExtension.class)
public abstract class AgainstServer {
  protected OpregClient client;
  protected String ns;

  @BeforeEach
  void connect(TestServer server) {
    client = server.client();
    ns = "java-" + UUID.randomUUID().toString().substring(0, 12);
  }

  @AfterEach
  void close() {
    client.close();
  }
}
