# Sourced by the scripts that test a running server (hack/fuzz-api.sh,
# hack/client-test.sh): a fresh account (namespace) with a generous plan and an admin
# key, and `flowline <role>` serving it on a free local port until the script exits.
# Needs a cluster (KUBECONFIG) with the CRDs installed and a built target/debug/flowline.
#
#   serve_flowline <name> <role> [flowline flags…]
#
# sets FLOWLINE_NS, FLOWLINE_URL and FLOWLINE_KEY; the server's log is
# .flowline/<name>.log. An EXIT trap stops the server and deletes the namespace.

# shellcheck source=local-server.sh
source "$(dirname "${BASH_SOURCE[0]}")/local-server.sh"

serve_flowline() {
  local name=$1 role=$2
  shift 2
  local repo
  repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  local flowline="$repo/target/debug/flowline" log="$repo/.flowline/$name.log" port
  FLOWLINE_NS="flowline-$name-$RANDOM$RANDOM"
  port=$(free_port)
  FLOWLINE_URL="http://127.0.0.1:$port"
  _flowline_server_pid=
  trap _flowline_stop EXIT

  kubectl create namespace "$FLOWLINE_NS" >/dev/null
  # A generous plan: these runs are about behaviour, not about the rate limiter.
  kubectl annotate namespace "$FLOWLINE_NS" flowline.io/plan=enterprise \
    flowline.io/requests-per-minute=100000000 >/dev/null
  FLOWLINE_KEY=$("$flowline" api-key create --namespace "$FLOWLINE_NS" --name "$name" --scopes admin 2>/dev/null)
  # Its own namespace and, for an operator, its own lease: nothing else on the cluster
  # is served or led. (`flowline api` has no leader-election flags and refuses them.)
  local own=(--watch-namespace "$FLOWLINE_NS")
  [ "$role" = operator ] && own+=(--leader-election-namespace "$FLOWLINE_NS")
  "$flowline" "$role" --listen "127.0.0.1:$port" "${own[@]}" "$@" >"$log" 2>&1 &
  _flowline_server_pid=$!
  wait_ready "$port" "$_flowline_server_pid" "$log"
}

_flowline_stop() {
  [ -n "${_flowline_server_pid:-}" ] && kill "$_flowline_server_pid" 2>/dev/null || true
  kubectl delete namespace "$FLOWLINE_NS" --wait=false >/dev/null 2>&1 || true
}
