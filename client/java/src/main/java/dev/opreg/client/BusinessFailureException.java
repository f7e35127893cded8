package dev.opreg.client;

import opreg.v1.Registry.Operation;

/**
 * A recorded business failure (conformance kind {@code business_failure}): the one the work just
 * reported ({@link #replayed()} false) or one recorded by an earlier execution ({@link #replayed()}
 * true). Replayed like a success: never retried.
 */
public class BusinessFailureException extends OpregException {
  private static final long serialVersionUID = 1L;

  private final String failureCode;
  private final String failureMessage;
  private final boolean replayed;
  private final transient Operation operation;

  public BusinessFailureException(String message, Throwable cause, String failureCode, String failureMessage, boolean replayed, Operation operation) {
    super(message, cause);
    this.failureCode = failureCode;
    this.failureMessage = failureMessage;
    this.replayed = replayed;
    this.operation = operation;
  }

  /** The failure's code, e.g. {@code insufficient_funds}. */
  public String failureCode() {
    return failureCode;
  }

  /** The failure's message. */
  public String failureMessage() {
    return failureMessage;
  }

  /** True when recorded by an earlier execution (Claim answered REPLAYED). */
  public boolean replayed() {
    return replayed;
  }

  /** The operation as recorded. */
  public Operation operation() {
    return operation;
  }
}
