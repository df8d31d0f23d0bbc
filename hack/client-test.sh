#!/usr/bin/env bash
# The OpenAPI document as client authors use it: openapi-spec-validator validates the
# served /v1/openapi.json, openapi-python-client generates a Python client from it
# (warnings are failures), and hack/client-scenario.py drives that client through a
# whole session against a running `flowline operator` (controllers and API).
# Needs a cluster (KUBECONFIG) with the CRDs installed and a built target/debug/flowline.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
venv="$repo/.flowline/venv"
work="$repo/.flowline/client-test"

"$repo/hack/python-deps.sh"
# shellcheck source=lib/serve-flowline.sh
. "$repo/hack/lib/serve-flowline.sh"
serve_flowline client-test operator

rm -rf "$work" && mkdir -p "$work"
curl -fsS "$FLOWLINE_URL/v1/openapi.json" -o "$work/openapi.json"
"$venv/bin/openapi-spec-validator" "$work/openapi.json"
# No post hooks: they would format the client with ruff, which is not needed to run it.
echo 'post_hooks: []' >"$work/generator.yaml"
"$venv/bin/openapi-python-client" generate --path "$work/openapi.json" --config "$work/generator.yaml" \
  --output-path "$work/flowline_client" --meta none --fail-on-warning >"$work/generate.log" 2>&1 \
  || { cat "$work/generate.log" >&2; exit 1; }
PYTHONPATH="$work" "$venv/bin/python" "$repo/hack/client-scenario.py" "$FLOWLINE_URL" "$FLOWLINE_KEY"
