package dev.opreg.client;

import com.google.protobuf.Message;
import io.grpc.Status;
import java.util.List;
import java.util.Map;

/**
 * {@code FAILED_PRECONDITION}/{@code ORIGINAL_OUTCOME_UNKNOWN}: the original's outcome is unknown;
 * reconcile it first.
 */
public class OriginalOutcomeUnknownException extends CompensationException {
  private static final long serialVersionUID = 1L;

  public OriginalOutcomeUnknownException(
      String message,
      Throwable cause,
      Status.Code code,
      String reason,
      Map<String, String> metadata,
      List<Message> details) {
    super(message, cause, code, reason, metadata, details);
  }
}
