// Puts operations into the states the worker and admin tests start from, with
// the plain wrappers (no runOnce), and waits for conditions to hold.
import assert from "node:assert/strict";

import { durationFromMillis, OperationStatus, type JsonObject, type Lease, type OpregClient } from "../src";

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Claims `key` for owner "seed" and returns its lease. */
export async function seedClaimed(
  client: OpregClient,
  namespace: string,
  operationKey: string,
  parameters: JsonObject,
  options: { leaseTtlMs?: number; maxAttempts?: number } = {},
): Promise<Lease> {
  const claimed = await client.claim({
    namespace,
    operationKey,
    parameters,
    owner: "seed",
    leaseTtl: durationFromMillis(options.leaseTtlMs ?? 30_000),
    retryPolicy:
      options.maxAttempts === undefined
        ? undefined
        : {
            maxAttempts: options.maxAttempts,
            initialBackoff: durationFromMillis(100),
            maxBackoff: durationFromMillis(1_000),
            deadline: durationFromMillis(600_000),
          },
  });
  assert.ok(claimed.lease !== undefined, `seed claim of ${operationKey} was not ACQUIRED`);
  return claimed.lease;
}

/** A retry due `retryAfterMs` from now (RETRY_SCHEDULED). */
export async function seedRetry(
  client: OpregClient,
  namespace: string,
  operationKey: string,
  parameters: JsonObject,
  options: { retryAfterMs?: number; maxAttempts?: number } = {},
): Promise<void> {
  const lease = await seedClaimed(client, namespace, operationKey, parameters, { maxAttempts: options.maxAttempts });
  await client.complete({
    namespace,
    operationKey,
    fencingToken: lease.fencingToken,
    retryable: { errorClass: "SeedError", message: "seeded retry", retryAfter: durationFromMillis(options.retryAfterMs ?? 100) },
  });
}

/** An operation whose last outcome is unknown (UNKNOWN, remote ref `remoteRef`). */
export async function seedUnknown(
  client: OpregClient,
  namespace: string,
  operationKey: string,
  parameters: JsonObject,
  remoteRef: string,
): Promise<void> {
  const lease = await seedClaimed(client, namespace, operationKey, parameters);
  await client.complete({ namespace, operationKey, fencingToken: lease.fencingToken, unknown: { remoteRef, message: "seeded timeout" } });
}

/** A DEAD operation: a budget of one attempt, spent on a retryable error. */
export async function seedDead(client: OpregClient, namespace: string, operationKey: string, parameters: JsonObject): Promise<void> {
  await seedRetry(client, namespace, operationKey, parameters, { maxAttempts: 1 });
  const found = await client.lookup({ namespace, operationKey });
  assert.equal(found.operation?.status, OperationStatus.OPERATION_STATUS_DEAD, `${operationKey} should be DEAD`);
}

/** A SUCCEEDED operation with `result`. */
export async function seedSucceeded(
  client: OpregClient,
  namespace: string,
  operationKey: string,
  parameters: JsonObject,
  result: string,
): Promise<void> {
  const lease = await seedClaimed(client, namespace, operationKey, parameters);
  await client.complete({ namespace, operationKey, fencingToken: lease.fencingToken, success: { result: Buffer.from(result) } });
}

/** Polls `condition` every 50 ms until it holds; fails after `timeoutMs`, naming `what`. */
export async function waitFor(what: string, condition: () => Promise<boolean> | boolean, timeoutMs = 15_000): Promise<void> {
  const started = Date.now();
  while (!(await condition())) {
    if (Date.now() - started > timeoutMs) assert.fail(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(50);
  }
}

/** True once every key's operation has `status`. */
export async function allHaveStatus(
  client: OpregClient,
  namespace: string,
  keys: string[],
  status: OperationStatus,
): Promise<boolean> {
  for (const operationKey of keys) {
    const found = await client.lookup({ namespace, operationKey });
    if (found.operation?.status !== status) return false;
  }
  return true;
}

/** A WorkerLogger that keeps every line, for assertions. */
export function capturingLogger(): {
  lines: { level: "warn" | "error"; message: string; fields: Record<string, unknown> }[];
  warn(message: string, fields: Record<string, unknown>): void;
  error(message: string, fields: Record<string, unknown>): void;
} {
  const lines: { level: "warn" | "error"; message: string; fields: Record<string, unknown> }[] = [];
  return {
    lines,
    warn: (message, fields) => lines.push({ level: "warn", message, fields }),
    error: (message, fields) => lines.push({ level: "error", message, fields }),
  };
}
