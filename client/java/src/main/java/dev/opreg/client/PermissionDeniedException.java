package dev.opreg.client;

import com.google.protobuf.Message;
import io.grpc.Status;
import java.util.List;
import java.util.Map;
import opreg.v1.Errors.ErrorMetadataKey;

/**
 * {@code PERMISSION_DENIED}: the principal lacks {@link #role()} in {@link #namespace()}. Not retried.
 */
public class PermissionDeniedException extends OpregException {
  private static final long serialVersionUID = 1L;

  public PermissionDeniedException(
      String message,
      Throwable cause,
      Status.Code code,
      String reason,
      Map<String, String> metadata,
      List<Message> details) {
    super(message, cause, code, reason, metadata, details);
  }

  /** Who asked ({@code principal}). */
  public String principal() {
    return metadata(ErrorMetadataKey.ERROR_METADATA_KEY_PRINCIPAL);
  }

  /** Where ({@code namespace}). */
  public String namespace() {
    return metadata(ErrorMetadataKey.ERROR_METADATA_KEY_NAMESPACE);
  }

  /** The role that was needed ({@code role}): reader, worker or admin. */
  public String role() {
    return metadata(ErrorMetadataKey.ERROR_METADATA_KEY_ROLE);
  }
}
