// Thin promise wrappers over the generated grpc-js stubs (OperationRegistry and
// OperationAdmin, on one channel): one method per RPC, each with an optional
// AbortSignal and deadline, failing with typed errors, carrying the active
// OpenTelemetry trace context when @opentelemetry/api is installed.
import {
  credentials as grpcCredentials,
  Metadata,
  status as GrpcStatus,
  type CallOptions as GrpcCallOptions,
  type ChannelCredentials,
  type ClientOptions,
  type ServiceError,
} from "@grpc/grpc-js";

import { fromServiceError } from "./errors";
import {
  HoldOperationRequest,
  ListOperationsRequest,
  OperationAdminClient,
  ReleaseOperationRequest,
  RequeueOperationRequest,
  ResolveOperationRequest,
  type HoldOperationResponse,
  type ListOperationsResponse,
  type ReleaseOperationResponse,
  type RequeueOperationResponse,
  type ResolveOperationResponse,
} from "./gen/opreg/v1/admin";
import {
  BatchClaimRequest,
  BatchCompleteRequest,
  ClaimDueRequest,
  ClaimRequest,
  CompleteRequest,
  FencedWriteRequest,
  GetResourceRequest,
  LookupRequest,
  OperationRegistryClient,
  RenewRequest,
  type BatchClaimResponse,
  type BatchCompleteResponse,
  type ClaimDueResponse,
  type ClaimResponse,
  type CompleteResponse,
  type AuditEntry,
  type DeepPartial,
  type FencedWriteResponse,
  type GetResourceResponse,
  type LookupResponse,
  type Operation,
  type OperationStatus,
  type RenewResponse,
} from "./gen/opreg/v1/registry";
import { runOnce, type RunOnceOptions, type RunOnceResult, type Work } from "./runOnce";
import { runWorker, type WorkerOptions } from "./worker";
import type { JsonObject } from "./digest";
import { abortReason } from "./time";
import { injectTraceContext } from "./tracing";

/** Per-call options of every wrapper. */
export interface CallOptions {
  /** Cancels the call; the promise rejects with the signal's reason. */
  signal?: AbortSignal;
  /** Absolute deadline (a Date or epoch milliseconds); DEADLINE_EXCEEDED after it. */
  deadline?: Date | number;
  /** Relative deadline in milliseconds; the earlier of this and `deadline` applies. */
  timeoutMs?: number;
}

/** TLS to a server that serves it (OPREG_TLS_CERT); PEM text or bytes. */
export interface TlsOptions {
  /** CA certificates the server's certificate must chain to; default: the system's roots. */
  caCertificate?: string | Buffer;
  /** A client certificate and its key, for a server that requires mutual TLS. */
  clientCertificate?: string | Buffer;
  clientKey?: string | Buffer;
  /** The name the server's certificate must carry, when it is not the address's host. */
  serverName?: string;
}

export interface OpregClientOptions {
  /** TLS settings; also implied by an `https://` address. */
  tls?: TlsOptions;
  /** Sent as `authorization: Bearer <key>` on every call. */
  apiKey?: string;
  /** Channel credentials, replacing `tls`. Default: plaintext, unless `tls` or `https://`. */
  credentials?: ChannelCredentials;
  /** grpc-js client options, e.g. `interceptors` or channel arguments. */
  clientOptions?: Partial<ClientOptions>;
  /** Relative deadline applied to calls given neither `deadline` nor `timeoutMs`. */
  defaultTimeoutMs?: number;
}

/**
 * What each OperationAdmin action answers: the operation after the action and
 * the audit row it wrote. Resolve, Requeue, Hold and Release each have their own
 * response message (ResolveOperationResponse, ...) with these two fields; every
 * one of them is an AdminActionResult, for code that handles the four alike.
 */
export interface AdminActionResult {
  /** The operation after the action. */
  operation: Operation | undefined;
  /** The audit row the action wrote. */
  audit: AuditEntry | undefined;
}

// Fails to compile if one of the four responses stops being an AdminActionResult.
type IsAdminActionResult<T extends AdminActionResult> = T;
type _AdminResponsesAreAdminActionResults = IsAdminActionResult<
  ResolveOperationResponse | RequeueOperationResponse | HoldOperationResponse | ReleaseOperationResponse
>;

/**
 * The statuses ListOperations may be asked for: the manual queue holds
 * unfinished operations only. SUCCEEDED and FAILED are INVALID_ARGUMENT (field
 * `statuses`); look a finished operation up by key with `lookup`.
 */
export type UnfinishedStatus =
  | OperationStatus.OPERATION_STATUS_IN_PROGRESS
  | OperationStatus.OPERATION_STATUS_RETRY_SCHEDULED
  | OperationStatus.OPERATION_STATUS_UNKNOWN
  | OperationStatus.OPERATION_STATUS_DEAD;

/** ListOperationsRequest as `listOperations` takes it: `statuses` limited to the unfinished ones (empty: all four). */
export type ListOperationsQuery = Omit<DeepPartial<ListOperationsRequest>, "statuses"> & {
  statuses?: UnfinishedStatus[];
};

type Stub = OperationRegistryClient | OperationAdminClient;

type Unary<Req, Res> = (
  request: Req,
  metadata: Metadata,
  options: Partial<GrpcCallOptions>,
  callback: (error: ServiceError | null, response: Res) => void,
) => { cancel(): void };

/** Resolves `deadline` / `timeoutMs` into the earliest absolute deadline (epoch ms). */
export function effectiveDeadline(options: CallOptions, defaultTimeoutMs?: number): number | undefined {
  let deadline = options.deadline instanceof Date ? options.deadline.getTime() : options.deadline;
  const timeoutMs = options.timeoutMs ?? (deadline === undefined ? defaultTimeoutMs : undefined);
  if (timeoutMs !== undefined) {
    const fromTimeout = Date.now() + timeoutMs;
    deadline = deadline === undefined ? fromTimeout : Math.min(deadline, fromTimeout);
  }
  return deadline;
}

export class OpregClient {
  /** The generated grpc-js stub, for anything the wrappers do not cover. */
  readonly stub: OperationRegistryClient;
  /** The generated OperationAdmin stub; it shares `stub`'s channel. */
  readonly adminStub: OperationAdminClient;
  private readonly defaultTimeoutMs: number | undefined;
  private readonly authorization: string | undefined;

  /**
   * `address` is `host:port`; a leading `http://` is accepted and ignored, a
   * leading `https://` turns TLS on (as `tls` does).
   */
  constructor(address: string, options: OpregClientOptions = {}) {
    const secure = address.startsWith("https://") || options.tls !== undefined;
    const target = address.replace(/^https?:\/\//, "");
    const tls = options.tls ?? {};
    if ((tls.clientCertificate === undefined) !== (tls.clientKey === undefined)) {
      throw new TypeError("give tls.clientCertificate and tls.clientKey together");
    }
    const pem = (value: string | Buffer | undefined) =>
      value === undefined ? null : Buffer.isBuffer(value) ? value : Buffer.from(value);
    const credentials =
      options.credentials ??
      (secure
        ? grpcCredentials.createSsl(pem(tls.caCertificate), pem(tls.clientKey), pem(tls.clientCertificate))
        : grpcCredentials.createInsecure());
    const clientOptions: Partial<ClientOptions> = { ...options.clientOptions };
    if (tls.serverName !== undefined) clientOptions["grpc.ssl_target_name_override"] = tls.serverName;
    // grpc-js deletes some keys from the options it is given: each stub gets a copy.
    this.stub = new OperationRegistryClient(target, credentials, { ...clientOptions });
    this.adminStub = new OperationAdminClient(target, credentials, {
      ...clientOptions,
      channelOverride: this.stub.getChannel(),
    });
    this.defaultTimeoutMs = options.defaultTimeoutMs;
    this.authorization = options.apiKey === undefined ? undefined : `Bearer ${options.apiKey}`;
  }

  /** Closes the channel (both stubs). */
  close(): void {
    this.stub.close();
  }

  /** Registers an operation, or says what to do about an existing one. */
  claim(request: DeepPartial<ClaimRequest>, options?: CallOptions): Promise<ClaimResponse> {
    return this.unary(this.stub, this.stub.claim, ClaimRequest.fromPartial(request), options);
  }

  /** Records the outcome of the execution holding `fencingToken`. Repeating it is safe. */
  complete(request: DeepPartial<CompleteRequest>, options?: CallOptions): Promise<CompleteResponse> {
    return this.unary(this.stub, this.stub.complete, CompleteRequest.fromPartial(request), options);
  }

  /**
   * Up to 1,000 Claims in one call. `results` answer them in request order,
   * each with `claim` (what `claim` would have answered) or `error` (the
   * google.rpc.Status it would have failed with); claims of one key answer as
   * if run one after another. Rejects only an empty, too long or too large
   * batch (InvalidArgumentError), or for transport errors.
   */
  batchClaim(request: DeepPartial<BatchClaimRequest>, options?: CallOptions): Promise<BatchClaimResponse> {
    return this.unary(this.stub, this.stub.batchClaim, BatchClaimRequest.fromPartial(request), options);
  }

  /** Up to 1,000 Completes in one call, answered like `batchClaim` (`completed` or `error` per item). */
  batchComplete(request: DeepPartial<BatchCompleteRequest>, options?: CallOptions): Promise<BatchCompleteResponse> {
    return this.unary(this.stub, this.stub.batchComplete, BatchCompleteRequest.fromPartial(request), options);
  }

  /**
   * Reads an operation and, optionally, its executions (`includeExecutions`),
   * its stored Struct parameters (`includeParameters`) and the operator actions
   * taken on it (`includeAudit`, oldest first).
   */
  lookup(request: DeepPartial<LookupRequest>, options?: CallOptions): Promise<LookupResponse> {
    return this.unary(this.stub, this.stub.lookup, LookupRequest.fromPartial(request), options);
  }

  /**
   * Takes up to `limit` (0: 100) due operations of a namespace, each under a
   * lease for `owner`: ACQUIRED (a due retry or a takeover: execute) or
   * RECONCILE (unknown outcome: check the remote system first). The worker
   * (runWorker) is built on it.
   */
  claimDue(request: DeepPartial<ClaimDueRequest>, options?: CallOptions): Promise<ClaimDueResponse> {
    return this.unary(this.stub, this.stub.claimDue, ClaimDueRequest.fromPartial(request), options);
  }

  /** Extends the lease of the current holder. */
  renew(request: DeepPartial<RenewRequest>, options?: CallOptions): Promise<RenewResponse> {
    return this.unary(this.stub, this.stub.renew, RenewRequest.fromPartial(request), options);
  }

  /** Writes a protected resource; refused (StaleFencingTokenError) for a superseded token. */
  fencedWrite(request: DeepPartial<FencedWriteRequest>, options?: CallOptions): Promise<FencedWriteResponse> {
    return this.unary(this.stub, this.stub.fencedWrite, FencedWriteRequest.fromPartial(request), options);
  }

  /** Reads a protected resource. */
  getResource(request: DeepPartial<GetResourceRequest>, options?: CallOptions): Promise<GetResourceResponse> {
    return this.unary(this.stub, this.stub.getResource, GetResourceRequest.fromPartial(request), options);
  }

  /**
   * OperationAdmin: one page of the manual queue (unfinished operations, in
   * registration order), `nextPageToken` empty on the last. `statuses` may name
   * only IN_PROGRESS, RETRY_SCHEDULED, UNKNOWN and DEAD (empty: all four):
   * SUCCEEDED or FAILED fails with an InvalidArgumentError whose
   * `fieldViolations` name `statuses` (look a finished operation up with `lookup`).
   */
  listOperations(request: ListOperationsQuery, options?: CallOptions): Promise<ListOperationsResponse> {
    return this.unary(this.adminStub, this.adminStub.listOperations, ListOperationsRequest.fromPartial(request), options);
  }

  /** Every operation ListOperations matches, page after page (`pageToken` is managed here; same `statuses` rule). */
  async *listAllOperations(
    request: Omit<ListOperationsQuery, "pageToken">,
    options?: CallOptions,
  ): AsyncGenerator<Operation, void, undefined> {
    let pageToken = "";
    do {
      const page = await this.listOperations({ ...request, pageToken }, options);
      yield* page.operations;
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
  }

  /** OperationAdmin: records the real outcome (`success` or `failure`) of an UNKNOWN, reconciling or DEAD operation. */
  resolveOperation(request: DeepPartial<ResolveOperationRequest>, options?: CallOptions): Promise<ResolveOperationResponse> {
    return this.unary(this.adminStub, this.adminStub.resolveOperation, ResolveOperationRequest.fromPartial(request), options);
  }

  /** OperationAdmin: DEAD -> RETRY_SCHEDULED, due now, with a fresh retry budget (`retryPolicy`, or the server's). */
  requeueOperation(request: DeepPartial<RequeueOperationRequest>, options?: CallOptions): Promise<RequeueOperationResponse> {
    return this.unary(this.adminStub, this.adminStub.requeueOperation, RequeueOperationRequest.fromPartial(request), options);
  }

  /** OperationAdmin: freezes an operation (Claim answers HELD, ClaimDue skips it, a live lease is revoked). */
  holdOperation(request: DeepPartial<HoldOperationRequest>, options?: CallOptions): Promise<HoldOperationResponse> {
    return this.unary(this.adminStub, this.adminStub.holdOperation, HoldOperationRequest.fromPartial(request), options);
  }

  /** OperationAdmin: ends a hold (UNKNOWN if the hold revoked a live lease, else the status it had). */
  releaseOperation(request: DeepPartial<ReleaseOperationRequest>, options?: CallOptions): Promise<ReleaseOperationResponse> {
    return this.unary(this.adminStub, this.adminStub.releaseOperation, ReleaseOperationRequest.fromPartial(request), options);
  }

  /** Runs `work` at most once to a recorded result; see runOnce.ts. */
  runOnce(
    namespace: string,
    operationKey: string,
    parameters: JsonObject | Uint8Array,
    work: Work,
    options?: RunOnceOptions,
  ): Promise<RunOnceResult> {
    return runOnce(this, namespace, operationKey, parameters, work, options);
  }

  /** Runs due operations of a namespace until `options.signal` aborts; see worker.ts. */
  runWorker(options: WorkerOptions): Promise<void> {
    return runWorker(this, options);
  }

  private unary<Req, Res>(stub: Stub, method: Unary<Req, Res>, request: Req, options: CallOptions = {}): Promise<Res> {
    const { signal } = options;
    return new Promise<Res>((resolve, reject) => {
      if (signal?.aborted) {
        reject(abortReason(signal));
        return;
      }
      const callOptions: Partial<GrpcCallOptions> = {};
      const deadline = effectiveDeadline(options, this.defaultTimeoutMs);
      if (deadline !== undefined) callOptions.deadline = deadline;
      let onAbort: (() => void) | undefined;
      const metadata = new Metadata();
      if (this.authorization !== undefined) metadata.set("authorization", this.authorization);
      injectTraceContext(metadata);
      const call = method.call(stub, request, metadata, callOptions, (error, response) => {
        if (onAbort !== undefined) signal?.removeEventListener("abort", onAbort);
        if (error === null) resolve(response);
        else if (signal?.aborted && error.code === GrpcStatus.CANCELLED) reject(abortReason(signal));
        else reject(fromServiceError(error));
      });
      if (signal !== undefined) {
        onAbort = () => call.cancel();
        signal.addEventListener("abort", onAbort, { once: true });
      }
    });
  }
}
