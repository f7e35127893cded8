// Encodes a google.rpc.Status with an opreg ErrorInfo, as the server sends it in
// the grpc-status-details-bin trailer (for tests that synthesize errors).
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";

import { ERROR_DOMAIN } from "../src";

export const ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo";

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

export function encodeStatus(code: number, message: string, reason: string, metadata: Record<string, string> = {}): Uint8Array {
  const writer = new BinaryWriter();
  writer.tag(1, WireType.Varint).int32(code);
  writer.tag(2, WireType.LengthDelimited).string(message);
  writer.tag(3, WireType.LengthDelimited).fork();
  writer.tag(1, WireType.LengthDelimited).string(ERROR_INFO);
  writer.tag(2, WireType.LengthDelimited).bytes(encodeErrorInfo(reason, metadata));
  writer.join();
  return writer.finish();
}
