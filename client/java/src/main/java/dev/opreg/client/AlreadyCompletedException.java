package dev.opreg.client;

import com.google.protobuf.Message;
import io.grpc.Status;
import java.util.List;
import java.util.Map;
import java.util.OptionalLong;
import opreg.v1.Errors.ErrorMetadataKey;

/**
 * {@code FAILED_PRECONDITION}/{@code ALREADY_COMPLETED}: this token already reported another
 * outcome.
 */
public class AlreadyCompletedException extends OpregException {
  private static final long serialVersionUID = 1L;

  public AlreadyCompletedException(
      String message,
      Throwable cause,
      Status.Code code,
      String reason,
      Map<String, String> metadata,
      List<Message> details) {
    super(message, cause, code, reason, metadata, details);
  }

  /** The token that reported ({@code fencingToken}). */
  public OptionalLong fencingToken() {
    return longMetadata(ErrorMetadataKey.ERROR_METADATA_KEY_FENCING_TOKEN);
  }
}
