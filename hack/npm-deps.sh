#!/usr/bin/env bash
# The npm tools the tests use, pinned by hack/npm/package-lock.json and installed with
# `npm ci` into .flowline/npm (outside the tree): redocly and spectral lint the OpenAPI
# document, openapi-typescript, openapi-fetch and tsc build the TypeScript client
# (make client-test), axe-core checks the console's accessibility (make console-test).
# Idempotent: reinstalls only when the lock file changed. Prints the install directory.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
dir="$repo/.flowline/npm"
mkdir -p "$dir"
if ! cmp -s "$repo/hack/npm/package-lock.json" "$dir/package-lock.json" || [ ! -d "$dir/node_modules" ]; then
  echo "[npm] installing the test tools into $dir" >&2
  cp "$repo/hack/npm/package.json" "$repo/hack/npm/package-lock.json" "$dir/"
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2)
fi
echo "$dir"
