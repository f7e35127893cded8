package dev.opreg.client;

import opreg.v1.Registry.Operation;

/** A worker's reconcile callback: what became of the operation's unknown attempt ({@code operation.getRemoteRef()}). */
@FunctionalInterface
public interface WorkerReconciler {
  Reconciliation reconcile(Operation operation, Lease lease) throws Exception;
}
