package dev.opreg.client;

/**
 * The lease was lost (conformance kind {@code lease_lost}): another execution took over, a renewal was
 * refused, no renewal succeeded before the lease's local expiry, or Complete answered {@code
 * STALE_FENCING_TOKEN}/{@code LEASE_NOT_HELD}. Nothing was, or may be, reported under it.
 */
public class LeaseLostException extends OpregException {
  private static final long serialVersionUID = 1L;

  private final long fencingToken;

  public LeaseLostException(String message, Throwable cause, long fencingToken) {
    super(message, cause);
    this.fencingToken = fencingToken;
  }

  /** The token of the lost lease. */
  public long fencingToken() {
    return fencingToken;
  }
}
