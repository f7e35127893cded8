package dev.opreg.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.Any;
import com.google.rpc.BadRequest;
import com.google.rpc.ErrorInfo;
import com.google.rpc.RetryInfo;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.OptionalLong;
import java.util.Set;
import java.util.function.Function;
import opreg.v1.Errors.ErrorMetadataKey;
import opreg.v1.Errors.ErrorReason;
import opreg.v1.Registry.OperationStatus;
import org.junit.jupiter.api.Test;

/** The error contract: every ErrorReason and ErrorMetadataKey is mapped; statuses decode to typed errors. */
class ErrorsTest {
  static StatusRuntimeException status(Status.Code code, String message, String reason, Map<String, String> metadata, Any... more) {
    com.google.rpc.Status.Builder status = com.google.rpc.Status.newBuilder().setCode(code.value()).setMessage(message);
    if (reason != null) {
      status.addDetails(Any.pack(ErrorInfo.newBuilder().setDomain("opreg").setReason(reason).putAllMetadata(metadata).build()));
    }
    for (Any detail : more) {
      status.addDetails(detail);
    }
    return StatusProto.toStatusRuntimeException(status.build());
  }

  /** The gRPC code each reason travels with (errors.proto). */
  static Status.Code codeOf(ErrorReason reason) {
    return switch (reason) {
      case ERROR_REASON_INVALID_ARGUMENT -> Status.Code.INVALID_ARGUMENT;
      case ERROR_REASON_MESSAGE_TOO_LARGE, ERROR_REASON_RATE_LIMITED, ERROR_REASON_TOO_MANY_WAITERS ->
          Status.Code.RESOURCE_EXHAUSTED;
      case ERROR_REASON_PARAMETER_CONFLICT, ERROR_REASON_OPERATION_EXISTS -> Status.Code.ALREADY_EXISTS;
      case ERROR_REASON_STALE_FENCING_TOKEN -> Status.Code.ABORTED;
      case ERROR_REASON_ALREADY_COMPLETED, ERROR_REASON_LEASE_NOT_HELD, ERROR_REASON_ORIGINAL_OUTCOME_UNKNOWN,
          ERROR_REASON_NOTHING_TO_COMPENSATE, ERROR_REASON_ALREADY_COMPENSATED, ERROR_REASON_INVALID_TRANSITION ->
          Status.Code.FAILED_PRECONDITION;
      case ERROR_REASON_UNAUTHENTICATED -> Status.Code.UNAUTHENTICATED;
      case ERROR_REASON_PERMISSION_DENIED -> Status.Code.PERMISSION_DENIED;
      case ERROR_REASON_OPERATION_NOT_FOUND, ERROR_REASON_RESOURCE_NOT_FOUND -> Status.Code.NOT_FOUND;
      case ERROR_REASON_STORE_UNAVAILABLE, ERROR_REASON_OPERATION_BUSY, ERROR_REASON_OVERLOADED -> Status.Code.UNAVAILABLE;
      case ERROR_REASON_DEADLINE_EXCEEDED -> Status.Code.DEADLINE_EXCEEDED;
      case ERROR_REASON_INTERNAL -> Status.Code.INTERNAL;
      case ERROR_REASON_UNSPECIFIED, UNRECOGNIZED -> Status.Code.UNKNOWN;
    };
  }

  @Test
  void everyReasonIsMappedToItsOwnClass() {
    for (ErrorReason reason : ErrorReason.values()) {
      if (reason == ErrorReason.UNRECOGNIZED || reason == ErrorReason.ERROR_REASON_UNSPECIFIED) {
        assertNull(OpregErrors.classOf(reason));
        continue;
      }
      Class<? extends OpregException> type = OpregErrors.classOf(reason);
      assertNotNull(type, reason + " is not mapped");
      assertTrue(type != OpregException.class, reason + " is mapped to the base class");
      String wire = OpregErrors.reasonName(reason);
      assertEquals(reason.name(), "ERROR_REASON_" + wire);
      assertSame(reason, OpregErrors.parseReason(wire));
      OpregException error = OpregErrors.fromThrowable(status(codeOf(reason), "m", wire, Map.of()));
      assertSame(type, error.getClass(), reason.name());
      assertEquals(wire, error.reason());
      assertSame(reason, error.errorReason());
      assertEquals(codeOf(reason), error.code());
    }
  }

  @Test
  void theTransientErrors() {
    Set<ErrorReason> transientReasons = new HashSet<>();
    for (ErrorReason reason : ErrorReason.values()) {
      if (reason == ErrorReason.UNRECOGNIZED || reason == ErrorReason.ERROR_REASON_UNSPECIFIED) {
        continue;
      }
      if (OpregErrors.fromThrowable(status(codeOf(reason), "m", OpregErrors.reasonName(reason), Map.of())).isTransient()) {
        transientReasons.add(reason);
      }
    }
    assertEquals(Set.of(
        ErrorReason.ERROR_REASON_STORE_UNAVAILABLE,
        ErrorReason.ERROR_REASON_OPERATION_BUSY,
        ErrorReason.ERROR_REASON_OVERLOADED,
        ErrorReason.ERROR_REASON_RATE_LIMITED,
        ErrorReason.ERROR_REASON_DEADLINE_EXCEEDED,
        ErrorReason.ERROR_REASON_TOO_MANY_WAITERS), transientReasons);
    // Without an ErrorInfo: the transport.
    assertTrue(OpregErrors.fromThrowable(Status.UNAVAILABLE.withDescription("connection refused").asRuntimeException()).isTransient());
    assertTrue(OpregErrors.fromThrowable(Status.DEADLINE_EXCEEDED.asRuntimeException()).isTransient());
    OpregException timer = OpregErrors.fromThrowable(Status.CANCELLED.withDescription("Timeout expired").asRuntimeException());
    assertTrue(timer.isTransient());
    assertEquals(Status.Code.CANCELLED, timer.code());
    assertFalse(OpregErrors.fromThrowable(Status.CANCELLED.withDescription("cancelled by the caller").asRuntimeException()).isTransient());
    assertFalse(OpregErrors.fromThrowable(Status.RESOURCE_EXHAUSTED.asRuntimeException()).isTransient());
    assertFalse(OpregErrors.fromThrowable(Status.FAILED_PRECONDITION.asRuntimeException()).isTransient());
    assertInstanceOf(MessageTooLargeException.class,
        OpregErrors.fromThrowable(status(Status.Code.RESOURCE_EXHAUSTED, "big", "MESSAGE_TOO_LARGE", Map.of("limit", "4194304"))));
  }

  @Test
  void metadataKeysTravelInLowerCamelCase() {
    assertEquals("storedDigest", OpregErrors.metadataKey(ErrorMetadataKey.ERROR_METADATA_KEY_STORED_DIGEST));
    assertEquals("differingFieldsTruncated", OpregErrors.metadataKey(ErrorMetadataKey.ERROR_METADATA_KEY_DIFFERING_FIELDS_TRUNCATED));
    assertEquals("limit", OpregErrors.metadataKey(ErrorMetadataKey.ERROR_METADATA_KEY_LIMIT));
    for (ErrorMetadataKey key : ErrorMetadataKey.values()) {
      if (key == ErrorMetadataKey.UNRECOGNIZED || key == ErrorMetadataKey.ERROR_METADATA_KEY_UNSPECIFIED) {
        continue;
      }
      assertTrue(OpregErrors.metadataKey(key).matches("[a-z]+([A-Z][a-z]*)*"), key.name());
    }
  }

  /** A sample value of a key, and the accessor of {@code reader} that must read it back. */
  record Reading(Class<? extends OpregException> reader, String value, Function<OpregException, Object> read, Object expected) {}

  /** The readings of each key, one per error class that reads it (exhaustive, like the client's). */
  static List<Reading> readings(ErrorMetadataKey key) {
    return switch (key) {
      case ERROR_METADATA_KEY_LIMIT -> List.of(
          new Reading(MessageTooLargeException.class, "4194304", e -> ((MessageTooLargeException) e).limit(), OptionalLong.of(4194304)),
          new Reading(TooManyWaitersException.class, "10000", e -> ((TooManyWaitersException) e).limit(), OptionalLong.of(10000)));
      case ERROR_METADATA_KEY_STORED_DIGEST -> List.of(new Reading(
          ParameterConflictException.class, "0a0b", e -> List.of(((ParameterConflictException) e).storedDigest()[1]), List.of((byte) 11)));
      case ERROR_METADATA_KEY_REQUEST_DIGEST -> List.of(new Reading(
          ParameterConflictException.class, "0c", e -> List.of(((ParameterConflictException) e).requestDigest()[0]), List.of((byte) 12)));
      case ERROR_METADATA_KEY_DIFFERING_FIELDS -> List.of(new Reading(
          ParameterConflictException.class, "amount,account", e -> ((ParameterConflictException) e).differingFields(), List.of("amount", "account")));
      case ERROR_METADATA_KEY_DIFFERING_FIELDS_TRUNCATED -> List.of(new Reading(
          ParameterConflictException.class, "true", e -> ((ParameterConflictException) e).differingFieldsTruncated(), true));
      case ERROR_METADATA_KEY_CONFLICTING_FIELD -> List.of(new Reading(
          ParameterConflictException.class, "compensates", e -> ((ParameterConflictException) e).conflictingField(), "compensates"));
      case ERROR_METADATA_KEY_PRESENTED_TOKEN -> List.of(new Reading(
          StaleFencingTokenException.class, "3", e -> ((StaleFencingTokenException) e).presentedToken(), OptionalLong.of(3)));
      case ERROR_METADATA_KEY_CURRENT_TOKEN -> List.of(new Reading(
          StaleFencingTokenException.class, "4", e -> ((StaleFencingTokenException) e).currentToken(), OptionalLong.of(4)));
      case ERROR_METADATA_KEY_FENCING_TOKEN -> List.of(new Reading(
          AlreadyCompletedException.class, "5", e -> ((AlreadyCompletedException) e).fencingToken(), OptionalLong.of(5)));
      case ERROR_METADATA_KEY_COMPENSATED_BY -> List.of(new Reading(
          AlreadyCompensatedException.class, "refund:1", e -> ((AlreadyCompensatedException) e).compensatedBy(), "refund:1"));
      case ERROR_METADATA_KEY_CURRENT_STATUS -> List.of(
          new Reading(InvalidTransitionException.class, "SUCCEEDED",
              e -> ((InvalidTransitionException) e).currentStatus().orElseThrow(), OperationStatus.OPERATION_STATUS_SUCCEEDED),
          new Reading(OperationExistsException.class, "IN_PROGRESS",
              e -> ((OperationExistsException) e).currentStatus().orElseThrow(), OperationStatus.OPERATION_STATUS_IN_PROGRESS));
      case ERROR_METADATA_KEY_HELD -> List.of(new Reading(
          InvalidTransitionException.class, "false", e -> ((InvalidTransitionException) e).held().orElseThrow(), false));
      case ERROR_METADATA_KEY_PRINCIPAL -> List.of(new Reading(
          PermissionDeniedException.class, "py-reader", e -> ((PermissionDeniedException) e).principal(), "py-reader"));
      case ERROR_METADATA_KEY_NAMESPACE -> List.of(new Reading(
          PermissionDeniedException.class, "billing", e -> ((PermissionDeniedException) e).namespace(), "billing"));
      case ERROR_METADATA_KEY_ROLE -> List.of(new Reading(
          PermissionDeniedException.class, "worker", e -> ((PermissionDeniedException) e).role(), "worker"));
      case ERROR_METADATA_KEY_CALLS_PER_SECOND -> List.of(new Reading(
          RateLimitedException.class, "50", e -> ((RateLimitedException) e).callsPerSecond(), OptionalLong.of(50)));
      case ERROR_METADATA_KEY_UNSPECIFIED, UNRECOGNIZED -> List.of();
    };
  }

  @Test
  void everyMetadataKeyIsReadByItsErrorsAccessors() {
    for (ErrorMetadataKey key : ErrorMetadataKey.values()) {
      List<Reading> readings = readings(key);
      assertEquals(OpregErrors.readersOf(key), readings.stream().map(Reading::reader).toList(), key.name());
      if (key != ErrorMetadataKey.UNRECOGNIZED && key != ErrorMetadataKey.ERROR_METADATA_KEY_UNSPECIFIED) {
        assertFalse(readings.isEmpty(), key + " has no reader");
      }
      for (Reading reading : readings) {
        ErrorReason reason = reasonOf(reading.reader());
        OpregException error = OpregErrors.fromThrowable(status(
            codeOf(reason), "m", OpregErrors.reasonName(reason), Map.of(OpregErrors.metadataKey(key), reading.value())));
        assertSame(reading.reader(), error.getClass());
        assertEquals(reading.value(), error.metadata(key));
        assertEquals(reading.expected(), reading.read().apply(error), key.name() + " by " + reading.reader().getSimpleName());
      }
    }
  }

  private static ErrorReason reasonOf(Class<? extends OpregException> type) {
    for (ErrorReason reason : ErrorReason.values()) {
      if (reason != ErrorReason.UNRECOGNIZED && OpregErrors.classOf(reason) == type) {
        return reason;
      }
    }
    throw new AssertionError("no reason for " + type);
  }

  @Test
  void detailsAreDecoded() {
    OpregException busy = OpregErrors.fromThrowable(status(Status.Code.UNAVAILABLE, "locked", "OPERATION_BUSY", Map.of(),
        Any.pack(RetryInfo.newBuilder().setRetryDelay(com.google.protobuf.Duration.newBuilder().setNanos(200_000_000)).build())));
    assertInstanceOf(OperationBusyException.class, busy);
    assertEquals(Duration.ofMillis(200), busy.retryDelay().orElseThrow());

    InvalidArgumentException invalid = (InvalidArgumentException) OpregErrors.fromThrowable(status(
        Status.Code.INVALID_ARGUMENT, "bad", "INVALID_ARGUMENT", Map.of(),
        Any.pack(BadRequest.newBuilder().addFieldViolations(
            BadRequest.FieldViolation.newBuilder().setField("owner").setDescription("required")).build())));
    assertEquals("owner", invalid.fieldViolations().get(0).getField());

    // Another domain's ErrorInfo is not ours: decided by the code.
    StatusRuntimeException foreign = StatusProto.toStatusRuntimeException(com.google.rpc.Status.newBuilder()
        .setCode(Status.Code.NOT_FOUND.value())
        .addDetails(Any.pack(ErrorInfo.newBuilder().setDomain("elsewhere").setReason("PARAMETER_CONFLICT").build()))
        .build());
    OpregException notFound = OpregErrors.fromThrowable(foreign);
    assertSame(NotFoundException.class, notFound.getClass());
    assertEquals("", notFound.reason());

    // An unknown reason: by the code, the reason kept.
    OpregException unknown = OpregErrors.fromThrowable(status(Status.Code.UNAVAILABLE, "m", "SOMETHING_NEW", Map.of()));
    assertSame(UnavailableException.class, unknown.getClass());
    assertEquals("SOMETHING_NEW", unknown.reason());
    assertSame(ErrorReason.ERROR_REASON_UNSPECIFIED, unknown.errorReason());

    // A batch entry's google.rpc.Status.
    OpregException conflict = OpregErrors.fromStatus(StatusProto.fromThrowable(
        status(Status.Code.ALREADY_EXISTS, "conflict", "PARAMETER_CONFLICT", Map.of("storedDigest", "ff"))));
    assertInstanceOf(ParameterConflictException.class, conflict);
    assertArrayEquals(new byte[] {(byte) 0xff}, ((ParameterConflictException) conflict).storedDigest());
  }
}
