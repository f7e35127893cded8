package dev.opreg.client;

/**
 * Throw from the work for a terminal business failure (e.g. insufficient balance): recorded with
 * Complete(failure), raised by the helper as {@link BusinessFailureException}, and replayed like a
 * success by later Claims.
 */
public class BusinessException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  private final String code;
  private final String failureMessage;

  public BusinessException(String code, String message) {
    super(message == null || message.isEmpty() ? code : code + ": " + message);
    this.code = code;
    this.failureMessage = message == null ? "" : message;
  }

  public BusinessException(String code) {
    this(code, "");
  }

  /** The failure's code, e.g. {@code insufficient_funds}. */
  public String code() {
    return code;
  }

  /** The failure's message. */
  public String failureMessage() {
    return failureMessage;
  }
}
