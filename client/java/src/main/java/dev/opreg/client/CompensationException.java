package dev.opreg.client;

import com.google.protobuf.Message;
import io.grpc.Status;
import java.util.List;
import java.util.Map;

/**
 * Base of the refusals of a compensating Claim: {@link OriginalOutcomeUnknownException}, {@link
 * NothingToCompensateException}, {@link AlreadyCompensatedException}.
 */
public class CompensationException extends OpregException {
  private static final long serialVersionUID = 1L;

  public CompensationException(
      String message,
      Throwable cause,
      Status.Code code,
      String reason,
      Map<String, String> metadata,
      List<Message> details) {
    super(message, cause, code, reason, metadata, details);
  }
}
