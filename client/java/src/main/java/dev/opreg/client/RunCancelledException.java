package dev.opreg.client;

/**
 * The run-once helper was cancelled (its thread interrupted, or its future cancelled): renewals
 * stopped, nothing was reported, and the lease lapses at its TTL.
 */
public class RunCancelledException extends OpregException {
  private static final long serialVersionUID = 1L;

  public RunCancelledException(String message, Throwable cause) {
    super(message, cause);
  }
}
