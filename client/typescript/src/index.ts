export {
  OpregClient,
  effectiveDeadline,
  type AdminActionResult,
  type CallOptions,
  type ListOperationsQuery,
  type OpregClientOptions,
  type TlsOptions,
  type UnfinishedStatus,
} from "./client";
export { VERSION } from "./version";
export { runOnce, type RetryPolicyOptions, type RunOnceOptions, type RunOnceResult } from "./runOnce";
export { Reconciled, type Reconcile, type ReconcileOutcome, type Work, type WorkValue } from "./underLease";
export { withRetries } from "./retry";
export {
  NO_HANDLER,
  Worker,
  operationKind,
  runWorker,
  type WorkerHandler,
  type WorkerLogger,
  type WorkerOptions,
  type WorkerReconcile,
} from "./worker";
export * from "./errors";
export { canonicalJson, parametersDigest, toHex, type JsonObject, type JsonValue } from "./digest";
export { decodeRpcStatus, type RpcStatus, type AnyDetail } from "./rpcStatus";
export { durationFromMillis, millisFromDuration } from "./time";
export * from "./gen/opreg/v1/registry";
// Named, not `export *`: admin.ts repeats registry.ts's DeepPartial and protobufPackage.
export {
  HoldOperationRequest,
  HoldOperationResponse,
  ListOperationsRequest,
  ListOperationsResponse,
  OperationAdminClient,
  OperationAdminService,
  ReleaseOperationRequest,
  ReleaseOperationResponse,
  RequeueOperationRequest,
  RequeueOperationResponse,
  ResolveOperationRequest,
  ResolveOperationResponse,
  type OperationAdminServer,
} from "./gen/opreg/v1/admin";
