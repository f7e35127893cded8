package dev.opreg.client;

import com.google.protobuf.Message;
import io.grpc.Status;
import java.util.List;
import java.util.Map;
import com.google.rpc.BadRequest;
import java.util.ArrayList;

/**
 * {@code INVALID_ARGUMENT}: the request is malformed; {@link #fieldViolations()} come from the
 * {@code google.rpc.BadRequest} the server sent. Never retried.
 */
public class InvalidArgumentException extends OpregException {
  private static final long serialVersionUID = 1L;

  public InvalidArgumentException(
      String message,
      Throwable cause,
      Status.Code code,
      String reason,
      Map<String, String> metadata,
      List<Message> details) {
    super(message, cause, code, reason, metadata, details);
  }

  /** The fields the server named, with what is wrong with each. */
  public List<BadRequest.FieldViolation> fieldViolations() {
    List<BadRequest.FieldViolation> violations = new ArrayList<>();
    for (Message detail : details()) {
      if (detail instanceof BadRequest request) {
        violations.addAll(request.getFieldViolationsList());
      }
    }
    return violations;
  }
}
