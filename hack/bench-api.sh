#!/usr/bin/env bash
# make bench-api: reads through /v1 (served from watch caches by a release build of
# `flowline api`) against the same reads straight from kube-apiserver, with one load
# generator (wrk), one concurrency and one duration for both. Prints a table with
# ratios; docs/benchmarks.md records a run. Not a test.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
concurrency=${BENCH_CONCURRENCY:-16}
duration=${BENCH_DURATION:-8s}
flowline="$repo/target/release/flowline"

command -v wrk >/dev/null || { echo "[bench] installing wrk" >&2; apt-get install -y -qq wrk >/dev/null; }
(cd "$repo" && cargo build --release --quiet)
# The second reference: a bare axum server answering the same bytes from memory.
bare_bin=$(cd "$repo" && cargo build --release --quiet --bench bare_axum --message-format=json |
  python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "bare_axum" and m.get("executable"):
        print(m["executable"])')

ns="bench-api-$RANDOM"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
servers=()
bare_pids=()
cleanup() {
  for pid in "${servers[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${bare_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1 || true
  kubectl delete clusterrolebinding "$ns" >/dev/null 2>&1 || true
}
trap cleanup EXIT

kubectl create namespace "$ns" >/dev/null
kubectl annotate namespace "$ns" flowline.io/plan=enterprise flowline.io/requests-per-minute=1000000000 >/dev/null
for i in $(seq -w 0 99); do
  printf 'apiVersion: flowline.io/v1\nkind: Workflow\nmetadata: {name: wf-%s}\nspec:\n  name: Bench %s\n  steps:\n  - {id: a, action: delay, with: {ms: 1}}\n  - {id: b, action: transform, with: {value: x}}\n---\n' "$i" "$i"
done | kubectl apply -n "$ns" -f - >/dev/null
key=$("$flowline" api-key create --namespace "$ns" --name bench --scopes read 2>/dev/null)
# wrk cannot present client certificates: the apiserver is read with a bearer token.
kubectl create serviceaccount bench -n "$ns" >/dev/null
kubectl create clusterrole flowline-bench-read --verb=get,list --resource=workflows.flowline.io >/dev/null 2>&1 || true
kubectl create clusterrolebinding "$ns" --clusterrole=flowline-bench-read --serviceaccount="$ns:bench" >/dev/null
token=$(kubectl create token bench -n "$ns")
apiserver=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')

# Starts one `flowline api` on $1, logging to $2, and waits until it answers.
start_api() {
  TOKIO_WORKER_THREADS=${BENCH_SERVER_THREADS:-1} "$flowline" api --listen "127.0.0.1:$1" >"$2" 2>&1 &
  servers+=($!)
  until curl -fsS -H "Authorization: Bearer $key" "http://127.0.0.1:$1/v1/workflows/wf-42" >/dev/null 2>&1; do
    kill -0 "${servers[-1]}" || { cat "$2" >&2; exit 1; }
    sleep 0.2
  done
}
start_api "$port" "$repo/.flowline/bench-api.log"

# Prints "req/s p50_ms p99_ms" for one URL.
measure() {
  wrk -t"${BENCH_THREADS:-1}" -c"$concurrency" -d"$duration" --latency -H "Authorization: Bearer $2" "$1" | awk '
    function ms(v) { if (v ~ /us$/) return v/1000; if (v ~ /ms$/) return v+0; if (v ~ /s$/) return v*1000; return v }
    $1 == "50%" { p50 = ms($2) } $1 == "99%" { p99 = ms($2) } $1 == "Requests/sec:" { rps = $2 }
    END { printf "%s %.2f %.2f\n", rps, p50, p99 }'
}

# Starts a bare server answering what /v1 answers at $1; sets bare_url.
bare_for() {
  local body="$repo/.flowline/bench-api-body-${#bare_pids[@]}.json" bare_port
  curl -fsS -H "Authorization: Bearer $key" "$1" >"$body"
  bare_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  BARE_BODY="$body" BARE_LISTEN="127.0.0.1:$bare_port" TOKIO_WORKER_THREADS=${BENCH_SERVER_THREADS:-1} \
    "$bare_bin" >>"$repo/.flowline/bench-api.log" 2>&1 &
  bare_pids+=($!)
  bare_url="http://127.0.0.1:$bare_port/"
  until curl -fsS "$bare_url" >/dev/null 2>&1; do sleep 0.1; done
}

rounds=${BENCH_ROUNDS:-3}
echo "wrk, ${BENCH_THREADS:-1} thread, $concurrency connections, $duration per measurement, 100 workflows;"
echo "/v1 and bare axum warmed up, then measured in $rounds alternating rounds: the row shows the round"
echo "with the median ratio, and the last column every round's ratio (this machine's noise)"
echo
echo "| read | /v1 req/s | /v1 p50 ms | /v1 p99 ms | apiserver req/s | apiserver p50 ms | apiserver p99 ms | req/s ratio | p99 ratio | bare axum req/s | bare axum p99 ms | /v1 vs bare req/s | rounds |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
# A few seconds of load a measurement does not count: first requests pay for lazily
# built state (connections, metric series, allocator pools) in both servers.
warm() {
  wrk -t1 -c"$concurrency" -d2s -H "Authorization: Bearer $2" "$1" >/dev/null
}
row() {
  bare_for "$2"
  warm "$2" "$key"
  warm "$bare_url" none
  # Alternating rounds: both servers see the same spells of load from the rest of the
  # machine, and the median round is the figure.
  local all="" a_rps a_p50 a_p99 b_rps b_p99
  for _ in $(seq "$rounds"); do
    read -r a_rps a_p50 a_p99 <<<"$(measure "$2" "$key")"
    read -r b_rps _ b_p99 <<<"$(measure "$bare_url" none)"
    all+="$a_rps $a_p50 $a_p99 $b_rps $b_p99"$'\n'
  done
  read -r d_rps d_p50 d_p99 <<<"$(measure "$3" "$token")"
  printf '%s' "$all" | awk -v w="$1" -v dr="$d_rps" -v d5="$d_p50" -v d9="$d_p99" '
    NF == 5 { n++; ar[n] = $1; a5[n] = $2; a9[n] = $3; br[n] = $4; b9[n] = $5; r[n] = $1 / $4 }
    END {
      for (i = 1; i <= n; i++) { o[i] = i }
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (r[o[j]] < r[o[i]]) { t = o[i]; o[i] = o[j]; o[j] = t }
      m = o[int((n + 1) / 2)]
      each = ""
      for (i = 1; i <= n; i++) each = each (i > 1 ? ", " : "") sprintf("%.2fx", r[i])
      printf "| %s | %.0f | %.2f | %.2f | %.0f | %.2f | %.2f | %.1fx | %.1fx | %.0f | %.2f | %.2fx | %s |\n",
        w, ar[m], a5[m], a9[m], dr, d5, d9, ar[m] / dr, d9 / a9[m], br[m], b9[m], r[m], each
    }'
}
row "one workflow" "http://127.0.0.1:$port/v1/workflows/wf-42" "$apiserver/apis/flowline.io/v1/namespaces/$ns/workflows/wf-42"
row "list of 100" "http://127.0.0.1:$port/v1/workflows?limit=100" "$apiserver/apis/flowline.io/v1/namespaces/$ns/workflows?limit=100"

# API replicas: the single GET against one `flowline api` process and against two (each
# a release build with the same one worker thread, both on this machine, caching the
# same objects). The load is split on the client side: two wrk processes of half the
# connections each run at once, both at the one process (N=1) or one at each (N=2) —
# client-side round-robin by connection, no balancer in between. The figure is their
# summed requests/s. Both N use the same two load generators, so only the number of
# servers changes; on a two-core machine the servers and wrk share the cores.
port2=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
start_api "$port2" "$repo/.flowline/bench-api-2.log"

# Prints the summed req/s of two wrk processes at $1 and $2, at once.
measure_pair() {
  local out1 out2 p1 p2
  out1=$(mktemp) out2=$(mktemp)
  wrk -t1 -c$((concurrency / 2)) -d"$duration" -H "Authorization: Bearer $key" "$1" >"$out1" &
  p1=$!
  wrk -t1 -c$((concurrency / 2)) -d"$duration" -H "Authorization: Bearer $key" "$2" >"$out2" &
  p2=$!
  wait "$p1" "$p2"
  awk '$1 == "Requests/sec:" { sum += $2 } END { printf "%.0f\n", sum }' "$out1" "$out2"
  rm -f "$out1" "$out2"
}

one="http://127.0.0.1:$port/v1/workflows/wf-42"
two="http://127.0.0.1:$port2/v1/workflows/wf-42"
n1=$(measure_pair "$one" "$one")
n2=$(measure_pair "$one" "$two")
echo
echo "API replicas, one workflow: two wrk processes (1 thread, $((concurrency / 2)) connections each), client-side split"
echo
echo "| API processes | reads/s | vs N=1 |"
echo "|---|---|---|"
awk -v a="$n1" -v b="$n2" 'BEGIN { printf "| 1 | %.0f | 1.00x |\n| 2 | %.0f | %.2fx |\n", a, b, b/a }'
