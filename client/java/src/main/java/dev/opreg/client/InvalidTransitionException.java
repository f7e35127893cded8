package dev.opreg.client;

import com.google.protobuf.Message;
import io.grpc.Status;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import opreg.v1.Errors.ErrorMetadataKey;
import opreg.v1.Registry.OperationStatus;

/**
 * {@code FAILED_PRECONDITION}/{@code INVALID_TRANSITION}: an OperationAdmin action the operation's
 * status does not allow.
 */
public class InvalidTransitionException extends OpregException {
  private static final long serialVersionUID = 1L;

  public InvalidTransitionException(
      String message,
      Throwable cause,
      Status.Code code,
      String reason,
      Map<String, String> metadata,
      List<Message> details) {
    super(message, cause, code, reason, metadata, details);
  }

  /** The operation's status when the action was refused ({@code currentStatus}), if known. */
  public Optional<OperationStatus> currentStatus() {
    return statusMetadata(ErrorMetadataKey.ERROR_METADATA_KEY_CURRENT_STATUS);
  }

  /** Whether an operator holds the operation ({@code held}), if the server said. */
  public Optional<Boolean> held() {
    String held = metadata(ErrorMetadataKey.ERROR_METADATA_KEY_HELD);
    return switch (held) {
      case "true" -> Optional.of(true);
      case "false" -> Optional.of(false);
      default -> Optional.empty();
    };
  }
}
