package dev.opreg.client;

/**
 * The work the run-once helper runs under a lease. Return the result to record (or {@code null} for
 * none); throw {@link BusinessException}, {@link TransientException} or {@link
 * SentButUnconfirmedException} for those outcomes; anything else is recorded retryable and raised
 * as {@link WorkException}. Watch the lease ({@link Lease#isLost()}, {@link Lease#await}); when it
 * is lost the work's thread is interrupted and nothing it returns is reported.
 */
@FunctionalInterface
public interface Work {
  byte[] run(Lease lease) throws Exception;
}
