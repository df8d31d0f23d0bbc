#!/usr/bin/env bash
# End-to-end tests of the web console: Python selenium drives headless Chromium
# (Debian's chromium + chromium-driver) against a real `flowline operator` on the
# local control plane, in a fresh namespace with an admin and a read-only key.
# Screenshots of every page land in .flowline/console-test/screenshots/.
# Needs a cluster (KUBECONFIG) with the CRDs installed, and a built target/debug/flowline.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
venv="$repo/.flowline/venv"
flowline="$repo/target/debug/flowline"
out="$repo/.flowline/console-test"

for tool in chromium chromedriver; do
  command -v "$tool" >/dev/null || {
    echo "console-test: $tool is missing (apt-get install -y chromium chromium-driver; .ci/run does it)" >&2
    exit 1
  }
done
"$repo/hack/python-deps.sh"

ns="flowline-console-$RANDOM$RANDOM"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
operator_pid=
cleanup() {
  [ -n "$operator_pid" ] && kill "$operator_pid" 2>/dev/null || true
  kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1 || true
}
trap cleanup EXIT

rm -rf "$out" && mkdir -p "$out/screenshots"
kubectl create namespace "$ns" >/dev/null
# The run page polls once a second: the pro plan keeps the test clear of the limiter.
kubectl annotate namespace "$ns" flowline.io/plan=pro >/dev/null
admin_key=$("$flowline" api-key create --namespace "$ns" --name console-admin --scopes admin 2>/dev/null)
read_key=$("$flowline" api-key create --namespace "$ns" --name console-reader --scopes read 2>/dev/null)

# Its own namespace and lease, so it never competes with another operator; http://
# and loopback allowed so that webhooks reach the test's local receiver.
"$flowline" operator --listen "127.0.0.1:$port" --watch-namespace "$ns" \
  --leader-election-namespace "$ns" --leader-election-lease console-test \
  --allow-http --allow-cidr 127.0.0.0/8 >"$out/operator.log" 2>&1 &
operator_pid=$!
for _ in $(seq 150); do
  curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  kill -0 "$operator_pid" 2>/dev/null || { cat "$out/operator.log" >&2; exit 1; }
  sleep 0.2
done
curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null

FLOWLINE_CONSOLE_URL="http://127.0.0.1:$port" FLOWLINE_ADMIN_KEY="$admin_key" \
  FLOWLINE_READ_KEY="$read_key" FLOWLINE_CONSOLE_OUT="$out" \
  "$venv/bin/python" "$repo/tests/console/test_console.py" "$@"
