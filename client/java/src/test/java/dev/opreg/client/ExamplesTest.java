package dev.opreg.client;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.google.protobuf.ByteString;
import dev.opreg.client.testing.ServerExtension;
import dev.opreg.client.testing.TestServer;
import dev.opreg.examples.Settlement;
import dev.opreg.interop.Interop;
import java.util.UUID;
import opreg.v1.Registry.ClaimOutcome;
import opreg.v1.Registry.ClaimRequest;
import opreg.v1.Registry.ClaimResponse;
import opreg.v1.Registry.CompleteRequest;
import opreg.v1.Registry.Success;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/** The lab and the interop program (examples/) against the real server. */
@ExtendWith(ServerExtension.class)
class ExamplesTest {
  @Test
  void theSettlementLabPasses(TestServer server) {
    try (OpregClient client = server.client()) {
      assertEquals(0, Settlement.run(client, "lab-" + UUID.randomUUID()));
    }
  }

  @Test
  void theInteropProgramReplaysAndRecords(TestServer server) {
    String ns = "interop-" + UUID.randomUUID();
    try (OpregClient client = server.client()) {
      // What the Rust CLI does in client/interop/run.sh: the parameters as a Struct, owner rust.
      ClaimRequest rust = ClaimRequest.newBuilder()
          .setNamespace(ns).setOperationKey("interop:rust").setOwner("rust")
          .setParameters(Parameters.toStruct(Interop.params())).build();
      long token = client.claim(rust).getLease().getFencingToken();
      client.complete(CompleteRequest.newBuilder().setNamespace(ns).setOperationKey("interop:rust").setFencingToken(token)
          .setSuccess(Success.newBuilder().setResult(ByteString.copyFromUtf8("from-rust"))).build());

      assertEquals("java: replayed interop:rust by digest, recorded interop:java", Interop.run(server.address(), ns, java.util.List.of("rust")));

      ClaimResponse mine = client.claim(rust.toBuilder().setOperationKey("interop:java").build());
      assertEquals(ClaimOutcome.CLAIM_OUTCOME_REPLAYED, mine.getOutcome());
      assertEquals("from-java", mine.getOperation().getResult().toStringUtf8());
    }
  }
}
