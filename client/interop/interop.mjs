// Interop, TypeScript side: replays what the languages named on the command
// line recorded (interop:<language>, result from-<language>), identifying the
// parameters by a digest computed here, then records its own operation.
//   node interop.mjs ADDRESS NAMESPACE LANGUAGE...
import assert from "node:assert/strict";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const { OpregClient, parametersDigest } = require("../typescript/dist/src/index.js");

const PARAMS = { payee: { a: 1, b: 2 }, tags: ["x", null], memo: null, amount: 100, order: "A-1" };
const [endpoint, namespace, ...languages] = process.argv.slice(2);
const client = new OpregClient(endpoint);
const digest = parametersDigest(PARAMS);
const mustNotRun = async () => {
  throw new Error("a recorded operation was executed again");
};

for (const language of languages) {
  const key = `interop:${language}`;
  const replay = await client.runOnce(namespace, key, digest, mustNotRun);
  assert.equal(replay.replayed, true, key);
  assert.equal(replay.text, `from-${language}`, key);
}
const mine = await client.runOnce(namespace, "interop:ts", PARAMS, async () => "from-ts");
assert.equal(mine.replayed, false);
client.close();
console.log(`typescript: replayed ${languages.map((l) => `interop:${l}`).join(", ")} by digest, recorded interop:ts`);
