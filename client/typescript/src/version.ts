/** The version of this package: the repository's VERSION (checked by test/version.test.ts and ci.sh). */
export const VERSION = "0.1.0";
