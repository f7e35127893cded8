// Regenerates parameter_digests.json with an implementation independent of the
// server's: ECMAScript's own JSON.stringify for numbers and strings, and
// Array.prototype.sort (UTF-16 code unit order) for member names, with null
// object members dropped. Run: node client/testdata/generate_parameter_digests.mjs
import { createHash } from "node:crypto";
import { writeFileSync } from "node:fs";

function canonical(value) {
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const names = Object.keys(value).filter((name) => value[name] !== null).sort();
    return `{${names.map((name) => `${JSON.stringify(name)}:${canonical(value[name])}`).join(",")}}`;
  }
  return JSON.stringify(value);
}

const cases = [
  ["flat object", '{"amount": 100, "account": "A"}'],
  ["member order does not matter", '{"account": "A", "amount": 100}'],
  ["integral float equals integer", '{"amount": 100.0}'],
  ["different amount", '{"amount": 101}'],
  ["nested objects sort at every depth", '{"b": {"y": 1, "x": [3, {"d": 1, "c": 2}]}, "a": true}'],
  ["null members are dropped at every depth", '{"a": null, "b": {"c": null, "d": 1}}'],
  ["null inside arrays is kept", '{"list": [null, 1, null]}'],
  ["empty object", "{}"],
  ["exponent formatting", '{"big": 1e21, "small": 1e-7, "edge": 1e20, "tiny": 0.000001}'],
  ["negative zero prints as zero", '{"z": -0.0}'],
  ["binary fractions round-trip", '{"sum": 0.30000000000000004, "pi": 3.141592653589793}'],
  ["large integers as doubles", '{"n": 123456789012345678901, "max_safe": 9007199254740991}'],
  ["string escapes", '{"s": "quote\\" backslash\\\\ slash/ tab\\t nl\\n ctl\\u0001 del\\u007f"}'],
  ["non-ASCII text stays literal", '{"name": "Zoë 東京 \\u2028"}'],
  ["names sort by UTF-16 code units", '{"\\ufb33": 1, "\\ud83d\\ude00": 2, "a": 3, "\\u00e9": 4}'],
  ["booleans and arrays", '{"flags": [true, false], "empty": []}'],
  ["shortest digits on a rounding tie", '{"n": -272609761866344381, "m": 2.5e-323}'],
];

const vectors = cases.map(([name, input]) => {
  const text = canonical(JSON.parse(input));
  return { name, input, canonical: text, sha256: createHash("sha256").update(text, "utf8").digest("hex") };
});
writeFileSync(new URL("./parameter_digests.json", import.meta.url), JSON.stringify(vectors, null, 2) + "\n");
