package dev.opreg.client;

import opreg.v1.Registry.Operation;

/**
 * A worker's handler for one kind of operation: gets the operation (with its parameters) and its
 * lease; returns or throws what the run-once helper's {@link Work} does.
 */
@FunctionalInterface
public interface Handler {
  byte[] handle(Operation operation, Lease lease) throws Exception;
}
