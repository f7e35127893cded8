package dev.opreg.client;

import opreg.v1.Registry.ClaimOutcome;
import opreg.v1.Registry.Operation;

/**
 * The run-once helper's overall deadline passed (conformance kind {@code deadline_exceeded}): while
 * another execution held the operation, a retry was not yet due, or the registry was unreachable.
 * The cause is the last transport or work error.
 */
public class DeadlineExceededException extends OpregException {
  private static final long serialVersionUID = 1L;

  private final transient ClaimOutcome lastOutcome;
  private final transient Operation operation;

  public DeadlineExceededException(String message, Throwable cause, ClaimOutcome lastOutcome, Operation operation) {
    super(message, cause);
    this.lastOutcome = lastOutcome;
    this.operation = operation;
  }

  /** The last Claim outcome seen; {@code null} if no Claim answered. */
  public ClaimOutcome lastOutcome() {
    return lastOutcome;
  }

  /** The operation as the last Claim saw it; {@code null} if none. */
  public Operation operation() {
    return operation;
  }
}
