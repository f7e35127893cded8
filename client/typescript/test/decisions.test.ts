// The decisions of the run-once protocol as the vectors every client shares
// (client/testdata/decisions.json, format in its `about`), on the pure functions
// of src/decide.ts: one test per vector, read from the file, so a vector added
// there runs here with no new code. No server: an error vector becomes the
// status a server would answer (google.rpc.Status with an opreg ErrorInfo and a
// RetryInfo), turned into a typed error by the client's own fromServiceError.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { describe, test } from "node:test";

import {
  BusinessError,
  ClaimOutcome,
  ClaimResponse,
  ExecutionOutcome,
  fromServiceError,
  GrpcStatus,
  LookupResponse,
  OperationStatus,
  durationFromMillis,
  type OpregError,
} from "../src";
import {
  DEFAULT_BACKOFF_INITIAL_MS,
  DEFAULT_BACKOFF_MAX_MS,
  MAX_CLAIM_WAIT_MS,
  decideCallInDoubt,
  decideClaimAnswer,
  decideCompleteError,
  decideRenewFailure,
  isTransient,
  retryDelayMs,
  type ClaimDecision,
  type ReportKind,
} from "../src/decide";
import { DEFAULT_POLL_INTERVAL_MS } from "../src/runOnce";
import { kindOf } from "./kinds";
import { ERROR_INFO, RETRY_INFO, encodeErrorInfo, encodeRetryInfo, failedCall, type Detail } from "./statusEncoding";

// ---- the vector file ----

interface ErrorVector {
  code: string;
  reason?: string;
  metadata?: Record<string, string>;
  retry_delay_ms?: number;
  message?: string;
}

interface ClaimAnswer {
  outcome: string;
  status: string;
  result?: string;
  failure?: { code: string; message: string };
  lease?: boolean;
  remote_ref?: string;
  retry_after_ms?: number;
  /** The server's `waited`; absent: a server that does not wait. */
  waited_ms?: number;
}

/** A decision as the file writes it (a wait compared within 1 ms). */
type Expected = Record<string, unknown>;

interface Table {
  settings: { backoff_initial_ms: number; backoff_max_ms: number; poll_interval_ms: number; max_claim_wait_ms: number };
  transient_error: { name: string; error: ErrorVector; expect: boolean }[];
  retry_delay: { name: string; attempt: number; retry_info_ms?: number; random: number; expect_ms: number }[];
  claim_answer: { name: string; answer: ClaimAnswer; remaining_ms?: number; random?: number; expect: Expected }[];
  complete_error: { name: string; error: ErrorVector; expect: string }[];
  renew_failure: { name: string; error: ErrorVector; attempt: number; trusted_left_ms: number; random: number; expect: Expected }[];
  call_in_doubt: {
    name: string;
    reported: ReportKind;
    token: number;
    lookup: { status: string; executions: { token: number; outcome: string }[] } | null;
    expect: string;
  }[];
}

const FILE = resolve(__dirname, "..", "..", "..", "testdata", "decisions.json");
const table = JSON.parse(readFileSync(FILE, "utf8")) as Table;

const SECTIONS = ["transient_error", "retry_delay", "claim_answer", "complete_error", "renew_failure", "call_in_doubt"] as const;

// ---- from the file's names to the client's values ----

/** The value of `PREFIX_NAME` in a generated enum; fails the test on a name the contract does not have. */
function enumValue<E extends Record<string, string | number>>(values: E, prefix: string, name: string): E[keyof E] {
  const value = values[`${prefix}${name}` as keyof E];
  assert.equal(typeof value, "number", `no ${prefix}${name}`);
  return value;
}

/** An operation status by its name without OPERATION_STATUS_. */
function operationStatus(name: string): OperationStatus {
  return enumValue(OperationStatus, "OPERATION_STATUS_", name);
}

/** What fromServiceError makes of the status a server (or, without a reason, the transport) answers for `v`. */
function errorOf(v: ErrorVector): OpregError {
  const code = GrpcStatus[v.code as keyof typeof GrpcStatus];
  assert.equal(typeof code, "number", `no gRPC code ${v.code}`);
  const details: Detail[] = [];
  if (v.reason !== undefined) details.push([ERROR_INFO, encodeErrorInfo(v.reason, v.metadata)]);
  if (v.retry_delay_ms !== undefined) details.push([RETRY_INFO, encodeRetryInfo(v.retry_delay_ms)]);
  const error = fromServiceError(failedCall(code, v.message ?? `answered ${v.code}`, details));
  // The conversion kept what the decision reads: a reason this client knows, the RetryInfo delay.
  if (v.reason !== undefined) assert.notEqual(error.errorReason, undefined, `reason ${v.reason} unknown to this client`);
  assert.equal(error.retryDelayMs, v.retry_delay_ms);
  return error;
}

/** "lease_lost" as the client spells its decisions: "leaseLost". */
const camel = (name: string) => name.replace(/_(.)/g, (_, c: string) => c.toUpperCase());

/** Asserts `actual` is `expected`, a wait within 1 ms. */
function assertDecision(actual: Expected, expected: Expected): void {
  if (typeof expected.wait_ms === "number" && typeof actual.wait_ms === "number") {
    assert.ok(Math.abs(actual.wait_ms - expected.wait_ms) <= 1, `waits ${actual.wait_ms} ms, not ${expected.wait_ms} ms`);
    actual = { ...actual, wait_ms: expected.wait_ms };
  }
  assert.deepEqual(actual, expected);
}

function claimResponse(a: ClaimAnswer): ClaimResponse {
  return ClaimResponse.fromPartial({
    outcome: enumValue(ClaimOutcome, "CLAIM_OUTCOME_", a.outcome),
    operation: {
      namespace: "decisions",
      operationKey: "vector",
      status: operationStatus(a.status),
      result: a.result === undefined ? undefined : new TextEncoder().encode(a.result),
      failure: a.failure,
      remoteRef: a.remote_ref ?? "",
    },
    lease: a.lease === true ? { owner: "decisions", fencingToken: 7n, attempt: 1 } : undefined,
    retryAfter: a.retry_after_ms === undefined ? undefined : durationFromMillis(a.retry_after_ms),
    waited: a.waited_ms === undefined ? undefined : durationFromMillis(a.waited_ms),
  });
}

/** A Claim decision as the file writes it; RECONCILE reconciles (with a callback) or hands the lease back (without), both under the lease. */
function claimAsWritten(decision: ClaimDecision): Expected {
  switch (decision.kind) {
    case "execute":
      return { step: "execute", reconcile: decision.step.kind !== "work" };
    case "return":
      return { step: "return", value: new TextDecoder().decode(decision.operation?.result), replayed: true };
    case "wait":
      return { step: "wait", wait_ms: decision.waitMs };
    case "raise": {
      const { error } = decision;
      const business = error instanceof BusinessError ? { code: error.code, replayed: error.replayed } : {};
      return { step: "raise", error: kindOf(error), ...business };
    }
  }
}

// ---- the vectors ----

describe("decisions: the file", () => {
  test("every section has vectors", () => {
    for (const section of SECTIONS) assert.ok(table[section].length > 0, section);
  });

  test("its settings are this client's defaults", () => {
    assert.deepEqual(
      {
        backoff_initial_ms: DEFAULT_BACKOFF_INITIAL_MS,
        backoff_max_ms: DEFAULT_BACKOFF_MAX_MS,
        poll_interval_ms: DEFAULT_POLL_INTERVAL_MS,
        max_claim_wait_ms: MAX_CLAIM_WAIT_MS,
      },
      table.settings,
    );
  });
});

describe("decisions: transient_error (isTransient)", () => {
  for (const v of table.transient_error) {
    test(v.name, () => assert.equal(isTransient(errorOf(v.error)), v.expect));
  }
});

describe("decisions: retry_delay (retryDelayMs)", () => {
  for (const v of table.retry_delay) {
    test(v.name, () => assertDecision({ wait_ms: retryDelayMs(v.attempt, v.retry_info_ms, v.random) }, { wait_ms: v.expect_ms }));
  }
});

describe("decisions: claim_answer (decideClaimAnswer)", () => {
  for (const v of table.claim_answer) {
    test(v.name, () => {
      // The answer is decided alike with a reconcile callback and without one.
      for (const hasReconcile of [true, false]) {
        const decision = decideClaimAnswer(claimResponse(v.answer), {
          hasReconcile,
          remainingMs: v.remaining_ms ?? Infinity,
          pollIntervalMs: table.settings.poll_interval_ms,
          random: v.random ?? 0,
          what: v.name,
        });
        assertDecision(claimAsWritten(decision), v.expect);
      }
    });
  }
});

describe("decisions: complete_error (decideCompleteError)", () => {
  for (const v of table.complete_error) {
    test(v.name, () => assert.equal(decideCompleteError(errorOf(v.error)), camel(v.expect)));
  }
});

describe("decisions: renew_failure (decideRenewFailure)", () => {
  for (const v of table.renew_failure) {
    test(v.name, () => {
      const decision = decideRenewFailure(errorOf(v.error), v.attempt, v.trusted_left_ms, v.random);
      assertDecision(decision.lost ? { lost: true } : { lost: false, wait_ms: decision.waitMs }, v.expect);
    });
  }
});

describe("decisions: call_in_doubt (decideCallInDoubt)", () => {
  for (const v of table.call_in_doubt) {
    test(v.name, () => {
      const found =
        v.lookup === null
          ? undefined
          : LookupResponse.fromPartial({
              operation: { namespace: "decisions", operationKey: "vector", status: operationStatus(v.lookup.status) },
              executions: v.lookup.executions.map((e) => ({
                fencingToken: BigInt(e.token),
                outcome: enumValue(ExecutionOutcome, "EXECUTION_OUTCOME_", e.outcome),
              })),
            });
      assert.equal(decideCallInDoubt(v.reported, BigInt(v.token), found).kind, camel(v.expect));
    });
  }
});
