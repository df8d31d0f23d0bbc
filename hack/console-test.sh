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
# kubectl of the local control plane (make puts it on PATH; direct runs too).
export PATH="$repo/.flowline/bin:$PATH"

for tool in chromium chromedriver; do
  command -v "$tool" >/dev/null || {
    echo "console-test: $tool is missing (apt-get install -y chromium chromium-driver; .ci/run does it)" >&2
    exit 1
  }
done
"$repo/hack/python-deps.sh"
# axe-core, for the accessibility check of every page the scenarios screenshot.
axe="$("$repo/hack/npm-deps.sh")/node_modules/axe-core/axe.min.js"

# shellcheck source=lib/local-server.sh
source "$repo/hack/lib/local-server.sh"

rm -rf "$out" && mkdir -p "$out/screenshots"
ns="flowline-console-$RANDOM$RANDOM"
kubectl create namespace "$ns" >/dev/null
operator_pid=
trap 'kill "${operator_pid:-}" 2>/dev/null || true; kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1 || true' EXIT
# The run page polls once a second: the pro plan keeps the test clear of the limiter.
kubectl annotate namespace "$ns" flowline.io/plan=pro >/dev/null
admin_key=$("$flowline" api-key create --namespace "$ns" --name console-admin --scopes admin 2>/dev/null)
read_key=$("$flowline" api-key create --namespace "$ns" --name console-reader --scopes read 2>/dev/null)

port=$(free_port)
# Its own namespace and lease, so it never competes with another operator; http://
# and loopback allowed so that webhooks reach the test's local receiver.
# Container steps need the step image the local cluster's node holds (make images).
step_image=()
[ -f "$repo/.flowline/cluster/step-image" ] && step_image=(--step-image "$(cat "$repo/.flowline/cluster/step-image")")
"$flowline" operator --listen "127.0.0.1:$port" --watch-namespace "$ns" \
  --leader-election-namespace "$ns" --leader-election-lease console-test \
  --allow-http --allow-cidr 127.0.0.0/8 "${step_image[@]}" >"$out/operator.log" 2>&1 &
operator_pid=$!
wait_ready "$port" "$operator_pid" "$out/operator.log"

FLOWLINE_CONSOLE_URL="http://127.0.0.1:$port" FLOWLINE_CONSOLE_NAMESPACE="$ns" FLOWLINE_ADMIN_KEY="$admin_key" \
  FLOWLINE_READ_KEY="$read_key" FLOWLINE_CONSOLE_OUT="$out" FLOWLINE_AXE="$axe" \
  "$venv/bin/python" "$repo/tests/console/test_console.py" "$@"
