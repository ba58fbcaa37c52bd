// ESLint over our browser JavaScript, static/*.js (not static/vendor/: fetched, not ours):
// @eslint/js's recommended rules, with each file's own globals. tests/test_lint.py runs it;
// scripts/setup --test installs it (package-lock.json's pins, into node_modules/).
import js from "@eslint/js";
import globals from "globals";

// Workers of the page (static/app.js and python-start.js start them as modules; files.js starts
// hash-worker.js, a classic script).
const WORKERS = ["static/python-worker.js", "static/warm-worker.js", "static/hash-worker.js"];
// The service worker: a classic script, which server/assets.py fills in (__PRECACHE__, __VERSION__).
const SERVICE_WORKER = ["static/sw.js"];
// Scripts rather than modules: paint.js is a classic <script> (it runs before the first paint).
const CLASSIC = ["static/paint.js", "static/hash-worker.js", ...SERVICE_WORKER];

export default [
  { ignores: ["static/vendor/"] },
  { files: ["static/*.js"], rules: js.configs.recommended.rules, linterOptions: { reportUnusedDisableDirectives: "error" } },
  { files: ["static/*.js"], ignores: [...WORKERS, ...SERVICE_WORKER], languageOptions: { globals: globals.browser } },
  { files: WORKERS, languageOptions: { globals: globals.worker } },
  { files: SERVICE_WORKER, languageOptions: { globals: { ...globals.serviceworker, __PRECACHE__: "readonly" } } },
  { files: CLASSIC, languageOptions: { sourceType: "script" } },
];
