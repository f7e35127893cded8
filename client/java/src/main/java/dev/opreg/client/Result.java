package dev.opreg.client;

import java.nio.charset.StandardCharsets;
import opreg.v1.Registry.Operation;

/**
 * A recorded success. {@link #replayed()} is true when an earlier execution recorded it (Claim
 * answered REPLAYED) and the work did not run.
 */
public record Result(byte[] value, String resultRef, boolean replayed, Operation operation) {
  public Result {
    value = value.clone();
  }

  /** The result as UTF-8 text. */
  public String text() {
    return new String(value, StandardCharsets.UTF_8);
  }

  @Override
  public byte[] value() {
    return value.clone();
  }

  @Override
  public String toString() {
    return "Result[text=" + text() + ", resultRef=" + resultRef + ", replayed=" + replayed + "]";
  }
}
