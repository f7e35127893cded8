package dev.opreg.client;

import com.google.protobuf.Message;
import io.grpc.Status;
import java.util.List;
import java.util.Map;
import java.util.OptionalLong;
import opreg.v1.Errors.ErrorMetadataKey;

/**
 * {@code RESOURCE_EXHAUSTED}/{@code RATE_LIMITED}: the namespace is past its calls per second.
 * Transient: retry after {@link #retryDelay()}.
 */
public class RateLimitedException extends UnavailableException {
  private static final long serialVersionUID = 1L;

  public RateLimitedException(
      String message,
      Throwable cause,
      Status.Code code,
      String reason,
      Map<String, String> metadata,
      List<Message> details) {
    super(message, cause, code, reason, metadata, details);
  }

  /** The namespace's limit ({@code callsPerSecond}). */
  public OptionalLong callsPerSecond() {
    return longMetadata(ErrorMetadataKey.ERROR_METADATA_KEY_CALLS_PER_SECOND);
  }
}
