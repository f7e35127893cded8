// Thin promise wrappers over the generated grpc-js stub: one method per RPC,
// each with an optional AbortSignal and deadline, failing with typed errors.
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
  ClaimRequest,
  CompleteRequest,
  FencedWriteRequest,
  GetResourceRequest,
  LookupRequest,
  OperationRegistryClient,
  RenewRequest,
  type ClaimResponse,
  type CompleteResponse,
  type DeepPartial,
  type FencedWriteResponse,
  type GetResourceResponse,
  type LookupResponse,
  type RenewResponse,
} from "./gen/opreg/v1/registry";
import { runOnce, type RunOnceOptions, type RunOnceResult, type Work } from "./runOnce";
import type { JsonObject } from "./digest";
import { abortReason } from "./time";

/** Per-call options of every wrapper. */
export interface CallOptions {
  /** Cancels the call; the promise rejects with the signal's reason. */
  signal?: AbortSignal;
  /** Absolute deadline (a Date or epoch milliseconds); DEADLINE_EXCEEDED after it. */
  deadline?: Date | number;
  /** Relative deadline in milliseconds; the earlier of this and `deadline` applies. */
  timeoutMs?: number;
}

export interface OpregClientOptions {
  /** Default: insecure (plaintext), as the server listens. */
  credentials?: ChannelCredentials;
  /** grpc-js client options, e.g. `interceptors` or channel arguments. */
  clientOptions?: Partial<ClientOptions>;
  /** Relative deadline applied to calls given neither `deadline` nor `timeoutMs`. */
  defaultTimeoutMs?: number;
}

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
  private readonly defaultTimeoutMs: number | undefined;

  /** `address` is `host:port`; a leading `http://` is accepted and ignored. */
  constructor(address: string, options: OpregClientOptions = {}) {
    const target = address.replace(/^http:\/\//, "");
    this.stub = new OperationRegistryClient(
      target,
      options.credentials ?? grpcCredentials.createInsecure(),
      options.clientOptions,
    );
    this.defaultTimeoutMs = options.defaultTimeoutMs;
  }

  /** Closes the channel. */
  close(): void {
    this.stub.close();
  }

  /** Registers an operation, or says what to do about an existing one. */
  claim(request: DeepPartial<ClaimRequest>, options?: CallOptions): Promise<ClaimResponse> {
    return this.unary(this.stub.claim, ClaimRequest.fromPartial(request), options);
  }

  /** Records the outcome of the execution holding `fencingToken`. Repeating it is safe. */
  complete(request: DeepPartial<CompleteRequest>, options?: CallOptions): Promise<CompleteResponse> {
    return this.unary(this.stub.complete, CompleteRequest.fromPartial(request), options);
  }

  /** Reads an operation and, optionally, its executions. */
  lookup(request: DeepPartial<LookupRequest>, options?: CallOptions): Promise<LookupResponse> {
    return this.unary(this.stub.lookup, LookupRequest.fromPartial(request), options);
  }

  /** Extends the lease of the current holder. */
  renew(request: DeepPartial<RenewRequest>, options?: CallOptions): Promise<RenewResponse> {
    return this.unary(this.stub.renew, RenewRequest.fromPartial(request), options);
  }

  /** Writes a protected resource; refused (StaleFencingTokenError) for a superseded token. */
  fencedWrite(request: DeepPartial<FencedWriteRequest>, options?: CallOptions): Promise<FencedWriteResponse> {
    return this.unary(this.stub.fencedWrite, FencedWriteRequest.fromPartial(request), options);
  }

  /** Reads a protected resource. */
  getResource(request: DeepPartial<GetResourceRequest>, options?: CallOptions): Promise<GetResourceResponse> {
    return this.unary(this.stub.getResource, GetResourceRequest.fromPartial(request), options);
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

  private unary<Req, Res>(method: Unary<Req, Res>, request: Req, options: CallOptions = {}): Promise<Res> {
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
      const call = method.call(this.stub, request, new Metadata(), callOptions, (error, response) => {
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
