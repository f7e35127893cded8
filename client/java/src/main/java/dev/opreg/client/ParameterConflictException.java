package dev.opreg.client;

import com.google.protobuf.Message;
import io.grpc.Status;
import java.util.List;
import java.util.Map;
import java.util.Arrays;
import java.util.HexFormat;
import opreg.v1.Errors.ErrorMetadataKey;

/**
 * {@code ALREADY_EXISTS}/{@code PARAMETER_CONFLICT}: the key is registered with other parameters
 * (or another {@code compensates}). Never retry it under the same key.
 */
public class ParameterConflictException extends OpregException {
  private static final long serialVersionUID = 1L;

  public ParameterConflictException(
      String message,
      Throwable cause,
      Status.Code code,
      String reason,
      Map<String, String> metadata,
      List<Message> details) {
    super(message, cause, code, reason, metadata, details);
  }

  /** The stored parameters' digest ({@code storedDigest}); empty when the server sent none. */
  public byte[] storedDigest() {
    return hex(metadata(ErrorMetadataKey.ERROR_METADATA_KEY_STORED_DIGEST));
  }

  /** The request's parameters' digest ({@code requestDigest}). */
  public byte[] requestDigest() {
    return hex(metadata(ErrorMetadataKey.ERROR_METADATA_KEY_REQUEST_DIGEST));
  }

  /**
   * The top-level parameter names whose values differ ({@code differingFields}); empty when unknown,
   * e.g. when a digest was sent instead of parameters.
   */
  public List<String> differingFields() {
    String raw = metadata(ErrorMetadataKey.ERROR_METADATA_KEY_DIFFERING_FIELDS);
    return Arrays.stream(raw.split(",")).filter(name -> !name.isEmpty()).toList();
  }

  /** True when the server cut {@link #differingFields()} short ({@code differingFieldsTruncated}). */
  public boolean differingFieldsTruncated() {
    return "true".equals(metadata(ErrorMetadataKey.ERROR_METADATA_KEY_DIFFERING_FIELDS_TRUNCATED));
  }

  /** {@code "compensates"} when the conflict is about that field ({@code conflictingField}). */
  public String conflictingField() {
    return metadata(ErrorMetadataKey.ERROR_METADATA_KEY_CONFLICTING_FIELD);
  }

  private static byte[] hex(String text) {
    try {
      return HexFormat.of().parseHex(text);
    } catch (IllegalArgumentException e) {
      return new byte[0];
    }
  }
}
