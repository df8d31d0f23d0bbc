#!/usr/bin/env bash
# The OpenAPI document as client authors use it, against a running `flowline operator`
# (controllers and API). openapi-spec-validator validates the served /v1/openapi.json;
# redocly (`recommended`) and spectral (`spectral:oas`) lint it, configured in hack/npm/,
# a warning failing as an error does. Then three clients generated from it drive a
# session, each failing on any answer the document does not promise: Python
# (openapi-python-client, warnings are failures; hack/client-scenario.py), TypeScript
# (openapi-typescript types for openapi-fetch, strict tsc, no casts; hack/client-ts)
# and Go (oapi-codegen; hack/client-go). Each lint and client runs even when another
# failed, so one run shows every problem; the script fails at the end if any did.
# Generated code and builds go to .flowline/client-test. Needs a cluster (KUBECONFIG)
# with the CRDs installed, a built target/debug/flowline, node and go.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
venv="$repo/.flowline/venv"
work="$repo/.flowline/client-test"
doc="$work/openapi.json"

"$repo/hack/python-deps.sh"
npm_bin="$("$repo/hack/npm-deps.sh")/node_modules/.bin"
# shellcheck source-path=SCRIPTDIR source=lib/serve-flowline.sh
. "$repo/hack/lib/serve-flowline.sh"
# Container steps (the sessions read a step's log) need the local cluster's real node
# and its images (make cluster images); without a real node the sessions say they
# leave logs out.
step_image=()
if [ -f "$repo/.flowline/cluster/step-image" ]; then
  step_image=(--step-image "$(cat "$repo/.flowline/cluster/step-image")")
  export FLOWLINE_TOOLBOX_IMAGE=flowline.local/toolbox:1
fi
serve_flowline client-test operator "${step_image[@]}"

rm -rf "$work" && mkdir -p "$work"
curl -fsS "$FLOWLINE_URL/v1/openapi.json" -o "$doc"
"$venv/bin/openapi-spec-validator" "$doc"

# Redocly's exit code counts errors only, so its JSON report decides: every problem is
# printed and fails (so does a report that cannot be read, shown with redocly's log).
# Tests send no telemetry.
redocly_lint() {
  REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true "$npm_bin/redocly" lint \
    --config "$repo/hack/npm/redocly.yaml" --lint-config error --format json --max-problems 10000 \
    "$doc" >"$work/redocly.json" 2>"$work/redocly.log" || true
  node -e '
    const fs = require("fs");
    let report;
    try { report = JSON.parse(fs.readFileSync(process.argv[1], "utf8")); }
    catch { process.stderr.write(fs.readFileSync(process.argv[2], "utf8")); process.exit(1); }
    for (const p of report.problems) {
      const where = p.location.map((l) => l.pointer).join(" ");
      console.error("redocly: " + [p.severity, p.ruleId, "at", where + ":", p.message].join(" "));
    }
    process.exit(report.problems.length === 0 ? 0 : 1);
  ' "$work/redocly.json" "$work/redocly.log"
}

spectral_lint() {
  "$npm_bin/spectral" lint --ruleset "$repo/hack/npm/spectral.yaml" --fail-severity warn --quiet "$doc"
}

python_client() {
  # No post hooks: they would format the client with ruff, which is not needed to run it.
  echo 'post_hooks: []' >"$work/generator.yaml"
  "$venv/bin/openapi-python-client" generate --path "$doc" --config "$work/generator.yaml" \
    --output-path "$work/flowline_client" --meta none --fail-on-warning >"$work/generate.log" 2>&1 \
    || { cat "$work/generate.log" >&2; return 1; }
  PYTHONPATH="$work" "$venv/bin/python" "$repo/hack/client-scenario.py" "$FLOWLINE_URL" "$FLOWLINE_KEY"
}

# The session and its tsconfig are copied next to the generated types, with the pinned
# npm tools as node_modules, so that tsc and node both resolve openapi-fetch there. tsc
# type-checks (noEmitOnError) and compiles; node runs the ES module it wrote.
typescript_client() {
  local ts="$work/ts"
  mkdir -p "$ts"
  cp "$repo"/hack/client-ts/{package.json,tsconfig.json,scenario.ts} "$ts/"
  ln -sfn "$(dirname "$npm_bin")" "$ts/node_modules"
  "$npm_bin/openapi-typescript" "$doc" --output "$ts/flowline.ts" >"$work/openapi-typescript.log" 2>&1 \
    || { cat "$work/openapi-typescript.log" >&2; return 1; }
  "$npm_bin/tsc" --project "$ts"
  node "$ts/scenario.js" "$FLOWLINE_URL" "$FLOWLINE_KEY"
}

# A module of its own, copied next to the generated code: its go.sum pins oapi-codegen
# (a `tool` of the module) and the runtime; GOWORK=off keeps hack/k8s's modules apart.
go_client() {
  local dir="$work/go"
  mkdir -p "$dir"
  cp "$repo"/hack/client-go/{go.mod,go.sum,oapi-codegen.yaml,main.go} "$dir/"
  cd "$dir"
  export GOWORK=off GOTOOLCHAIN=local
  go tool oapi-codegen -config oapi-codegen.yaml "$doc"
  go build -buildvcs=false -o session .
  ./session "$FLOWLINE_URL" "$FLOWLINE_KEY"
}

# stage NAME: runs the function NAME in a subshell with errexit, outside any condition
# (where bash would ignore errexit), and notes a failure instead of stopping.
failed=()
stage() {
  set +e
  (set -e; "$1")
  local status=$?
  set -e
  if [ "$status" = 0 ]; then
    echo "[client-test] $1: ok"
  else
    failed+=("$1")
    echo "[client-test] $1: FAILED" >&2
  fi
}
stage redocly_lint
stage spectral_lint
stage python_client
stage typescript_client
stage go_client
[ ${#failed[@]} = 0 ] || { echo "[client-test] failed: ${failed[*]}" >&2; exit 1; }
