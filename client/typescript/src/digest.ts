// Parameter digests, computed exactly as the server computes them from a
// google.protobuf.Struct: RFC 8785 (JSON Canonicalization Scheme) text of the
// parameters with object members whose value is null dropped at every depth
// (null inside arrays is kept), hashed with SHA-256.
import { createHash } from "node:crypto";

/** A JSON value as accepted in operation parameters. `undefined` is treated like null. */
export type JsonValue = null | undefined | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };
export type JsonObject = { [key: string]: JsonValue };

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Strings travel as UTF-8 in protobuf: a lone surrogate cannot, so it is refused. */
function quote(text: string, path: string): string {
  if (LONE_SURROGATE.test(text)) throw new TypeError(`${path}: string has a lone UTF-16 surrogate`);
  return JSON.stringify(text);
}

function isPlainObject(value: object): boolean {
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

function write(value: unknown, path: string, out: string[]): void {
  if (value === null || value === undefined) {
    out.push("null");
    return;
  }
  switch (typeof value) {
    case "boolean":
      out.push(value ? "true" : "false");
      return;
    case "number":
      if (!Number.isFinite(value)) throw new TypeError(`${path}: ${value} is not a valid JSON number`);
      // ECMAScript Number-to-String: what RFC 8785 prescribes (-0 prints as 0).
      out.push(JSON.stringify(value));
      return;
    case "string":
      // JSON.stringify escapes exactly as RFC 8785 does: \" \\ \b \f \n \r \t,
      // other controls as \u00xx; everything else literal.
      out.push(quote(value, path));
      return;
    case "object":
      break;
    default:
      throw new TypeError(`${path}: a ${typeof value} is not a JSON value`);
  }
  if (Array.isArray(value)) {
    out.push("[");
    value.forEach((item, index) => {
      if (index > 0) out.push(",");
      write(item, `${path}[${index}]`, out);
    });
    out.push("]");
    return;
  }
  if (!isPlainObject(value as object)) {
    throw new TypeError(`${path}: only plain objects and arrays are JSON values`);
  }
  const record = value as Record<string, unknown>;
  // Default sort compares UTF-16 code units, as RFC 8785 requires.
  const names = Object.keys(record)
    .filter((name) => record[name] !== null && record[name] !== undefined)
    .sort();
  out.push("{");
  names.forEach((name, index) => {
    if (index > 0) out.push(",");
    out.push(quote(name, path), ":");
    write(record[name], `${path}.${name}`, out);
  });
  out.push("}");
}

/**
 * The canonical text of a JSON value: RFC 8785 with null object members dropped
 * at every depth. Throws a TypeError for NaN, infinities and non-JSON values.
 */
export function canonicalJson(value: JsonValue): string {
  const out: string[] = [];
  write(value, "$", out);
  return out.join("");
}

/** SHA-256 of `canonicalJson(parameters)`: the digest the server stores for these parameters. */
export function parametersDigest(parameters: JsonObject): Uint8Array {
  if (parameters === null || typeof parameters !== "object" || Array.isArray(parameters)) {
    throw new TypeError("parameters must be a JSON object");
  }
  const digest = createHash("sha256").update(canonicalJson(parameters), "utf8").digest();
  return new Uint8Array(digest.buffer, digest.byteOffset, digest.byteLength);
}

/** Lower-case hex of a digest, as in ParameterConflictError.storedDigest / requestDigest. */
export function toHex(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("hex");
}
