package dev.opreg.client;

import com.google.protobuf.Message;
import io.grpc.Status;
import java.util.List;
import java.util.Map;
import java.util.OptionalLong;
import opreg.v1.Errors.ErrorMetadataKey;

/**
 * {@code RESOURCE_EXHAUSTED}/{@code MESSAGE_TOO_LARGE}: the request is larger than the method
 * accepts. Not transient: the same request is refused again.
 */
public class MessageTooLargeException extends OpregException {
  private static final long serialVersionUID = 1L;

  public MessageTooLargeException(
      String message,
      Throwable cause,
      Status.Code code,
      String reason,
      Map<String, String> metadata,
      List<Message> details) {
    super(message, cause, code, reason, metadata, details);
  }

  /** The largest request (bytes) the method accepts, if the server said ({@code limit}). */
  public OptionalLong limit() {
    return longMetadata(ErrorMetadataKey.ERROR_METADATA_KEY_LIMIT);
  }
}
