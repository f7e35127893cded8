package dev.opreg.client;

/**
 * Finds out what became of an attempt whose outcome is unknown (Claim answered RECONCILE), under
 * the reconcile lease; {@code remoteRef} is what that attempt reported.
 */
@FunctionalInterface
public interface Reconciler {
  Reconciliation reconcile(Lease lease, String remoteRef) throws Exception;
}
