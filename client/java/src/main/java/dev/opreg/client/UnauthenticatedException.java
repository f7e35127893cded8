package dev.opreg.client;

import com.google.protobuf.Message;
import io.grpc.Status;
import java.util.List;
import java.util.Map;

/**
 * {@code UNAUTHENTICATED}: the server's policy knows no such credentials. Not retried.
 */
public class UnauthenticatedException extends OpregException {
  private static final long serialVersionUID = 1L;

  public UnauthenticatedException(
      String message,
      Throwable cause,
      Status.Code code,
      String reason,
      Map<String, String> metadata,
      List<Message> details) {
    super(message, cause, code, reason, metadata, details);
  }
}
