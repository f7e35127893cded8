package dev.opreg.client;

import opreg.v1.Registry.Operation;

/**
 * Claim answered RECONCILE and no reconcile callback was given (conformance kind {@code
 * reconcile_required}); the reconcile lease was handed back at once.
 */
public class ReconcileRequiredException extends OpregException {
  private static final long serialVersionUID = 1L;

  private final String remoteRef;
  private final transient Operation operation;

  public ReconcileRequiredException(String message, Throwable cause, String remoteRef, Operation operation) {
    super(message, cause);
    this.remoteRef = remoteRef;
    this.operation = operation;
  }

  /** The remote reference of the unknown attempt. */
  public String remoteRef() {
    return remoteRef;
  }

  /** The operation. */
  public Operation operation() {
    return operation;
  }
}
