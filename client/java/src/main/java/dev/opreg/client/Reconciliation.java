package dev.opreg.client;

import java.util.Objects;

/**
 * What a reconcile callback found out about an attempt whose outcome is unknown: {@link
 * #succeeded}, {@link #failed} or {@link #notApplied} (then the work runs under the same lease).
 */
public final class Reconciliation {
  /** The three verdicts. */
  public enum Kind {
    SUCCEEDED,
    FAILED,
    NOT_APPLIED
  }

  private final Kind kind;
  private final byte[] result;
  private final String resultRef;
  private final String code;
  private final String message;

  private Reconciliation(Kind kind, byte[] result, String resultRef, String code, String message) {
    this.kind = kind;
    this.result = result;
    this.resultRef = resultRef;
    this.code = code;
    this.message = message;
  }

  /** The attempt took effect; record this result. */
  public static Reconciliation succeeded(byte[] result, String resultRef) {
    return new Reconciliation(Kind.SUCCEEDED, result.clone(), Objects.requireNonNullElse(resultRef, ""), "", "");
  }

  public static Reconciliation succeeded(byte[] result) {
    return succeeded(result, "");
  }

  /** The attempt ended in a terminal business failure; record it. */
  public static Reconciliation failed(String code, String message) {
    return new Reconciliation(Kind.FAILED, new byte[0], "", code, Objects.requireNonNullElse(message, ""));
  }

  public static Reconciliation failed(String code) {
    return failed(code, "");
  }

  /** The attempt did not take effect: run the work under the same lease. */
  public static Reconciliation notApplied() {
    return new Reconciliation(Kind.NOT_APPLIED, new byte[0], "", "", "");
  }

  public Kind kind() {
    return kind;
  }

  public byte[] result() {
    return result.clone();
  }

  public String resultRef() {
    return resultRef;
  }

  public String code() {
    return code;
  }

  public String message() {
    return message;
  }

  @Override
  public String toString() {
    return "Reconciliation." + kind;
  }
}
