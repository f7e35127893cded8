package dev.opreg.client;

import opreg.v1.Registry.CompleteRequest;

/**
 * The work finished but its outcome could not be recorded (conformance kind {@code
 * outcome_not_recorded}): Complete kept failing, and a Lookup did not show exactly the reported
 * outcome for the execution's token. The lease lapses and the operation is claimed again.
 */
public class OutcomeNotRecordedException extends OpregException {
  private static final long serialVersionUID = 1L;

  private final long fencingToken;
  private final transient CompleteRequest report;

  public OutcomeNotRecordedException(String message, Throwable cause, long fencingToken, CompleteRequest report) {
    super(message, cause);
    this.fencingToken = fencingToken;
    this.report = report;
  }

  /** The execution's token. */
  public long fencingToken() {
    return fencingToken;
  }

  /** The report that was not recorded (its outcome). */
  public CompleteRequest report() {
    return report;
  }
}
