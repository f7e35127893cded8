// The error vocabulary of proto/opreg/v1/errors.proto: every ErrorReason maps to
// an error class, every ErrorMetadataKey is read by one, and src/ names them
// only through the generated enums (no bare reason or key literals).
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";

import { Metadata, type ServiceError } from "@grpc/grpc-js";

import {
  ErrorMetadataKey,
  ErrorReason,
  errorClassOf,
  errorReasonOf,
  fromServiceError,
  GrpcStatus,
  metadataKeyName,
  OperationStatus,
  OpregError,
  reasonName,
  STATUS_DETAILS_KEY,
  type AlreadyCompensatedError,
  type AlreadyCompletedError,
  type InvalidTransitionError,
  type KnownErrorMetadataKey,
  type KnownErrorReason,
  type MessageTooLargeError,
  type ParameterConflictError,
  type PermissionDeniedError,
  type RateLimitedError,
  type StaleFencingTokenError,
} from "../src";
import { PACKAGE_ROOT } from "./server";
import { encodeStatus } from "./statusEncoding";

const UNUSED_REASONS = new Set<number>([ErrorReason.ERROR_REASON_UNSPECIFIED, ErrorReason.UNRECOGNIZED]);
const UNUSED_KEYS = new Set<number>([ErrorMetadataKey.ERROR_METADATA_KEY_UNSPECIFIED, ErrorMetadataKey.UNRECOGNIZED]);

const reasons = Object.values(ErrorReason).filter((v): v is KnownErrorReason => typeof v === "number" && !UNUSED_REASONS.has(v));
const keys = Object.values(ErrorMetadataKey).filter(
  (v): v is KnownErrorMetadataKey => typeof v === "number" && !UNUSED_KEYS.has(v),
);

/** What grpc-js would hand fromServiceError for a status `code` with an opreg ErrorInfo. */
function serverError(code: GrpcStatus, reason: string, metadata: Record<string, string> = {}): OpregError {
  const trailers = new Metadata();
  trailers.set(STATUS_DETAILS_KEY, Buffer.from(encodeStatus(code, "refused", reason, metadata)));
  return fromServiceError(Object.assign(new Error("refused"), { code, details: "refused", metadata: trailers }) as ServiceError);
}

describe("contract: ErrorReason", () => {
  test("the wire strings are the enum names without ERROR_REASON_", () => {
    assert.equal(reasonName(ErrorReason.ERROR_REASON_PARAMETER_CONFLICT), "PARAMETER_CONFLICT");
    assert.equal(errorReasonOf("PARAMETER_CONFLICT"), ErrorReason.ERROR_REASON_PARAMETER_CONFLICT);
    assert.equal(errorReasonOf("UNSPECIFIED"), undefined);
    assert.equal(errorReasonOf("NO_SUCH_REASON"), undefined);
    assert.equal(errorReasonOf(""), undefined);
    assert.equal(errorReasonOf(undefined), undefined);
  });

  test("every reason is mapped to an error class, chosen by the reason whatever the code", () => {
    assert.ok(reasons.length > 0);
    for (const reason of reasons) {
      const name = reasonName(reason);
      assert.equal(errorReasonOf(name), reason, name);
      const Class = errorClassOf(reason);
      assert.ok(Class !== undefined && Class !== OpregError, `${name} has a class of its own`);
      // UNKNOWN maps to no class by code: only the reason can have chosen it.
      const error = serverError(GrpcStatus.UNKNOWN, name);
      assert.ok(error instanceof Class, `${name} -> ${error.constructor.name}, not ${Class.name}`);
      assert.equal(error.reason, name);
      assert.equal(error.errorReason, reason);
    }
  });

  test("an unknown reason keeps its string and falls back to the code's class", () => {
    const error = serverError(GrpcStatus.ABORTED, "SOMETHING_NEW");
    assert.equal(error.reason, "SOMETHING_NEW");
    assert.equal(error.errorReason, undefined);
    assert.equal(error.constructor.name, "StaleFencingTokenError");
  });
});

describe("contract: ErrorMetadataKey", () => {
  test("the wire keys are the enum names without ERROR_METADATA_KEY_, in lowerCamelCase", () => {
    assert.equal(metadataKeyName(ErrorMetadataKey.ERROR_METADATA_KEY_STORED_DIGEST), "storedDigest");
    assert.equal(metadataKeyName(ErrorMetadataKey.ERROR_METADATA_KEY_DIFFERING_FIELDS_TRUNCATED), "differingFieldsTruncated");
    assert.equal(metadataKeyName(ErrorMetadataKey.ERROR_METADATA_KEY_LIMIT), "limit");
    assert.equal(metadataKeyName(ErrorMetadataKey.ERROR_METADATA_KEY_CALLS_PER_SECOND), "callsPerSecond");
  });

  // Typed over every key: a key added to the contract fails to compile here until it is read.
  const READ: Record<KnownErrorMetadataKey, { reason: KnownErrorReason; value: string; read: (error: OpregError) => unknown; expected: unknown }> = {
    [ErrorMetadataKey.ERROR_METADATA_KEY_LIMIT]: {
      reason: ErrorReason.ERROR_REASON_MESSAGE_TOO_LARGE,
      value: "589824",
      read: (e) => (e as MessageTooLargeError).limit,
      expected: 589824,
    },
    [ErrorMetadataKey.ERROR_METADATA_KEY_STORED_DIGEST]: {
      reason: ErrorReason.ERROR_REASON_PARAMETER_CONFLICT,
      value: "ab01",
      read: (e) => (e as ParameterConflictError).storedDigest,
      expected: "ab01",
    },
    [ErrorMetadataKey.ERROR_METADATA_KEY_REQUEST_DIGEST]: {
      reason: ErrorReason.ERROR_REASON_PARAMETER_CONFLICT,
      value: "cd02",
      read: (e) => (e as ParameterConflictError).requestDigest,
      expected: "cd02",
    },
    [ErrorMetadataKey.ERROR_METADATA_KEY_DIFFERING_FIELDS]: {
      reason: ErrorReason.ERROR_REASON_PARAMETER_CONFLICT,
      value: "amount,account",
      read: (e) => (e as ParameterConflictError).differingFields,
      expected: ["amount", "account"],
    },
    [ErrorMetadataKey.ERROR_METADATA_KEY_DIFFERING_FIELDS_TRUNCATED]: {
      reason: ErrorReason.ERROR_REASON_PARAMETER_CONFLICT,
      value: "true",
      read: (e) => (e as ParameterConflictError).differingFieldsTruncated,
      expected: true,
    },
    [ErrorMetadataKey.ERROR_METADATA_KEY_CONFLICTING_FIELD]: {
      reason: ErrorReason.ERROR_REASON_PARAMETER_CONFLICT,
      value: "compensates",
      read: (e) => (e as ParameterConflictError).conflictingField,
      expected: "compensates",
    },
    [ErrorMetadataKey.ERROR_METADATA_KEY_PRESENTED_TOKEN]: {
      reason: ErrorReason.ERROR_REASON_STALE_FENCING_TOKEN,
      value: "5",
      read: (e) => (e as StaleFencingTokenError).presentedToken,
      expected: 5n,
    },
    [ErrorMetadataKey.ERROR_METADATA_KEY_CURRENT_TOKEN]: {
      reason: ErrorReason.ERROR_REASON_STALE_FENCING_TOKEN,
      value: "6",
      read: (e) => (e as StaleFencingTokenError).currentToken,
      expected: 6n,
    },
    [ErrorMetadataKey.ERROR_METADATA_KEY_FENCING_TOKEN]: {
      reason: ErrorReason.ERROR_REASON_ALREADY_COMPLETED,
      value: "7",
      read: (e) => (e as AlreadyCompletedError).fencingToken,
      expected: 7n,
    },
    [ErrorMetadataKey.ERROR_METADATA_KEY_COMPENSATED_BY]: {
      reason: ErrorReason.ERROR_REASON_ALREADY_COMPENSATED,
      value: "refund:1",
      read: (e) => (e as AlreadyCompensatedError).compensatedBy,
      expected: "refund:1",
    },
    [ErrorMetadataKey.ERROR_METADATA_KEY_CURRENT_STATUS]: {
      reason: ErrorReason.ERROR_REASON_INVALID_TRANSITION,
      value: "OPERATION_STATUS_DEAD",
      read: (e) => (e as InvalidTransitionError).currentStatus,
      expected: OperationStatus.OPERATION_STATUS_DEAD,
    },
    [ErrorMetadataKey.ERROR_METADATA_KEY_HELD]: {
      reason: ErrorReason.ERROR_REASON_INVALID_TRANSITION,
      value: "true",
      read: (e) => (e as InvalidTransitionError).held,
      expected: true,
    },
    [ErrorMetadataKey.ERROR_METADATA_KEY_PRINCIPAL]: {
      reason: ErrorReason.ERROR_REASON_PERMISSION_DENIED,
      value: "alice",
      read: (e) => (e as PermissionDeniedError).principal,
      expected: "alice",
    },
    [ErrorMetadataKey.ERROR_METADATA_KEY_NAMESPACE]: {
      reason: ErrorReason.ERROR_REASON_PERMISSION_DENIED,
      value: "payments",
      read: (e) => (e as PermissionDeniedError).namespace,
      expected: "payments",
    },
    [ErrorMetadataKey.ERROR_METADATA_KEY_ROLE]: {
      reason: ErrorReason.ERROR_REASON_PERMISSION_DENIED,
      value: "admin",
      read: (e) => (e as PermissionDeniedError).role,
      expected: "admin",
    },
    [ErrorMetadataKey.ERROR_METADATA_KEY_CALLS_PER_SECOND]: {
      reason: ErrorReason.ERROR_REASON_RATE_LIMITED,
      value: "50",
      read: (e) => (e as RateLimitedError).callsPerSecond,
      expected: 50,
    },
  };

  test("every key is read into a field of its reason's error", () => {
    assert.ok(keys.length > 0);
    for (const key of keys) {
      const { reason, value, read, expected } = READ[key];
      const name = metadataKeyName(key);
      const error = serverError(GrpcStatus.UNKNOWN, reasonName(reason), { [name]: value });
      assert.deepEqual(read(error), expected, `${name} on ${reasonName(reason)}`);
      assert.equal(error.metadataValue(key), value);
    }
  });
});

describe("contract: src/ names reasons and keys only through the enums", () => {
  test("no bare reason or metadata key string literal in src/ (generated code aside)", () => {
    const dir = join(PACKAGE_ROOT, "src");
    const names = [...reasons.map((r) => reasonName(r)), ...keys.map((k) => metadataKeyName(k))];
    const offenders: string[] = [];
    for (const file of readdirSync(dir).filter((f) => f.endsWith(".ts"))) {
      const code = readFileSync(join(dir, file), "utf8")
        .replace(/\/\*[\s\S]*?\*\//g, "")
        .replace(/\/\/.*$/gm, "");
      for (const name of names) {
        if (new RegExp(`["'\`]${name}["'\`]`).test(code)) offenders.push(`${file}: "${name}"`);
      }
    }
    assert.deepEqual(offenders, []);
  });
});
