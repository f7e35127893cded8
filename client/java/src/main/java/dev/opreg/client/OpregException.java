package dev.opreg.client;

import com.google.protobuf.Message;
import com.google.rpc.RetryInfo;
import io.grpc.Status;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.OptionalLong;
import opreg.v1.Errors.ErrorMetadataKey;
import opreg.v1.Errors.ErrorReason;
import opreg.v1.Registry.OperationStatus;

/**
 * Base of every error this client throws for a failed opreg call, and of the run-once helper's own
 * errors.
 *
 * <p>A failed call carries one {@code google.rpc.ErrorInfo} with domain {@code "opreg"}; {@link
 * OpregErrors#fromThrowable} picks the subclass by its reason (an {@link ErrorReason}), or by the
 * gRPC status code when there is none (a transport failure). {@link #code()} is the gRPC status code
 * ({@code null} for errors raised by the client itself), {@link #reason()} the ErrorInfo reason as it
 * travelled ({@code ""} when the status carried none), {@link #metadata()} the ErrorInfo metadata.
 *
 * <p>{@link UnavailableException} and its subclasses are the transient errors ({@link
 * #isTransient()}): the helpers retry them, never sooner than {@link #retryDelay()}; nothing else is
 * retried.
 */
public class OpregException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  private final transient Status.Code code;
  private final String reason;
  private final Map<String, String> metadata;
  private final transient List<Message> details;

  /** An error raised by the client itself (no gRPC status). */
  public OpregException(String message) {
    this(message, null);
  }

  public OpregException(String message, Throwable cause) {
    this(message, cause, null, "", Map.of(), List.of());
  }

  /** An error decoded from a failed call. */
  public OpregException(
      String message,
      Throwable cause,
      Status.Code code,
      String reason,
      Map<String, String> metadata,
      List<Message> details) {
    super(message, cause);
    this.code = code;
    this.reason = reason == null ? "" : reason;
    this.metadata = Map.copyOf(metadata);
    this.details = List.copyOf(details);
  }

  /** The gRPC status code; {@code null} for an error the client raised itself. */
  public Status.Code code() {
    return code;
  }

  /** The ErrorInfo reason as it travelled (e.g. {@code "PARAMETER_CONFLICT"}); {@code ""} if none. */
  public String reason() {
    return reason;
  }

  /**
   * The {@link ErrorReason} the reason names; {@code ERROR_REASON_UNSPECIFIED} when the status carried
   * none, or one this client does not know.
   */
  public ErrorReason errorReason() {
    return OpregErrors.parseReason(reason);
  }

  /** The ErrorInfo metadata. */
  public Map<String, String> metadata() {
    return metadata;
  }

  /** The value of one ErrorInfo metadata key ({@code ""} when absent). */
  public String metadata(ErrorMetadataKey key) {
    return metadata.getOrDefault(OpregErrors.metadataKey(key), "");
  }

  /** The status details this client decoded: ErrorInfo, RetryInfo, BadRequest. */
  public List<Message> details() {
    return details;
  }

  /** True for the errors the helpers retry: {@link UnavailableException} and its subclasses. */
  public boolean isTransient() {
    return this instanceof UnavailableException;
  }

  /** How long the server asked the caller to wait before retrying (its RetryInfo), if it said. */
  public Optional<Duration> retryDelay() {
    for (Message detail : details) {
      if (detail instanceof RetryInfo info && info.hasRetryDelay()) {
        Duration delay = Durations.fromProto(info.getRetryDelay());
        return Optional.of(delay.isNegative() ? Duration.ZERO : delay);
      }
    }
    return Optional.empty();
  }

  OptionalLong longMetadata(ErrorMetadataKey key) {
    String value = metadata(key);
    try {
      return value.isEmpty() ? OptionalLong.empty() : OptionalLong.of(Long.parseUnsignedLong(value));
    } catch (NumberFormatException e) {
      return OptionalLong.empty();
    }
  }

  /** The operation status a metadata value names, with or without {@code OPERATION_STATUS_}. */
  Optional<OperationStatus> statusMetadata(ErrorMetadataKey key) {
    String name = metadata(key);
    for (OperationStatus status : OperationStatus.values()) {
      if (status != OperationStatus.UNRECOGNIZED
          && (status.name().equals(name) || status.name().equals("OPERATION_STATUS_" + name))) {
        return Optional.of(status);
      }
    }
    return Optional.empty();
  }

  @Override
  public String toString() {
    String label = !reason.isEmpty() ? reason : code != null ? code.name() : "";
    String name = getClass().getSimpleName();
    return label.isEmpty() ? name + ": " + getMessage() : name + ": " + label + ": " + getMessage();
  }
}
