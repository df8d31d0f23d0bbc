#!/usr/bin/env bash
# Fuzzes the running API with schemathesis against the OpenAPI document it serves:
# no 5xx, and every response must match the document (status, headers, body).
# Needs a cluster (KUBECONFIG) with the CRDs installed, and a built target/debug/flowline.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
examples=${FUZZ_EXAMPLES:-25}
venv="$repo/.flowline/venv"
flowline="$repo/target/debug/flowline"

"$repo/hack/python-deps.sh"

ns="flowline-fuzz-$RANDOM$RANDOM"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
  kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1 || true
}
trap cleanup EXIT

kubectl create namespace "$ns" >/dev/null
# A generous plan: this run is about correctness, not about the rate limiter.
kubectl annotate namespace "$ns" flowline.io/plan=enterprise flowline.io/requests-per-minute=100000000 >/dev/null
key=$("$flowline" api-key create --namespace "$ns" --name fuzz --scopes admin 2>/dev/null)
"$flowline" api --listen "127.0.0.1:$port" >"$repo/.flowline/fuzz-api.log" 2>&1 &
server_pid=$!
for _ in $(seq 150); do
  curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$repo/.flowline/fuzz-api.log" >&2; exit 1; }
  sleep 0.2
done

# positive_data_acceptance is left out on purpose: a schema cannot say which cursor
# strings or time-zone names exist, so valid-looking values are rightly refused.
# Unauthenticated probes are left out too: they are rate limited per address, and a
# 429 there is the contract, not a failure.
cd "$repo/.flowline"
"$venv/bin/schemathesis" run "http://127.0.0.1:$port/v1/openapi.json" \
  -H "Authorization: Bearer $key" --max-examples "$examples" \
  --checks not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance \
  --max-failures 20
