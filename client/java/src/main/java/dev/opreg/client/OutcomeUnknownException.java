package dev.opreg.client;

import opreg.v1.Registry.Operation;

/**
 * The work reported that its request was sent but not confirmed, that unknown outcome is recorded,
 * and no reconcile callback was given to find out what happened (conformance kind {@code
 * outcome_unknown}). A later run with a reconcile callback (or an operator) settles it.
 */
public class OutcomeUnknownException extends OpregException {
  private static final long serialVersionUID = 1L;

  private final String remoteRef;
  private final long fencingToken;
  private final transient Operation operation;

  public OutcomeUnknownException(String message, Throwable cause, String remoteRef, long fencingToken, Operation operation) {
    super(message, cause);
    this.remoteRef = remoteRef;
    this.fencingToken = fencingToken;
    this.operation = operation;
  }

  /** The remote reference the work reported. */
  public String remoteRef() {
    return remoteRef;
  }

  /** The execution's token. */
  public long fencingToken() {
    return fencingToken;
  }

  /** The operation as recorded. */
  public Operation operation() {
    return operation;
  }
}
