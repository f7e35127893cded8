package dev.opreg.client;

import com.google.protobuf.Message;
import io.grpc.Status;
import java.util.List;
import java.util.Map;
import java.util.OptionalLong;
import opreg.v1.Errors.ErrorMetadataKey;

/**
 * {@code ABORTED}/{@code STALE_FENCING_TOKEN}: another execution holds a newer token (or the
 * resource's fence is higher). Stop writing: the lease is not ours.
 */
public class StaleFencingTokenException extends OpregException {
  private static final long serialVersionUID = 1L;

  public StaleFencingTokenException(
      String message,
      Throwable cause,
      Status.Code code,
      String reason,
      Map<String, String> metadata,
      List<Message> details) {
    super(message, cause, code, reason, metadata, details);
  }

  /** The token the caller presented ({@code presentedToken}). */
  public OptionalLong presentedToken() {
    return longMetadata(ErrorMetadataKey.ERROR_METADATA_KEY_PRESENTED_TOKEN);
  }

  /** The operation's current token ({@code currentToken}). */
  public OptionalLong currentToken() {
    return longMetadata(ErrorMetadataKey.ERROR_METADATA_KEY_CURRENT_TOKEN);
  }
}
