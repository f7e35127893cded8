package dev.opreg.client;

import com.google.protobuf.Message;
import io.grpc.Status;
import java.util.List;
import java.util.Map;

/**
 * {@code INTERNAL}: a fault of the server; nothing about it is sent.
 */
public class InternalException extends OpregException {
  private static final long serialVersionUID = 1L;

  public InternalException(
      String message,
      Throwable cause,
      Status.Code code,
      String reason,
      Map<String, String> metadata,
      List<Message> details) {
    super(message, cause, code, reason, metadata, details);
  }
}
