import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { describe, test } from "node:test";

import { canonicalJson, parametersDigest, toHex } from "../src";

interface Vector {
  name: string;
  input: string;
  canonical: string;
  sha256: string;
}

const vectors: Vector[] = JSON.parse(
  readFileSync(resolve(__dirname, "..", "..", "..", "testdata", "parameter_digests.json"), "utf8"),
);

describe("parameter digests match the shared vectors", () => {
  test("there are vectors", () => assert.ok(vectors.length >= 10));
  for (const vector of vectors) {
    test(vector.name, () => {
      const input = JSON.parse(vector.input);
      assert.equal(canonicalJson(input), vector.canonical);
      assert.equal(toHex(parametersDigest(input)), vector.sha256);
    });
  }
});

describe("canonical JSON refuses what JSON cannot say", () => {
  test("NaN and infinities", () => {
    assert.throws(() => canonicalJson({ a: NaN }), TypeError);
    assert.throws(() => canonicalJson({ a: [Infinity] }), TypeError);
    assert.throws(() => parametersDigest({ a: { b: -Infinity } }), TypeError);
  });
  test("non-JSON values and lone surrogates", () => {
    assert.throws(() => canonicalJson({ a: 1n } as never), TypeError);
    assert.throws(() => canonicalJson({ a: new Date() } as never), TypeError);
    assert.throws(() => canonicalJson({ a: "\ud800" }), TypeError);
  });
  test("parameters must be an object", () => {
    assert.throws(() => parametersDigest([1] as never), TypeError);
  });
  test("undefined members are dropped like null ones", () => {
    assert.equal(canonicalJson({ b: undefined, a: { c: null, d: [null] } }), '{"a":{"d":[null]}}');
  });
});
