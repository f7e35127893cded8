package dev.opreg.client;

import com.google.protobuf.Message;
import io.grpc.Status;
import java.util.List;
import java.util.Map;

/**
 * The transient errors, the only ones the helpers retry: {@code UNAVAILABLE} (the transport, or
 * reasons {@code STORE_UNAVAILABLE}, {@code OPERATION_BUSY}, {@code OVERLOADED}), {@code
 * DEADLINE_EXCEEDED} (the call's timeout, or reason {@code DEADLINE_EXCEEDED}), the {@code CANCELLED}
 * "Timeout expired" a server's own timer answers ({@link #code()} stays {@code CANCELLED}), and
 * {@code RESOURCE_EXHAUSTED} with {@code RATE_LIMITED} ({@link RateLimitedException}) or {@code
 * TOO_MANY_WAITERS} ({@link TooManyWaitersException}).
 */
public class UnavailableException extends OpregException {
  private static final long serialVersionUID = 1L;

  public UnavailableException(
      String message,
      Throwable cause,
      Status.Code code,
      String reason,
      Map<String, String> metadata,
      List<Message> details) {
    super(message, cause, code, reason, metadata, details);
  }
}
