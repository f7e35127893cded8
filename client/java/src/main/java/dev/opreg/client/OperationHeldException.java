package dev.opreg.client;

import java.time.Duration;
import opreg.v1.Registry.Operation;

/**
 * Claim answered HELD (conformance kind {@code held}): an operator froze the operation. Claim again
 * after {@link #retryAfter()} or ask the operator.
 */
public class OperationHeldException extends OpregException {
  private static final long serialVersionUID = 1L;

  private final transient Duration retryAfter;
  private final transient Operation operation;

  public OperationHeldException(String message, Throwable cause, Duration retryAfter, Operation operation) {
    super(message, cause);
    this.retryAfter = retryAfter;
    this.operation = operation;
  }

  /** When to claim again, as the server said; {@code null} if it did not. */
  public Duration retryAfter() {
    return retryAfter;
  }

  /** The operation. */
  public Operation operation() {
    return operation;
  }
}
