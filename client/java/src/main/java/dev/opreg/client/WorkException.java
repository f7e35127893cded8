package dev.opreg.client;

/**
 * The work (or the reconcile callback) threw an exception of no opreg kind (conformance kind {@code
 * work_error}); the attempt was recorded retryable (unknown for a reconcile callback), and the
 * work's exception is the {@link #getCause() cause}.
 */
public class WorkException extends OpregException {
  private static final long serialVersionUID = 1L;

  public WorkException(String message, Throwable cause) {
    super(message, cause);
  }
}
