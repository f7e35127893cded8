package dev.opreg.client;

/**
 * The work of an operation whose kind has no handler (and the worker has no default): recorded
 * retryable with error class {@code NO_HANDLER}, so the operation comes back, e.g. to a worker that
 * has the handler.
 */
public class NoHandlerException extends TransientException {
  private static final long serialVersionUID = 1L;

  private final String kind;

  public NoHandlerException(String kind) {
    super("no handler for kind '" + kind + "'", null, Protocol.NO_HANDLER, null);
    this.kind = kind;
  }

  public String kind() {
    return kind;
  }
}
