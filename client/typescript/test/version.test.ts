// The package's version: package.json, the exported VERSION and the repository's
// VERSION file agree.
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { VERSION } from "../src";
import { PACKAGE_ROOT, REPO_ROOT } from "./server";

const packageVersion = (JSON.parse(readFileSync(join(PACKAGE_ROOT, "package.json"), "utf8")) as { version: string }).version;
const versionFile = join(REPO_ROOT, "VERSION");

test("VERSION is package.json's version", () => {
  assert.equal(VERSION, packageVersion);
});

test("package.json's version is the repository's VERSION", { skip: existsSync(versionFile) ? false : `no ${versionFile}` }, () => {
  assert.equal(packageVersion, readFileSync(versionFile, "utf8").trim());
});
