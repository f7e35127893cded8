export { OpregClient, effectiveDeadline, type CallOptions, type OpregClientOptions } from "./client";
export {
  runOnce,
  withRetries,
  Reconciled,
  type Reconcile,
  type ReconcileOutcome,
  type RetryPolicyOptions,
  type RunOnceOptions,
  type RunOnceResult,
  type Work,
  type WorkValue,
} from "./runOnce";
export * from "./errors";
export { canonicalJson, parametersDigest, toHex, type JsonObject, type JsonValue } from "./digest";
export { decodeRpcStatus, type RpcStatus, type AnyDetail } from "./rpcStatus";
export { durationFromMillis, millisFromDuration } from "./time";
export * from "./gen/opreg/v1/registry";
