// Decodes the `grpc-status-details-bin` trailer: a google.rpc.Status whose
// details are google.protobuf.Any. Only the detail types opreg sends are
// understood (ErrorInfo, BadRequest and RetryInfo); the wire format is decoded
// by hand with @bufbuild/protobuf's reader, field numbers as in googleapis:
//   google/rpc/status.proto        Status { int32 code = 1; string message = 2; repeated Any details = 3; }
//   google/protobuf/any.proto      Any { string type_url = 1; bytes value = 2; }
//   google/rpc/error_details.proto ErrorInfo { string reason = 1; string domain = 2; map<string,string> metadata = 3; }
//                                  BadRequest { repeated FieldViolation field_violations = 1; }
//                                  FieldViolation { string field = 1; string description = 2; string reason = 3; }
//                                  RetryInfo { google.protobuf.Duration retry_delay = 1; }
//   google/protobuf/duration.proto Duration { int64 seconds = 1; int32 nanos = 2; }
import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";

export const ERROR_INFO_TYPE_URL = "type.googleapis.com/google.rpc.ErrorInfo";
export const BAD_REQUEST_TYPE_URL = "type.googleapis.com/google.rpc.BadRequest";
export const RETRY_INFO_TYPE_URL = "type.googleapis.com/google.rpc.RetryInfo";

export interface ErrorInfo {
  reason: string;
  domain: string;
  metadata: Record<string, string>;
}

export interface FieldViolation {
  field: string;
  description: string;
  reason: string;
}

export interface AnyDetail {
  typeUrl: string;
  value: Uint8Array;
}

export interface RpcStatus {
  code: number;
  message: string;
  details: AnyDetail[];
  errorInfo?: ErrorInfo;
  fieldViolations: FieldViolation[];
  /** The first RetryInfo's `retry_delay` in milliseconds (undefined without one). */
  retryDelayMs?: number;
}

/** Calls `field` for each field of `bytes`, skipping unknown ones. */
function readFields(bytes: Uint8Array, field: (no: number, reader: BinaryReader) => boolean): void {
  const reader = new BinaryReader(bytes);
  while (reader.pos < reader.len) {
    const [no, wireType] = reader.tag();
    if (!field(no, reader)) reader.skip(wireType as WireType, no);
  }
}

function decodeAny(bytes: Uint8Array): AnyDetail {
  const any: AnyDetail = { typeUrl: "", value: new Uint8Array() };
  readFields(bytes, (no, r) => {
    if (no === 1) any.typeUrl = r.string();
    else if (no === 2) any.value = r.bytes();
    else return false;
    return true;
  });
  return any;
}

export function decodeErrorInfo(bytes: Uint8Array): ErrorInfo {
  const info: ErrorInfo = { reason: "", domain: "", metadata: {} };
  readFields(bytes, (no, r) => {
    if (no === 1) info.reason = r.string();
    else if (no === 2) info.domain = r.string();
    else if (no === 3) {
      let key = "";
      let value = "";
      readFields(r.bytes(), (entryNo, e) => {
        if (entryNo === 1) key = e.string();
        else if (entryNo === 2) value = e.string();
        else return false;
        return true;
      });
      info.metadata[key] = value;
    } else return false;
    return true;
  });
  return info;
}

export function decodeBadRequest(bytes: Uint8Array): FieldViolation[] {
  const violations: FieldViolation[] = [];
  readFields(bytes, (no, r) => {
    if (no !== 1) return false;
    const violation: FieldViolation = { field: "", description: "", reason: "" };
    readFields(r.bytes(), (vNo, v) => {
      if (vNo === 1) violation.field = v.string();
      else if (vNo === 2) violation.description = v.string();
      else if (vNo === 3) violation.reason = v.string();
      else return false;
      return true;
    });
    violations.push(violation);
    return true;
  });
  return violations;
}

/**
 * The `retry_delay` of a google.rpc.RetryInfo in milliseconds (never negative);
 * undefined when the RetryInfo has none.
 */
export function decodeRetryInfo(bytes: Uint8Array): number | undefined {
  let delayMs: number | undefined;
  readFields(bytes, (no, r) => {
    if (no !== 1) return false;
    let seconds = 0;
    let nanos = 0;
    readFields(r.bytes(), (dNo, d) => {
      if (dNo === 1) seconds = Number(d.int64());
      else if (dNo === 2) nanos = d.int32();
      else return false;
      return true;
    });
    delayMs = Math.max(0, seconds * 1000 + nanos / 1_000_000);
    return true;
  });
  return delayMs;
}

/** Decodes a google.rpc.Status, with its ErrorInfo, BadRequest and RetryInfo details unpacked. */
export function decodeRpcStatus(bytes: Uint8Array): RpcStatus {
  const status: RpcStatus = { code: 0, message: "", details: [], fieldViolations: [] };
  readFields(bytes, (no, r) => {
    if (no === 1) status.code = r.int32();
    else if (no === 2) status.message = r.string();
    else if (no === 3) status.details.push(decodeAny(r.bytes()));
    else return false;
    return true;
  });
  for (const detail of status.details) {
    if (detail.typeUrl === ERROR_INFO_TYPE_URL && status.errorInfo === undefined) {
      status.errorInfo = decodeErrorInfo(detail.value);
    } else if (detail.typeUrl === BAD_REQUEST_TYPE_URL) {
      status.fieldViolations.push(...decodeBadRequest(detail.value));
    } else if (detail.typeUrl === RETRY_INFO_TYPE_URL && status.retryDelayMs === undefined) {
      status.retryDelayMs = decodeRetryInfo(detail.value);
    }
  }
  return status;
}
