package dev.opreg.client;

import com.google.protobuf.Message;
import io.grpc.Status;
import java.util.List;
import java.util.Map;
import java.util.OptionalLong;
import opreg.v1.Errors.ErrorMetadataKey;

/**
 * {@code RESOURCE_EXHAUSTED}/{@code TOO_MANY_WAITERS}: the replica holds as many waiting calls as
 * it allows. Transient: retry after {@link #retryDelay()} (or ask again without a wait).
 */
public class TooManyWaitersException extends UnavailableException {
  private static final long serialVersionUID = 1L;

  public TooManyWaitersException(
      String message,
      Throwable cause,
      Status.Code code,
      String reason,
      Map<String, String> metadata,
      List<Message> details) {
    super(message, cause, code, reason, metadata, details);
  }

  /** The replica's limit of waiting calls ({@code limit}), if the server said. */
  public OptionalLong limit() {
    return longMetadata(ErrorMetadataKey.ERROR_METADATA_KEY_LIMIT);
  }
}
