package dev.opreg.client;

import opreg.v1.Registry.Operation;

/**
 * The operation's retry budget or deadline is spent (conformance kind {@code dead}): an operator
 * decides (OperationAdmin).
 */
public class OperationDeadException extends OpregException {
  private static final long serialVersionUID = 1L;

  private final transient Operation operation;

  public OperationDeadException(String message, Throwable cause, Operation operation) {
    super(message, cause);
    this.operation = operation;
  }

  /** The operation. */
  public Operation operation() {
    return operation;
  }
}
