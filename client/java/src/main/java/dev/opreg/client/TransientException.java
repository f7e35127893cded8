package dev.opreg.client;

import java.time.Duration;

/**
 * Throw from the work for a failure worth retrying: recorded with Complete(retryable); the run-once
 * helper then claims again (the queue's backoff governs), and raises {@link OperationDeadException}
 * once the retry budget is spent. {@link #retryAfter()} is downstream pushback: the next attempt is
 * due exactly then. {@link #errorClass()} defaults to the class's simple name.
 */
public class TransientException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  private final transient Duration retryAfter;
  private final String errorClass;

  public TransientException(String message) {
    this(message, null, "", null);
  }

  public TransientException(String message, Duration retryAfter) {
    this(message, retryAfter, "", null);
  }

  public TransientException(String message, Duration retryAfter, String errorClass, Throwable cause) {
    super(message, cause);
    this.retryAfter = retryAfter;
    this.errorClass = errorClass == null || errorClass.isEmpty() ? getClass().getSimpleName() : errorClass;
  }

  /** When the next attempt is due, if the downstream said; {@code null} for the queue's backoff. */
  public Duration retryAfter() {
    return retryAfter;
  }

  /** The error class recorded with the retry. */
  public String errorClass() {
    return errorClass;
  }
}
