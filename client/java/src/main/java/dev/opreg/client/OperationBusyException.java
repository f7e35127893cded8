package dev.opreg.client;

import com.google.protobuf.Message;
import io.grpc.Status;
import java.util.List;
import java.util.Map;

/**
 * {@code UNAVAILABLE}/{@code OPERATION_BUSY}: the operation's row is locked elsewhere. Transient.
 */
public class OperationBusyException extends UnavailableException {
  private static final long serialVersionUID = 1L;

  public OperationBusyException(
      String message,
      Throwable cause,
      Status.Code code,
      String reason,
      Map<String, String> metadata,
      List<Message> details) {
    super(message, cause, code, reason, metadata, details);
  }
}
