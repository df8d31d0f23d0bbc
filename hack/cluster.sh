#!/usr/bin/env bash
# A local Kubernetes cluster on this machine: etcd, kube-apiserver,
# kube-controller-manager (Jobs, garbage collection), kube-scheduler, a real node
# (containerd and a kubelet, hack/node/node.sh) and kwok with one fake node for pods
# that ask for a faked outcome (hack/kwok/). Everything listens on 127.0.0.1 or on the
# node's own bridge; nothing is sent to another host. docs/local-cluster.md has more.
#
#   hack/cluster.sh up          start (or reuse a healthy running one); writes .flowline/kubeconfig
#   hack/cluster.sh down        stop it, delete its data, put the host back as it was
#   hack/cluster.sh status      exit 0 when it is up and healthy
#   hack/cluster.sh clean-node  remove what a real node left on this host without a record
#                               (a deleted .flowline, say): the clean-up of `down`, forced
#
# FLOWLINE_REAL_NODE=0: no real node (no root, containerd or kubelet needed); kwok's
# fake node runs every pod, as in the kwok-only cluster of old.
# With FLOWLINE_USE_EXISTING_CLUSTER=1 and KUBECONFIG set, `up` only checks that
# cluster is reachable and nothing is started.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
state="$repo/.flowline"
dir="$state/cluster"
bin="$state/bin"
kubeconfig="$state/kubeconfig"
etcd_port=${FLOWLINE_ETCD_PORT:-12379}
api_port=${FLOWLINE_APISERVER_PORT:-16443}
real_node=1
[ "${FLOWLINE_REAL_NODE:-1}" = 0 ] && real_node=0

log() { echo "[cluster] $*" >&2; }
die() { echo "[cluster] error: $*" >&2; exit 1; }

kubectl_() { "$bin/kubectl" --kubeconfig "$kubeconfig" "$@"; }

# Whether a process still runs: a zombie (exited, not yet reaped by init) does not.
alive() { kill -0 "$1" 2>/dev/null && ! grep -qE '^State:\s+Z' "/proc/$1/status" 2>/dev/null; }

# The real node: node_up, node_down, node_healthy, ...
# shellcheck source=node/node.sh
source "$repo/hack/node/node.sh"

mode() { if [ "$real_node" = 1 ]; then echo real-node; else echo kwok-only; fi; }

healthy() {
  [ -f "$kubeconfig" ] && [ -x "$bin/kubectl" ] || return 1
  [ "$(cat "$dir/mode" 2>/dev/null)" = "$(mode)" ] || return 1
  for c in etcd kube-apiserver kube-controller-manager kube-scheduler kwok; do
    pid=$(cat "$dir/$c.pid" 2>/dev/null) || return 1
    alive "$pid" || return 1
  done
  kubectl_ get --raw /readyz >/dev/null 2>&1 || return 1
  [ "$real_node" = 0 ] || node_healthy
}

stop() {
  # The node first: the host is put back even when the control plane is gone.
  if [ -d "$node_dir" ] || [ "$(node_bridge_owner)" = "flowline $repo" ] || [ -n "$(node_pids)" ]; then
    node_down
  fi
  rm -f "$dir/mode"
  # All at once (each takes a second or two to exit), then whatever is left the hard way.
  local c pid pids=()
  for c in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
    pid=$(cat "$dir/$c.pid" 2>/dev/null) || continue
    if kill "$pid" 2>/dev/null; then pids+=("$pid"); fi
    rm -f "$dir/$c.pid"
  done
  for pid in ${pids[@]+"${pids[@]}"}; do
    for _ in $(seq 50); do alive "$pid" || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
}

run_bg() { # name command args...
  local name=$1; shift
  # The daemons must not inherit the lock descriptors, or they hold the lock forever.
  setsid "$@" >"$dir/logs/$name.log" 2>&1 </dev/null 8>&- 9>&- &
  echo $! >"$dir/$name.pid"
}

start_bg() { # name args...: $bin/name args...
  local name=$1; shift
  run_bg "$name" "$bin/$name" "$@"
}

wait_for() { # description seconds command...
  local what=$1 seconds=$2; shift 2
  for _ in $(seq $((seconds * 5))); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    for pidfile in "$dir"/*.pid; do
      [ -e "$pidfile" ] || continue
      if ! alive "$(cat "$pidfile")"; then
        local name; name=$(basename "$pidfile" .pid)
        tail -n 5 "$dir/logs/$name.log" >&2 || true
        die "$name exited while waiting for $what; see $dir/logs/$name.log"
      fi
    done
    sleep 0.2
  done
  die "$what did not become ready in ${seconds}s; see $dir/logs/"
}

make_certs() {
  local pki="$dir/pki"
  mkdir -p "$pki"
  [ -f "$pki/admin.crt" ] && return 0
  (
    cd "$pki"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=flowline-local-ca" \
      -keyout ca.key -out ca.crt 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n' > server.ext
    openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" -keyout server.key -out server.csr 2>/dev/null
    openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile server.ext -out server.crt 2>/dev/null
    printf 'extendedKeyUsage=clientAuth\n' > client.ext
    openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=flowline-admin" \
      -keyout admin.key -out admin.csr 2>/dev/null
    openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile client.ext -out admin.crt 2>/dev/null
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  )
}

write_kubeconfig() {
  local pki="$dir/pki"
  cat >"$kubeconfig.tmp" <<KC
apiVersion: v1
kind: Config
clusters:
- name: flowline-local
  cluster:
    server: https://127.0.0.1:$api_port
    certificate-authority-data: $(base64 -w0 < "$pki/ca.crt")
users:
- name: flowline-admin
  user:
    client-certificate-data: $(base64 -w0 < "$pki/admin.crt")
    client-key-data: $(base64 -w0 < "$pki/admin.key")
contexts:
- name: flowline-local
  context: {cluster: flowline-local, user: flowline-admin, namespace: default}
current-context: flowline-local
KC
  mv "$kubeconfig.tmp" "$kubeconfig"
}

up() {
  if [ "${FLOWLINE_USE_EXISTING_CLUSTER:-}" = 1 ]; then
    [ -n "${KUBECONFIG:-}" ] || die "FLOWLINE_USE_EXISTING_CLUSTER=1 needs KUBECONFIG"
    kubectl get --raw /readyz >/dev/null || die "the cluster in $KUBECONFIG is not reachable"
    log "using the existing cluster from $KUBECONFIG"
    return 0
  fi
  "$repo/hack/k8s/build.sh"
  exec 8>"$state/cluster.lock"
  flock 8
  if healthy; then
    # A rebuilt flowline binary becomes the node's step image.
    [ "$real_node" = 0 ] || "$repo/hack/images.sh"
    log "reusing the running cluster ($(mode); kubeconfig: $kubeconfig)"
    return 0
  fi
  stop
  if [ "$real_node" = 1 ]; then
    node_preflight
    node_check_host
  fi
  rm -rf "$dir/etcd"
  mkdir -p "$dir/logs" "$dir/etcd"
  make_certs
  node_make_certs
  write_kubeconfig
  local pki="$dir/pki"

  log "starting etcd on 127.0.0.1:$etcd_port"
  start_bg etcd --name flowline --data-dir "$dir/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$((etcd_port + 1))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((etcd_port + 1))" \
    --initial-cluster "flowline=http://127.0.0.1:$((etcd_port + 1))" \
    --listen-metrics-urls "" --unsafe-no-fsync --log-level warn
  wait_for etcd 30 curl -fsS "http://127.0.0.1:$etcd_port/health"

  log "starting kube-apiserver on 127.0.0.1:$api_port"
  # The kubelet is reached on the node's bridge address, never through a proxy.
  run_bg kube-apiserver env "NO_PROXY=$node_subnet${NO_PROXY:+,$NO_PROXY}" "no_proxy=$node_subnet${no_proxy:+,$no_proxy}" \
    "$bin/kube-apiserver" --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" \
    --tls-cert-file "$pki/server.crt" --tls-private-key-file "$pki/server.key" \
    --client-ca-file "$pki/ca.crt" \
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-cluster-ip-range 10.96.0.0/16 --authorization-mode Node,RBAC \
    --enable-admission-plugins NodeRestriction \
    --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority "$pki/ca.crt" --kubelet-preferred-address-types InternalIP \
    --allow-privileged=true --profiling="${FLOWLINE_APISERVER_PROFILING:-false}" --cert-dir "$pki" \
    --endpoint-reconciler-type none
  wait_for kube-apiserver 90 kubectl_ get --raw /readyz

  log "starting kube-controller-manager, kube-scheduler and kwok"
  start_bg kube-controller-manager --kubeconfig "$kubeconfig" --authentication-kubeconfig "$kubeconfig" \
    --authorization-kubeconfig "$kubeconfig" --bind-address 127.0.0.1 --secure-port "$((api_port + 1))" \
    --leader-elect=false --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
    --use-service-account-credentials=true --controllers '*'
  start_bg kube-scheduler --kubeconfig "$kubeconfig" --authentication-kubeconfig "$kubeconfig" \
    --authorization-kubeconfig "$kubeconfig" --bind-address 127.0.0.1 --secure-port "$((api_port + 2))" \
    --leader-elect=false
  # kwok's node gives its own server on loopback as its kubelet address, so what the API
  # server asks a kubelet for a fake pod (its log, say) goes there and never leaves the
  # machine.
  start_bg kwok --kubeconfig "$kubeconfig" --config "$repo/hack/kwok/stages.yaml" --manage-all-nodes=false \
    --node-lease-duration-seconds 40 \
    --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
    --server-address "127.0.0.1:$((api_port + 3))" --cidr 10.244.0.1/24 \
    --node-ip 127.0.0.1 --node-port "$((api_port + 3))"
  # With a real node, kwok's node is tainted: only pods that ask for a fake outcome
  # (hack/kwok/fake-pods.yaml gives them the toleration) land on it.
  local taints="[]"
  [ "$real_node" = 1 ] && taints='[{key: flowline.io/fake, value: "true", effect: NoSchedule}]'
  kubectl_ apply -f - >/dev/null <<NODE
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-0
  annotations:
    kwok.x-k8s.io/node: fake
  labels:
    type: kwok
    kubernetes.io/hostname: kwok-node-0
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
spec:
  taints: $taints
status:
  allocatable: {cpu: "32", memory: 256Gi, pods: "1000"}
  capacity: {cpu: "32", memory: 256Gi, pods: "1000"}
NODE
  kubectl_ apply -f "$repo/hack/kwok/fake-pods.yaml" >/dev/null
  wait_for "the kwok node" 60 bash -c "'$bin/kubectl' --kubeconfig '$kubeconfig' get node kwok-node-0 -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
  wait_for "the default service account" 60 kubectl_ get serviceaccount default -n default
  wait_for "the fake-pods admission policy" 30 fake_pods_policy_active
  if [ "$real_node" = 1 ]; then
    node_up
  fi
  mode >"$dir/mode"
  log "cluster up ($(mode)); kubeconfig: $kubeconfig"
}

# A server-side dry run of a pod asking for a fake outcome comes back bound for kwok.
fake_pods_policy_active() {
  kubectl_ create --dry-run=server -o jsonpath='{.spec.nodeSelector}' -f - <<'POD' | grep -q kwok-node-0
apiVersion: v1
kind: Pod
metadata:
  name: fake-pods-policy-probe
  namespace: default
  annotations: {flowline.io/fake-exit-code: "0"}
spec:
  containers: [{name: probe, image: flowline.local/toolbox:1}]
POD
}

lock() { mkdir -p "$state"; exec 8>"$state/cluster.lock"; flock 8; }

case "${1:-}" in
  up) up ;;
  down)
    if [ "${FLOWLINE_USE_EXISTING_CLUSTER:-}" = 1 ]; then log "existing cluster: nothing to stop"; exit 0; fi
    lock
    stop
    [ -z "$(node_mounts)" ] || die "mounts left under $dir; not deleting it"
    rm -rf --one-file-system "$dir" "$kubeconfig"; log "stopped; data removed" ;;
  clean-node)
    lock
    FLOWLINE_NODE_FORCE=1 node_down
    left=$(node_leftovers)
    [ -z "$left" ] || die "still left: $left"
    log "no node leftovers on this host" ;;
  status) if healthy; then log "up"; else log "down"; exit 1; fi ;;
  *) echo "usage: $0 up|down|status|clean-node" >&2; exit 2 ;;
esac
