package dev.opreg.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.ByteString;
import dev.opreg.client.testing.AgainstServer;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import opreg.v1.Admin.HoldOperationRequest;
import opreg.v1.Admin.ListOperationsRequest;
import opreg.v1.Admin.ReleaseOperationRequest;
import opreg.v1.Errors.ErrorReason;
import opreg.v1.Registry.BatchClaimRequest;
import opreg.v1.Registry.BatchClaimResponse;
import opreg.v1.Registry.BatchCompleteRequest;
import opreg.v1.Registry.BatchCompleteResponse;
import opreg.v1.Registry.ClaimDueRequest;
import opreg.v1.Registry.ClaimOutcome;
import opreg.v1.Registry.ClaimRequest;
import opreg.v1.Registry.ClaimResponse;
import opreg.v1.Registry.CompleteRequest;
import opreg.v1.Registry.FencedWriteRequest;
import opreg.v1.Registry.GetResourceRequest;
import opreg.v1.Registry.LookupRequest;
import opreg.v1.Registry.LookupResponse;
import opreg.v1.Registry.OperationStatus;
import opreg.v1.Registry.RenewRequest;
import opreg.v1.Registry.RetryableError;
import opreg.v1.Registry.Success;
import org.junit.jupiter.api.Test;

/** Every RPC, blocking and with a CompletableFuture, and its typed errors, against the real server. */
class ClientTest extends AgainstServer {
  static final Map<String, Object> PARAMS = Map.of("account", "A", "amount", 100);


  ClaimRequest claim(String key, String owner, Map<String, ?> params) {
    return ClaimRequest.newBuilder()
        .setNamespace(ns)
        .setOperationKey(key)
        .setOwner(owner)
        .setParameters(Parameters.toStruct(params))
        .build();
  }

  CompleteRequest success(String key, long token, String result) {
    return CompleteRequest.newBuilder()
        .setNamespace(ns)
        .setOperationKey(key)
        .setFencingToken(token)
        .setSuccess(Success.newBuilder().setResult(ByteString.copyFromUtf8(result)))
        .build();
  }

  @Test
  void claimRenewCompleteLookupBlocking() {
    ClaimResponse claimed = client.claim(claim("k", "w", PARAMS));
    assertSame(ClaimOutcome.CLAIM_OUTCOME_ACQUIRED, claimed.getOutcome());
    long token = claimed.getLease().getFencingToken();
    assertTrue(token > 0);
    assertEquals(token, client.renew(RenewRequest.newBuilder()
        .setNamespace(ns).setOperationKey("k").setOwner("w").setFencingToken(token).build()).getLease().getFencingToken());
    assertSame(OperationStatus.OPERATION_STATUS_SUCCEEDED, client.complete(success("k", token, "done")).getOperation().getStatus());
    LookupResponse found = client.lookup(LookupRequest.newBuilder()
        .setNamespace(ns).setOperationKey("k").setIncludeExecutions(true).setIncludeParameters(true).build());
    assertEquals("done", found.getOperation().getResult().toStringUtf8());
    assertEquals(1, found.getExecutionsCount());
    assertEquals(Map.of("account", "A", "amount", 100.0), Parameters.fromStruct(found.getOperation().getParameters()));
    // The digest computed here is the one the server stored.
    assertEquals(ByteString.copyFrom(ParameterDigest.digest(PARAMS)), found.getOperation().getParametersDigest());
    // The same key by digest: replayed.
    ClaimResponse replay = client.claim(ClaimRequest.newBuilder()
        .setNamespace(ns).setOperationKey("k").setOwner("w2")
        .setParametersDigest(ByteString.copyFrom(ParameterDigest.digest(Map.of("amount", 100.0, "account", "A")))).build());
    assertSame(ClaimOutcome.CLAIM_OUTCOME_REPLAYED, replay.getOutcome());
  }

  @Test
  void claimRenewCompleteLookupWithFutures() throws Exception {
    ClaimResponse claimed = client.claimAsync(claim("k", "w", PARAMS), Duration.ofSeconds(5)).get(10, TimeUnit.SECONDS);
    long token = claimed.getLease().getFencingToken();
    client.renewAsync(RenewRequest.newBuilder()
        .setNamespace(ns).setOperationKey("k").setOwner("w").setFencingToken(token).build()).get(10, TimeUnit.SECONDS);
    client.fencedWriteAsync(FencedWriteRequest.newBuilder()
        .setNamespace(ns).setResource("r").setOperationKey("k").setFencingToken(token)
        .setValue(ByteString.copyFromUtf8("v")).build()).get(10, TimeUnit.SECONDS);
    assertEquals("v", client.getResourceAsync(GetResourceRequest.newBuilder().setNamespace(ns).setResource("r").build())
        .get(10, TimeUnit.SECONDS).getValue().toStringUtf8());
    client.completeAsync(success("k", token, "done")).get(10, TimeUnit.SECONDS);
    assertSame(OperationStatus.OPERATION_STATUS_SUCCEEDED, client.lookupAsync(
        LookupRequest.newBuilder().setNamespace(ns).setOperationKey("k").build()).get(10, TimeUnit.SECONDS).getOperation().getStatus());
    assertEquals(0, client.claimDueAsync(ClaimDueRequest.newBuilder().setNamespace(ns).setOwner("w").build())
        .get(10, TimeUnit.SECONDS).getOperationsCount());
    // A failed call completes the future with the typed error.
    ExecutionException failed = assertThrows(ExecutionException.class, () -> client.lookupAsync(
        LookupRequest.newBuilder().setNamespace(ns).setOperationKey("nothing").build()).get(10, TimeUnit.SECONDS));
    assertInstanceOf(OperationNotFoundException.class, failed.getCause());
    ExecutionException conflict = assertThrows(ExecutionException.class,
        () -> client.claimAsync(claim("k", "w", Map.of("account", "A", "amount", 101))).get(10, TimeUnit.SECONDS));
    assertEquals(List.of("amount"), ((ParameterConflictException) conflict.getCause()).differingFields());
  }

  @Test
  void typedErrorsCarryTheirMetadata() {
    long old = client.claim(claim("k", "w", PARAMS).toBuilder()
        .setLeaseTtl(Durations.toProto(Duration.ofSeconds(1))).build()).getLease().getFencingToken();
    ParameterConflictException conflict = assertThrows(ParameterConflictException.class,
        () -> client.claim(claim("k", "w", Map.of("account", "A", "amount", 101))));
    assertSame(ErrorReason.ERROR_REASON_PARAMETER_CONFLICT, conflict.errorReason());
    assertEquals(List.of("amount"), conflict.differingFields());
    assertEquals(32, conflict.storedDigest().length);
    assertEquals(ByteString.copyFrom(ParameterDigest.digest(Map.of("account", "A", "amount", 101))),
        ByteString.copyFrom(conflict.requestDigest()));

    sleep(Duration.ofMillis(1200));
    long taken = client.claim(claim("k", "w2", PARAMS)).getLease().getFencingToken();
    assertTrue(taken > old);
    StaleFencingTokenException stale = assertThrows(StaleFencingTokenException.class, () -> client.complete(success("k", old, "late")));
    assertEquals(old, stale.presentedToken().orElseThrow());
    assertEquals(taken, stale.currentToken().orElseThrow());

    assertThrows(OperationNotFoundException.class,
        () -> client.lookup(LookupRequest.newBuilder().setNamespace(ns).setOperationKey("nothing").build()));
    assertThrows(ResourceNotFoundException.class,
        () -> client.getResource(GetResourceRequest.newBuilder().setNamespace(ns).setResource("nothing").build()));
    InvalidArgumentException invalid = assertThrows(InvalidArgumentException.class,
        () -> client.claim(ClaimRequest.newBuilder().setNamespace(ns).setOperationKey("k2").build()));
    assertTrue(invalid.fieldViolations().size() > 0, invalid.toString());
  }

  @Test
  void batches() {
    BatchClaimResponse claimed = client.batchClaim(BatchClaimRequest.newBuilder()
        .addClaims(claim("a", "w", PARAMS))
        .addClaims(claim("b", "w", PARAMS))
        .addClaims(claim("a", "w", Map.of("amount", 1)))
        .build());
    assertEquals(3, claimed.getResultsCount());
    List<OpregException> errors = OpregClient.errors(claimed);
    assertNull(errors.get(0));
    assertInstanceOf(ParameterConflictException.class, errors.get(2));
    BatchCompleteResponse completed = client.batchCompleteAsync(BatchCompleteRequest.newBuilder()
        .addCompletions(success("a", claimed.getResults(0).getClaim().getLease().getFencingToken(), "A"))
        .addCompletions(CompleteRequest.newBuilder()
            .setNamespace(ns).setOperationKey("b").setFencingToken(claimed.getResults(1).getClaim().getLease().getFencingToken())
            .setRetryable(RetryableError.newBuilder().setErrorClass("x")))
        .build()).join();
    assertSame(OperationStatus.OPERATION_STATUS_SUCCEEDED, completed.getResults(0).getCompleted().getOperation().getStatus());
    assertSame(OperationStatus.OPERATION_STATUS_RETRY_SCHEDULED, completed.getResults(1).getCompleted().getOperation().getStatus());
  }

  @Test
  void anOperatorsHoldIsOperationHeld() {
    client.claim(claim("k", "w", PARAMS));
    client.holdOperation(HoldOperationRequest.newBuilder()
        .setNamespace(ns).setOperationKey("k").setOperator("ops").setReason("investigating").build());
    assertEquals(1, client.listOperations(ListOperationsRequest.newBuilder().setNamespace(ns).build()).getOperationsCount());
    OperationHeldException held = assertThrows(OperationHeldException.class,
        () -> client.runOnce(ns, "k", PARAMS, lease -> {
          throw new AssertionError("a held operation ran");
        }));
    assertTrue(held.operation().getHeld());
    InvalidTransitionException twice = assertThrows(InvalidTransitionException.class, () -> client.holdOperation(
        HoldOperationRequest.newBuilder().setNamespace(ns).setOperationKey("k").setOperator("ops").setReason("again").build()));
    assertEquals(java.util.Optional.of(true), twice.held());
    client.releaseOperationAsync(ReleaseOperationRequest.newBuilder()
        .setNamespace(ns).setOperationKey("k").setOperator("ops").setReason("done").build()).join();
  }

  @Test
  void anUnreachableServerIsTransient() throws Exception {
    int port;
    try (java.net.ServerSocket socket = new java.net.ServerSocket(0)) {
      port = socket.getLocalPort();
    }
    try (OpregClient nowhere = OpregClient.builder("http://127.0.0.1:" + port).timeout(Duration.ofSeconds(2)).build()) {
      UnavailableException error = assertThrows(UnavailableException.class,
          () -> nowhere.lookup(LookupRequest.newBuilder().setNamespace(ns).setOperationKey("k").build()));
      assertTrue(error.isTransient());
    }
  }

  static void sleep(Duration duration) {
    try {
      Thread.sleep(duration.toMillis());
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new AssertionError(e);
    }
  }
}
