package dev.opreg.client;

/**
 * Throw from the work when its request may have taken effect (e.g. a timeout after it was sent):
 * recorded with Complete(unknown, {@link #remoteRef()}), and reconciled before anything re-executes.
 * With a reconcile callback the helper claims again and reconciles at once; without one it raises
 * {@link OutcomeUnknownException}.
 */
public class SentButUnconfirmedException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  private final String remoteRef;
  private final String detail;

  public SentButUnconfirmedException(String remoteRef, String message) {
    super(message == null || message.isEmpty() ? "sent but unconfirmed (remote_ref=" + remoteRef + ")" : message);
    this.remoteRef = remoteRef == null ? "" : remoteRef;
    this.detail = message == null ? "" : message;
  }

  public SentButUnconfirmedException(String remoteRef) {
    this(remoteRef, "");
  }

  /** The remote system's reference for the request, for the reconcile callback. */
  public String remoteRef() {
    return remoteRef;
  }

  /** The message recorded with the unknown outcome. */
  public String detail() {
    return detail;
  }
}
