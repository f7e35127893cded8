package dev.opreg.client;

import java.time.Duration;

/** Conversions between {@link java.time.Duration} and {@code google.protobuf.Duration}. */
public final class Durations {
  private Durations() {}

  public static com.google.protobuf.Duration toProto(Duration duration) {
    return com.google.protobuf.Duration.newBuilder()
        .setSeconds(duration.getSeconds())
        .setNanos(duration.getNano())
        .build();
  }

  public static Duration fromProto(com.google.protobuf.Duration duration) {
    return Duration.ofSeconds(duration.getSeconds(), duration.getNanos());
  }

  /** A duration as seconds with three decimals, for messages. */
  static String seconds(Duration duration) {
    return String.format(java.util.Locale.ROOT, "%.3fs", duration.toNanos() / 1e9);
  }
}
