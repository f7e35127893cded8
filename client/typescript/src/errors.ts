// Typed errors. Every opreg error is a gRPC status carrying exactly one
// google.rpc.ErrorInfo (domain "opreg"); `fromServiceError` turns it into one
// of the classes below, all extending OpregError. `transient` ones (UNAVAILABLE,
// DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED / RATE_LIMITED or TOO_MANY_WAITERS, a
// server's "Timeout expired") are retried by runOnce and the worker, never
// sooner than a google.rpc.RetryInfo asks (`retryDelayMs`); nothing else is.
//
// The vocabulary is the contract's (proto/opreg/v1/errors.proto): a reason is
// an ErrorReason name without "ERROR_REASON_", a metadata key an
// ErrorMetadataKey name without "ERROR_METADATA_KEY_" in lowerCamelCase. The
// reason -> class table below is typed over every ErrorReason, so a reason added
// to the contract does not compile until it is mapped here.
import { Metadata, status as GrpcStatus, type ServiceError } from "@grpc/grpc-js";

import {
  ErrorMetadataKey,
  ErrorReason,
  errorMetadataKeyToJSON,
  errorReasonFromJSON,
  errorReasonToJSON,
} from "./gen/opreg/v1/errors";
import { OperationStatus, operationStatusFromJSON, type Operation } from "./gen/opreg/v1/registry";
import { decodeRpcStatus, type ErrorInfo, type FieldViolation } from "./rpcStatus";

export { ErrorMetadataKey, ErrorReason };

/** Every ErrorReason a server may send (all but UNSPECIFIED and the generator's UNRECOGNIZED). */
export type KnownErrorReason = Exclude<ErrorReason, ErrorReason.ERROR_REASON_UNSPECIFIED | ErrorReason.UNRECOGNIZED>;
/** Every ErrorMetadataKey (all but UNSPECIFIED and UNRECOGNIZED). */
export type KnownErrorMetadataKey = Exclude<
  ErrorMetadataKey,
  ErrorMetadataKey.ERROR_METADATA_KEY_UNSPECIFIED | ErrorMetadataKey.UNRECOGNIZED
>;

const REASON_PREFIX = "ERROR_REASON_";
const METADATA_KEY_PREFIX = "ERROR_METADATA_KEY_";

/** The `ErrorInfo.reason` string of `reason`: "PARAMETER_CONFLICT" for ERROR_REASON_PARAMETER_CONFLICT. */
export function reasonName(reason: KnownErrorReason): string {
  return errorReasonToJSON(reason).slice(REASON_PREFIX.length);
}

/** The ErrorReason an `ErrorInfo.reason` string names; undefined for none or one this client does not know. */
export function errorReasonOf(reason: string | undefined): KnownErrorReason | undefined {
  if (reason === undefined || reason === "") return undefined;
  const value = errorReasonFromJSON(REASON_PREFIX + reason);
  if (value === ErrorReason.ERROR_REASON_UNSPECIFIED || value === ErrorReason.UNRECOGNIZED) return undefined;
  return value;
}

/** The `ErrorInfo.metadata` key of `key`: "storedDigest" for ERROR_METADATA_KEY_STORED_DIGEST. */
export function metadataKeyName(key: KnownErrorMetadataKey): string {
  return errorMetadataKeyToJSON(key)
    .slice(METADATA_KEY_PREFIX.length)
    .toLowerCase()
    .replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());
}

/**
 * The `reason` of the errors runOnce and the worker raise themselves: not
 * ErrorReason values, never sent by a server (a caller can tell them apart from
 * the contract's reasons: `errorReason` is undefined for them).
 */
export const HelperReason = {
  DEAD: "DEAD",
  HELD: "HELD",
  RECONCILE_REQUIRED: "RECONCILE_REQUIRED",
  OUTCOME_UNKNOWN: "OUTCOME_UNKNOWN",
  OUTCOME_NOT_RECORDED: "OUTCOME_NOT_RECORDED",
} as const;

export const ERROR_DOMAIN = "opreg";
export const STATUS_DETAILS_KEY = "grpc-status-details-bin";
/**
 * What tonic's server-side timer answers (CANCELLED) when the caller's deadline
 * passes inside a server that does not answer DEADLINE_EXCEEDED itself.
 */
export const SERVER_TIMEOUT_MESSAGE = "Timeout expired";

/**
 * True for the CANCELLED "Timeout expired" a server's own timer answers when the
 * caller's deadline passed inside it: the same as DEADLINE_EXCEEDED, unlike a
 * CANCELLED the caller caused (an aborted signal, a closed client).
 */
export function isServerTimeout(code: number, message: string): boolean {
  return code === GrpcStatus.CANCELLED && message === SERVER_TIMEOUT_MESSAGE;
}

export { GrpcStatus };
export type { ErrorInfo, FieldViolation };

export interface OpregErrorInit {
  message: string;
  /** gRPC status code (`GrpcStatus.*`). */
  code: number;
  /** `ErrorInfo.reason` (domain "opreg"), when the status carried one. */
  reason?: string;
  errorInfo?: ErrorInfo;
  fieldViolations?: FieldViolation[];
  /** The status's google.rpc.RetryInfo delay, in milliseconds. */
  retryDelayMs?: number;
  cause?: unknown;
}

/** Base class of every error this client throws about the registry. */
export class OpregError extends Error {
  /** gRPC status code (`GrpcStatus.*`). */
  readonly code: number;
  /** `ErrorInfo.reason`, e.g. "PARAMETER_CONFLICT"; undefined for transport errors. */
  readonly reason: string | undefined;
  /** `reason` as the contract's ErrorReason; undefined without one, or for a reason this client does not know. */
  readonly errorReason: KnownErrorReason | undefined;
  /** `ErrorInfo.metadata` (empty when there was none). */
  readonly metadata: Readonly<Record<string, string>>;
  readonly errorInfo: ErrorInfo | undefined;
  /**
   * How long the server asked the caller to wait before retrying (its
   * google.rpc.RetryInfo), in milliseconds; undefined when it sent none.
   * runOnce and the worker wait at least this long before retrying a transient error.
   */
  readonly retryDelayMs: number | undefined;

  constructor(init: OpregErrorInit) {
    super(init.message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = new.target.name;
    this.code = init.code;
    this.reason = init.reason ?? init.errorInfo?.reason;
    this.errorReason = errorReasonOf(this.reason);
    this.errorInfo = init.errorInfo;
    this.metadata = init.errorInfo?.metadata ?? {};
    this.retryDelayMs = init.retryDelayMs;
  }

  /** The `ErrorInfo.metadata` value under `key`; undefined when the server sent none. */
  metadataValue(key: KnownErrorMetadataKey): string | undefined {
    const name = metadataKeyName(key);
    return Object.hasOwn(this.metadata, name) ? this.metadata[name] : undefined;
  }

  /**
   * UNAVAILABLE (OPERATION_BUSY and STORE_UNAVAILABLE included),
   * RESOURCE_EXHAUSTED / RATE_LIMITED or TOO_MANY_WAITERS, or DEADLINE_EXCEEDED
   * from a single call, or the CANCELLED "Timeout expired" a server's own timer
   * answers instead: safe to retry with backoff (at least `retryDelayMs`). A
   * CANCELLED the caller caused is not transient.
   */
  get transient(): boolean {
    return (
      this.code === GrpcStatus.UNAVAILABLE ||
      this.errorReason === ErrorReason.ERROR_REASON_RATE_LIMITED ||
      this.errorReason === ErrorReason.ERROR_REASON_TOO_MANY_WAITERS ||
      this.code === GrpcStatus.DEADLINE_EXCEEDED ||
      isServerTimeout(this.code, this.message)
    );
  }
}

/** ALREADY_EXISTS / PARAMETER_CONFLICT: the key is registered with other parameters. Never retry. */
export class ParameterConflictError extends OpregError {
  readonly differingFields: string[];
  /** Hex SHA-256 of the stored canonical parameters. */
  readonly storedDigest: string;
  /** Hex SHA-256 of this request's canonical parameters. */
  readonly requestDigest: string;
  /** "compensates" when the conflict is a different `compensates`. */
  readonly conflictingField: string | undefined;
  /** True when the server cut `differingFields` short. */
  readonly differingFieldsTruncated: boolean;

  constructor(init: OpregErrorInit) {
    super(init);
    const fields = this.metadataValue(ErrorMetadataKey.ERROR_METADATA_KEY_DIFFERING_FIELDS) ?? "";
    this.differingFields = fields === "" ? [] : fields.split(",");
    this.differingFieldsTruncated = this.metadataValue(ErrorMetadataKey.ERROR_METADATA_KEY_DIFFERING_FIELDS_TRUNCATED) === "true";
    this.storedDigest = this.metadataValue(ErrorMetadataKey.ERROR_METADATA_KEY_STORED_DIGEST) ?? "";
    this.requestDigest = this.metadataValue(ErrorMetadataKey.ERROR_METADATA_KEY_REQUEST_DIGEST) ?? "";
    this.conflictingField = this.metadataValue(ErrorMetadataKey.ERROR_METADATA_KEY_CONFLICTING_FIELD);
  }
}

function bigintOf(text: string | undefined): bigint | undefined {
  if (text === undefined || !/^-?\d+$/.test(text)) return undefined;
  return BigInt(text);
}

/** A count the server sent as decimal digits; undefined when absent or not one. */
function countOf(text: string | undefined): number | undefined {
  return text !== undefined && /^\d+$/.test(text) ? Number(text) : undefined;
}

/** ABORTED / STALE_FENCING_TOKEN: another execution took over, or the operation finished. */
export class StaleFencingTokenError extends OpregError {
  readonly presentedToken: bigint | undefined;
  readonly currentToken: bigint | undefined;

  constructor(init: OpregErrorInit) {
    super(init);
    this.presentedToken = bigintOf(this.metadataValue(ErrorMetadataKey.ERROR_METADATA_KEY_PRESENTED_TOKEN));
    this.currentToken = bigintOf(this.metadataValue(ErrorMetadataKey.ERROR_METADATA_KEY_CURRENT_TOKEN));
  }
}

/** FAILED_PRECONDITION / ALREADY_COMPLETED: a different report was already recorded for the token. */
export class AlreadyCompletedError extends OpregError {
  readonly fencingToken: bigint | undefined;

  constructor(init: OpregErrorInit) {
    super(init);
    this.fencingToken = bigintOf(this.metadataValue(ErrorMetadataKey.ERROR_METADATA_KEY_FENCING_TOKEN));
  }
}

/** FAILED_PRECONDITION / LEASE_NOT_HELD: Renew by an owner that does not hold the token. */
export class LeaseNotHeldError extends OpregError {}

/** FAILED_PRECONDITION: a compensation the registry refused. */
export class CompensationError extends OpregError {}
/** ORIGINAL_OUTCOME_UNKNOWN: reconcile the original first. */
export class OriginalOutcomeUnknownError extends CompensationError {}
/** NOTHING_TO_COMPENSATE: the original did not succeed. */
export class NothingToCompensateError extends CompensationError {}
/** ALREADY_COMPENSATED: another compensation exists. */
export class AlreadyCompensatedError extends CompensationError {
  readonly compensatedBy: string | undefined;

  constructor(init: OpregErrorInit) {
    super(init);
    this.compensatedBy = this.metadataValue(ErrorMetadataKey.ERROR_METADATA_KEY_COMPENSATED_BY);
  }
}

/**
 * FAILED_PRECONDITION / INVALID_TRANSITION: an OperationAdmin action the
 * operation's status does not allow (e.g. requeueing a SUCCEEDED operation).
 */
export class InvalidTransitionError extends OpregError {
  /** The status the operation had; undefined when the server named none this client knows. */
  readonly currentStatus: OperationStatus | undefined;
  /** Whether an operator held it; undefined when the server did not say. */
  readonly held: boolean | undefined;

  constructor(init: OpregErrorInit) {
    super(init);
    this.currentStatus = statusOf(this.metadataValue(ErrorMetadataKey.ERROR_METADATA_KEY_CURRENT_STATUS));
    const held = this.metadataValue(ErrorMetadataKey.ERROR_METADATA_KEY_HELD);
    this.held = held === "true" ? true : held === "false" ? false : undefined;
  }
}

/**
 * ALREADY_EXISTS / OPERATION_EXISTS: a Claim with REUSE_POLICY_REJECT_EXISTING
 * found the key registered. Never retried: only the call that registered the
 * key proceeds.
 */
export class OperationExistsError extends OpregError {
  /** The status of the registered operation; undefined when the server named none this client knows. */
  readonly currentStatus: OperationStatus | undefined;

  constructor(init: OpregErrorInit) {
    super(init);
    this.currentStatus = statusOf(this.metadataValue(ErrorMetadataKey.ERROR_METADATA_KEY_CURRENT_STATUS));
  }
}

/** An OperationStatus enum name (`OPERATION_STATUS_DEAD`) as the enum; undefined when absent or unknown. */
function statusOf(name: string | undefined): OperationStatus | undefined {
  if (name === undefined) return undefined;
  const status = operationStatusFromJSON(name);
  return status === OperationStatus.UNRECOGNIZED ? undefined : status;
}

/** NOT_FOUND: OPERATION_NOT_FOUND or RESOURCE_NOT_FOUND (see `reason`). */
export class NotFoundError extends OpregError {}

/** INVALID_ARGUMENT, with the google.rpc.BadRequest field violations. */
export class InvalidArgumentError extends OpregError {
  readonly fieldViolations: FieldViolation[];

  constructor(init: OpregErrorInit) {
    super(init);
    this.fieldViolations = init.fieldViolations ?? [];
  }
}

/**
 * UNAVAILABLE: the server or its database cannot be reached (transient), e.g.
 * STORE_UNAVAILABLE (with a RetryInfo, ~1 s) or OVERLOADED.
 */
export class UnavailableError extends OpregError {}

/**
 * UNAVAILABLE / OPERATION_BUSY: the operation's row is locked by another
 * transaction past the server's lock timeout. Transient: retry after
 * `retryDelayMs` (the server's RetryInfo, ~200 ms).
 */
export class OperationBusyError extends UnavailableError {}

/**
 * DEADLINE_EXCEEDED: a call's deadline passed (on the client, or inside the
 * server, which then stopped the work: reason DEADLINE_EXCEEDED), or runOnce's
 * overall deadline passed. Also the CANCELLED "Timeout expired" a server's own
 * timer may answer instead (`code` stays CANCELLED). Transient for one call.
 */
export class DeadlineExceededError extends OpregError {}

/**
 * RESOURCE_EXHAUSTED / MESSAGE_TOO_LARGE: the request message is larger than
 * the method accepts (refused before it was read). Never retried: the same
 * request is refused again.
 */
export class MessageTooLargeError extends OpregError {
  /** The largest request message (bytes) the method accepts; undefined if the server did not say. */
  readonly limit: number | undefined;

  constructor(init: OpregErrorInit) {
    super(init);
    this.limit = countOf(this.metadataValue(ErrorMetadataKey.ERROR_METADATA_KEY_LIMIT));
  }
}

/**
 * RESOURCE_EXHAUSTED / RATE_LIMITED: the namespace is past its calls per second
 * on this server. Transient: retry after `retryDelayMs` (the server's RetryInfo,
 * when the next call would be admitted).
 */
export class RateLimitedError extends UnavailableError {
  /** The namespace's limit on the server that refused the call; undefined if unsaid. */
  readonly callsPerSecond: number | undefined;

  constructor(init: OpregErrorInit) {
    super(init);
    this.callsPerSecond = countOf(this.metadataValue(ErrorMetadataKey.ERROR_METADATA_KEY_CALLS_PER_SECOND));
  }
}

/**
 * RESOURCE_EXHAUSTED / TOO_MANY_WAITERS: the replica holds as many waiting calls
 * (a Claim or Lookup with a `wait`) as it allows. Transient: retry after
 * `retryDelayMs` (the server's RetryInfo), or ask without a wait.
 */
export class TooManyWaitersError extends UnavailableError {
  /** The replica's limit of waiting calls; undefined if unsaid. */
  readonly limit: number | undefined;

  constructor(init: OpregErrorInit) {
    super(init);
    this.limit = countOf(this.metadataValue(ErrorMetadataKey.ERROR_METADATA_KEY_LIMIT));
  }
}

/**
 * UNAUTHENTICATED: the server's policy knows no such credentials. Give an API
 * key (`apiKey`) or a client certificate it names. Never retried.
 */
export class UnauthenticatedError extends OpregError {}

/** PERMISSION_DENIED: the principal lacks `role` in `namespace`. Never retried. */
export class PermissionDeniedError extends OpregError {
  readonly principal: string;
  readonly namespace: string;
  /** The role the call needed: reader, worker or admin. */
  readonly role: string;

  constructor(init: OpregErrorInit) {
    super(init);
    this.principal = this.metadataValue(ErrorMetadataKey.ERROR_METADATA_KEY_PRINCIPAL) ?? "";
    this.namespace = this.metadataValue(ErrorMetadataKey.ERROR_METADATA_KEY_NAMESPACE) ?? "";
    this.role = this.metadataValue(ErrorMetadataKey.ERROR_METADATA_KEY_ROLE) ?? "";
  }
}

/** INTERNAL (or any other code without a more specific class). */
export class InternalError extends OpregError {}

// ---- raised by runOnce, not by the server ----

/**
 * The lease was lost while the work ran: a renewal was refused (with any
 * non-transient error), no renewal succeeded before the local expiry, Complete
 * was refused with STALE_FENCING_TOKEN or LEASE_NOT_HELD, or a Lookup in doubt
 * found our execution SUPERSEDED. The work's outcome was not reported under it;
 * the operation belongs to whoever took over. `cause` says why.
 */
export class LeaseLostError extends OpregError {
  readonly fencingToken: bigint;

  constructor(fencingToken: bigint, cause: unknown) {
    super({
      message: `lease with fencing token ${fencingToken} was lost; the outcome was not reported`,
      code: GrpcStatus.ABORTED,
      reason: cause instanceof OpregError ? cause.reason : undefined,
      errorInfo: cause instanceof OpregError ? cause.errorInfo : undefined,
      cause,
    });
    this.fencingToken = fencingToken;
  }
}

/**
 * The work finished (or reconcile decided) but its report could not be recorded
 * with Complete, nor found recorded, with exactly that outcome, by a Lookup of
 * the execution holding `fencingToken`: the lease will lapse and the operation
 * will be claimed again (a retry, or a takeover). `cause` is the last Complete
 * error; `report` says what was to be recorded.
 */
export class OutcomeNotRecordedError extends OpregError {
  readonly fencingToken: bigint;
  readonly report: "success" | "failure" | "retryable" | "unknown";

  constructor(fencingToken: bigint, report: OutcomeNotRecordedError["report"], cause: unknown) {
    const why = cause instanceof Error ? cause.message : String(cause);
    super({
      message: `the work finished but its outcome (${report}) was not recorded for fencing token ${fencingToken}: ${why}`,
      code: GrpcStatus.UNKNOWN,
      reason: HelperReason.OUTCOME_NOT_RECORDED,
      cause,
    });
    this.fencingToken = fencingToken;
    this.report = report;
  }
}

/** The Claim answered DEAD: the retry budget is exhausted; a human decides. */
export class OperationDeadError extends OpregError {
  readonly operation: Operation | undefined;

  constructor(operation: Operation | undefined) {
    super({
      message: `operation ${operation?.namespace}/${operation?.operationKey} is DEAD: retry budget exhausted`,
      code: GrpcStatus.FAILED_PRECONDITION,
      reason: HelperReason.DEAD,
    });
    this.operation = operation;
  }
}

/**
 * The Claim answered HELD: an operator froze the operation while it is
 * investigated. runOnce throws it at once rather than waiting it out, so the
 * caller learns of the hold; claim again after `retryAfterMs` or ask the operator.
 */
export class OperationHeldError extends OpregError {
  readonly operation: Operation | undefined;
  /** The server's retry_after, in milliseconds. */
  readonly retryAfterMs: number;

  constructor(operation: Operation | undefined, retryAfterMs: number) {
    super({
      message: `operation ${operation?.namespace}/${operation?.operationKey} is HELD by an operator; claim again in ${retryAfterMs} ms`,
      code: GrpcStatus.FAILED_PRECONDITION,
      reason: HelperReason.HELD,
    });
    this.operation = operation;
    this.retryAfterMs = retryAfterMs;
  }
}

/**
 * The Claim answered RECONCILE and runOnce had no `reconcile` option. The outcome
 * stays unknown (reported again as unknown) until a caller reconciles it.
 */
export class ReconcileRequiredError extends OpregError {
  readonly remoteRef: string;

  constructor(remoteRef: string) {
    super({
      message: `last outcome is unknown (remote ref "${remoteRef}"); pass options.reconcile`,
      code: GrpcStatus.FAILED_PRECONDITION,
      reason: HelperReason.RECONCILE_REQUIRED,
    });
    this.remoteRef = remoteRef;
  }
}

/**
 * The work threw SentButUnconfirmedError and runOnce had no `reconcile` option:
 * the outcome was recorded as unknown (remote ref `remoteRef`) and stays so until
 * a caller with a reconcile callback (or an operator) settles it. `cause` is the
 * work's SentButUnconfirmedError.
 */
export class OutcomeUnknownError extends OpregError {
  readonly remoteRef: string;
  /** The operation as Complete returned it (status UNKNOWN). */
  readonly operation: Operation | undefined;

  constructor(remoteRef: string, operation: Operation | undefined, cause: unknown) {
    super({
      message: `the outcome is unknown (remote ref "${remoteRef}") and recorded so; pass options.reconcile to settle it`,
      code: GrpcStatus.UNKNOWN,
      reason: HelperReason.OUTCOME_UNKNOWN,
      cause,
    });
    this.remoteRef = remoteRef;
    this.operation = operation;
  }
}

type ErrorClass = new (init: OpregErrorInit) => OpregError;

/** The class of each reason; typed over every ErrorReason, so a new reason must be mapped to compile. */
const CLASS_BY_REASON: Readonly<Record<KnownErrorReason, ErrorClass>> = {
  [ErrorReason.ERROR_REASON_INVALID_ARGUMENT]: InvalidArgumentError,
  [ErrorReason.ERROR_REASON_MESSAGE_TOO_LARGE]: MessageTooLargeError,
  [ErrorReason.ERROR_REASON_PARAMETER_CONFLICT]: ParameterConflictError,
  [ErrorReason.ERROR_REASON_STALE_FENCING_TOKEN]: StaleFencingTokenError,
  [ErrorReason.ERROR_REASON_ALREADY_COMPLETED]: AlreadyCompletedError,
  [ErrorReason.ERROR_REASON_LEASE_NOT_HELD]: LeaseNotHeldError,
  [ErrorReason.ERROR_REASON_ORIGINAL_OUTCOME_UNKNOWN]: OriginalOutcomeUnknownError,
  [ErrorReason.ERROR_REASON_NOTHING_TO_COMPENSATE]: NothingToCompensateError,
  [ErrorReason.ERROR_REASON_ALREADY_COMPENSATED]: AlreadyCompensatedError,
  [ErrorReason.ERROR_REASON_INVALID_TRANSITION]: InvalidTransitionError,
  [ErrorReason.ERROR_REASON_UNAUTHENTICATED]: UnauthenticatedError,
  [ErrorReason.ERROR_REASON_PERMISSION_DENIED]: PermissionDeniedError,
  [ErrorReason.ERROR_REASON_OPERATION_NOT_FOUND]: NotFoundError,
  [ErrorReason.ERROR_REASON_RESOURCE_NOT_FOUND]: NotFoundError,
  [ErrorReason.ERROR_REASON_STORE_UNAVAILABLE]: UnavailableError,
  [ErrorReason.ERROR_REASON_OPERATION_BUSY]: OperationBusyError,
  [ErrorReason.ERROR_REASON_OVERLOADED]: UnavailableError,
  [ErrorReason.ERROR_REASON_RATE_LIMITED]: RateLimitedError,
  [ErrorReason.ERROR_REASON_DEADLINE_EXCEEDED]: DeadlineExceededError,
  [ErrorReason.ERROR_REASON_INTERNAL]: InternalError,
  [ErrorReason.ERROR_REASON_OPERATION_EXISTS]: OperationExistsError,
  [ErrorReason.ERROR_REASON_TOO_MANY_WAITERS]: TooManyWaitersError,
};

/** The error class `fromServiceError` uses for `reason`. */
export function errorClassOf(reason: KnownErrorReason): ErrorClass {
  return CLASS_BY_REASON[reason];
}

const BY_CODE: Partial<Record<number, ErrorClass>> = {
  [GrpcStatus.ALREADY_EXISTS]: ParameterConflictError,
  [GrpcStatus.ABORTED]: StaleFencingTokenError,
  [GrpcStatus.NOT_FOUND]: NotFoundError,
  [GrpcStatus.INVALID_ARGUMENT]: InvalidArgumentError,
  [GrpcStatus.UNAVAILABLE]: UnavailableError,
  [GrpcStatus.DEADLINE_EXCEEDED]: DeadlineExceededError,
  [GrpcStatus.UNAUTHENTICATED]: UnauthenticatedError,
  [GrpcStatus.PERMISSION_DENIED]: PermissionDeniedError,
  [GrpcStatus.INTERNAL]: InternalError,
};

function statusDetails(metadata: Metadata | undefined): Uint8Array | undefined {
  const values = metadata?.get(STATUS_DETAILS_KEY) ?? [];
  const value = values[0];
  return value instanceof Uint8Array ? value : undefined;
}

/** Maps a failed grpc-js call to a typed error (its ErrorInfo first, its code otherwise). */
export function fromServiceError(error: ServiceError): OpregError {
  let errorInfo: ErrorInfo | undefined;
  let fieldViolations: FieldViolation[] = [];
  let retryDelayMs: number | undefined;
  const details = statusDetails(error.metadata);
  if (details !== undefined) {
    try {
      const decoded = decodeRpcStatus(details);
      if (decoded.errorInfo?.domain === ERROR_DOMAIN) errorInfo = decoded.errorInfo;
      fieldViolations = decoded.fieldViolations;
      retryDelayMs = decoded.retryDelayMs;
    } catch {
      // A malformed trailer leaves the error untyped beyond its code.
    }
  }
  const init: OpregErrorInit = {
    message: error.details || error.message,
    code: error.code,
    errorInfo,
    fieldViolations,
    retryDelayMs,
    cause: error,
  };
  const reason = errorReasonOf(errorInfo?.reason);
  const Class =
    (reason !== undefined ? CLASS_BY_REASON[reason] : undefined) ??
    BY_CODE[error.code] ??
    (isServerTimeout(error.code, init.message) ? DeadlineExceededError : OpregError);
  return new Class(init);
}

// ---- thrown by the caller's work to tell runOnce what to report ----

export interface BusinessErrorOptions {
  /** True when the failure was recorded earlier and is being replayed. */
  replayed?: boolean;
  /** True when the failure was established by options.reconcile. */
  reconciled?: boolean;
  operation?: Operation;
  cause?: unknown;
}

/**
 * A terminal business failure (e.g. insufficient balance). Thrown by work, runOnce
 * records it with Complete(failure) and rethrows it; later runOnce calls for the same
 * key throw it again with `replayed` set, without running the work.
 */
export class BusinessError extends Error {
  readonly code: string;
  readonly replayed: boolean;
  readonly reconciled: boolean;
  readonly operation: Operation | undefined;

  constructor(code: string, message: string, options: BusinessErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.replayed = options.replayed ?? false;
    this.reconciled = options.reconciled ?? false;
    this.operation = options.operation;
  }
}

/**
 * A failure worth retrying later: reported as retryable, optionally with
 * downstream pushback, under `errorClass` (default: the error's name).
 */
export class TransientError extends Error {
  readonly retryAfterMs: number | undefined;
  readonly errorClass: string | undefined;

  constructor(message: string, options: { retryAfterMs?: number; errorClass?: string; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.retryAfterMs = options.retryAfterMs;
    this.errorClass = options.errorClass;
  }
}

/**
 * The remote call may have taken effect (e.g. a timeout after sending a payment):
 * reported as an unknown outcome with the remote reference, to be reconciled by the
 * next runOnce for the key.
 */
export class SentButUnconfirmedError extends Error {
  readonly remoteRef: string;

  constructor(remoteRef: string, message = "sent but not confirmed", options: { cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.remoteRef = remoteRef;
  }
}
