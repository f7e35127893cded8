package dev.opreg.client;

import com.google.protobuf.Message;
import io.grpc.Status;
import java.util.List;
import java.util.Map;
import opreg.v1.Errors.ErrorMetadataKey;

/**
 * {@code FAILED_PRECONDITION}/{@code ALREADY_COMPENSATED}: another operation compensates the original.
 */
public class AlreadyCompensatedException extends CompensationException {
  private static final long serialVersionUID = 1L;

  public AlreadyCompensatedException(
      String message,
      Throwable cause,
      Status.Code code,
      String reason,
      Map<String, String> metadata,
      List<Message> details) {
    super(message, cause, code, reason, metadata, details);
  }

  /** The key of the compensating operation ({@code compensatedBy}). */
  public String compensatedBy() {
    return metadata(ErrorMetadataKey.ERROR_METADATA_KEY_COMPENSATED_BY);
  }
}
