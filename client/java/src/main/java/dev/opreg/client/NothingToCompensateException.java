package dev.opreg.client;

import com.google.protobuf.Message;
import io.grpc.Status;
import java.util.List;
import java.util.Map;

/**
 * {@code FAILED_PRECONDITION}/{@code NOTHING_TO_COMPENSATE}: the original did not succeed.
 */
public class NothingToCompensateException extends CompensationException {
  private static final long serialVersionUID = 1L;

  public NothingToCompensateException(
      String message,
      Throwable cause,
      Status.Code code,
      String reason,
      Map<String, String> metadata,
      List<Message> details) {
    super(message, cause, code, reason, metadata, details);
  }
}
