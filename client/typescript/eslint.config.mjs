// ESLint for the hand-written TypeScript (`npm run lint`, run by ci.sh):
// ESLint's and typescript-eslint's recommended rules. The generated stubs
// (src/gen, from proto/ by buf) and the build output are not linted.
import eslint from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["dist/", "node_modules/", "src/gen/"] },
  eslint.configs.recommended,
  tseslint.configs.recommended,
  {
    rules: {
      // A leading underscore marks what is unused on purpose (compile-time checks).
      "@typescript-eslint/no-unused-vars": ["error", { varsIgnorePattern: "^_" }],
    },
  },
  {
    // The examples run as plain Node.js scripts.
    files: ["examples/**/*.mjs", "scripts/**/*.mjs"],
    languageOptions: { globals: { console: "readonly", process: "readonly" } },
  },
);
