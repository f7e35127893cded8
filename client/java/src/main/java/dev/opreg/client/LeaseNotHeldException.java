package dev.opreg.client;

import com.google.protobuf.Message;
import io.grpc.Status;
import java.util.List;
import java.util.Map;

/**
 * {@code FAILED_PRECONDITION}/{@code LEASE_NOT_HELD}: the caller's lease is not the operation's
 * current one.
 */
public class LeaseNotHeldException extends OpregException {
  private static final long serialVersionUID = 1L;

  public LeaseNotHeldException(
      String message,
      Throwable cause,
      Status.Code code,
      String reason,
      Map<String, String> metadata,
      List<Message> details) {
    super(message, cause, code, reason, metadata, details);
  }
}
