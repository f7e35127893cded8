// Encodes a google.rpc.Status with an opreg ErrorInfo (and a RetryInfo), as the
// server sends it in the grpc-status-details-bin trailer, and the ServiceError
// grpc-js makes of it (for tests that synthesize errors).
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { Metadata, status as GrpcStatus, type ServiceError } from "@grpc/grpc-js";
// Not part of grpc-js's public API, but what it calls on every failed call: the
// synthesized error is then exactly the one a real call would be answered.
import { callErrorFromStatus } from "@grpc/grpc-js/build/src/call";

import { ERROR_DOMAIN, STATUS_DETAILS_KEY } from "../src";

export const ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo";
export const RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo";

export type Detail = [typeUrl: string, value: Uint8Array];

export function encodeErrorInfo(reason: string, metadata: Record<string, string> = {}): Uint8Array {
  const writer = new BinaryWriter();
  writer.tag(1, WireType.LengthDelimited).string(reason);
  writer.tag(2, WireType.LengthDelimited).string(ERROR_DOMAIN);
  for (const [k, v] of Object.entries(metadata)) {
    writer.tag(3, WireType.LengthDelimited).fork();
    writer.tag(1, WireType.LengthDelimited).string(k);
    writer.tag(2, WireType.LengthDelimited).string(v);
    writer.join();
  }
  return writer.finish();
}

export function encodeRetryInfo(ms: number): Uint8Array {
  const writer = new BinaryWriter();
  writer.tag(1, WireType.LengthDelimited).fork();
  writer.tag(1, WireType.Varint).int64(Math.floor(ms / 1000));
  writer.tag(2, WireType.Varint).int32((ms % 1000) * 1_000_000);
  writer.join();
  return writer.finish();
}

export function encodeRpcStatus(code: number, message: string, details: Detail[]): Uint8Array {
  const writer = new BinaryWriter();
  writer.tag(1, WireType.Varint).int32(code);
  writer.tag(2, WireType.LengthDelimited).string(message);
  for (const [typeUrl, value] of details) {
    writer.tag(3, WireType.LengthDelimited).fork();
    writer.tag(1, WireType.LengthDelimited).string(typeUrl);
    writer.tag(2, WireType.LengthDelimited).bytes(value);
    writer.join();
  }
  return writer.finish();
}

export function encodeStatus(code: number, message: string, reason: string, metadata: Record<string, string> = {}): Uint8Array {
  return encodeRpcStatus(code, message, [[ERROR_INFO, encodeErrorInfo(reason, metadata)]]);
}

/** The ServiceError grpc-js hands a call's callback for status `code`; the trailer only when there are `details`. */
export function failedCall(code: GrpcStatus, message: string, details: Detail[] = []): ServiceError {
  const metadata = new Metadata();
  if (details.length > 0) metadata.set(STATUS_DETAILS_KEY, Buffer.from(encodeRpcStatus(code, message, details)));
  return callErrorFromStatus({ code, details: message, metadata }, "");
}
