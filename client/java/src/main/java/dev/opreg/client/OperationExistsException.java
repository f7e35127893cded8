package dev.opreg.client;

import com.google.protobuf.Message;
import io.grpc.Status;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import opreg.v1.Errors.ErrorMetadataKey;
import opreg.v1.Registry.OperationStatus;

/**
 * {@code ALREADY_EXISTS}/{@code OPERATION_EXISTS}: a Claim with {@code REUSE_POLICY_REJECT_EXISTING}
 * found the key registered. Not transient: only the call that registered the key proceeds.
 */
public class OperationExistsException extends OpregException {
  private static final long serialVersionUID = 1L;

  public OperationExistsException(
      String message,
      Throwable cause,
      Status.Code code,
      String reason,
      Map<String, String> metadata,
      List<Message> details) {
    super(message, cause, code, reason, metadata, details);
  }

  /** The status of the registered operation ({@code currentStatus}), if known. */
  public Optional<OperationStatus> currentStatus() {
    return statusMetadata(ErrorMetadataKey.ERROR_METADATA_KEY_CURRENT_STATUS);
  }
}
