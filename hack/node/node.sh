# shellcheck shell=bash source-path=SCRIPTDIR disable=SC2154
# The local cluster's real node: containerd and a kubelet registered as $node_name, on a
# bridge of their own. Sourced by hack/cluster.sh, which defines repo, dir, bin,
# api_port, log, die, alive, run_bg, wait_for and kubectl_ (SC2154: set there).
#
# Nothing the node does reaches another host: its only address is on the bridge (the
# node IP and the pods' CNI bridge), the pods have no default route, no masquerading,
# forwarding out of the bridge is dropped, pods resolve names with 127.0.0.1 (nothing
# listens there), and containerd sends any pull to a dead proxy on 127.0.0.1:9.
#
# What the node changes on the host, and how node_down puts it back:
#   kernel tunables the kubelet sets (vm.overcommit_memory, kernel.panic, ...)
#                                       recorded before the node starts, restored
#   iptables: the kubelet's KUBE-* chains, our FORWARD drop rule, the tables they created
#                                       deleted (empty new tables with nft, when installed)
#   cgroups /kubepods (every hierarchy) processes killed, cgroups removed
#   bridge, veths, network namespaces   namespaces unmounted, veths and bridge deleted
#   mounts (rootfs overlays, shm, volumes, the kubelet's rshared root, namespaces)
#                                       unmounted; all of them are under node_dir or node_run
#   /var/log/containers (kubelet), /run/containerd/s (shim sockets), /var/lib/cni (CNI
#   result cache)                       our entries removed; the directories too when we
#                                       created them
#   cgroup v2 only: the root's cgroup.subtree_control
#                                       recorded, restored

# shellcheck source=env.sh
source "$repo/hack/node/env.sh"

node_host="$node_dir/host"   # the record of the host before the node started
node_pki="$dir/pki"
node_sysctls=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward)
# Host directories the node may create (the record says which existed, with their mode).
# The kubelet's device manager writes /var/lib/kubelet/device-plugins whatever its root
# directory; libmount may create /run/mount.
node_host_paths=(/var/log/containers /var/log/pods /var/lib/kubelet /var/lib/kubelet/device-plugins
  /var/lib/cni /var/lib/cni/results /var/lib/cni/networks /var/lib/containerd /run/containerd
  /run/containerd/s /run/netns /run/mount /opt/containerd /etc/cni /etc/kubernetes)

node_cni_bin() {
  local d
  for d in "${FLOWLINE_CNI_BIN_DIR:-}" /usr/lib/cni /opt/cni/bin; do
    if [ -n "$d" ] && [ -x "$d/bridge" ] && [ -x "$d/host-local" ] && [ -x "$d/loopback" ]; then
      echo "$d"
      return 0
    fi
  done
  return 1
}

# Fails, saying what to do, when this machine cannot run the node.
node_preflight() {
  local hint="install them (Debian/Ubuntu: apt-get install containerd runc containernetworking-plugins busybox-static iptables nftables), or run FLOWLINE_REAL_NODE=0 make cluster for the kwok-only cluster"
  [ "$(id -u)" = 0 ] ||
    die "the local cluster's real node needs root (containerd, the kubelet, a bridge); run as root, or FLOWLINE_REAL_NODE=0 make cluster for the kwok-only cluster"
  local missing=() c
  for c in containerd containerd-shim-runc-v2 runc ctr ip iptables iptables-save iptables-restore python3 busybox sha256sum; do
    command -v "$c" >/dev/null 2>&1 || missing+=("$c")
  done
  node_cni_bin >/dev/null || missing+=("CNI plugins bridge, host-local and loopback (in /usr/lib/cni or /opt/cni/bin)")
  [ ${#missing[@]} = 0 ] || die "the real node needs: ${missing[*]}; $hint"
  [ -x "$bin/kubelet" ] || die "no kubelet in $bin (hack/k8s/build.sh builds it unless FLOWLINE_REAL_NODE=0)"
  [ -d /sys/fs/cgroup ] || die "no /sys/fs/cgroup: the kubelet needs cgroups"
}

# Processes of this checkout's node, found by the paths only they are started with.
node_pids() {
  # Patterns through a file: grep's own command line must not match them.
  grep -laF -f <(printf '%s\n' "$node_sock" "$node_dir/") /proc/[0-9]*/cmdline 2>/dev/null |
    awk -F/ -v self=$$ '$3 != self {print $3}' || true
}

node_bridge_owner() { cat "/sys/class/net/$node_bridge/ifalias" 2>/dev/null || true; }

# What a node (ours or another's) left on this host, one line each.
node_leftovers() {
  if [ -e "/sys/class/net/$node_bridge" ]; then
    local owner; owner=$(node_bridge_owner)
    echo "network interface $node_bridge (${owner:-no owner recorded})"
  fi
  find /sys/fs/cgroup -maxdepth 2 -type d -name kubepods -printf 'cgroup %p\n' 2>/dev/null
  local t
  for t in iptables ip6tables; do
    command -v "$t-save" >/dev/null 2>&1 || continue
    "$t-save" 2>/dev/null | awk -v t="$t" '/^\*/ {table = substr($0, 2)} /^:KUBE-/ {print t " chain " substr($1, 2) " (table " table ")"}'
  done
  local p
  for p in $(node_pids); do echo "process $p: $(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline" | cut -c1-120)"; done
  node_mounts | sed 's/^/mount /'
}

# Mount points under node_dir and node_run, deepest first.
node_mounts() {
  awk -v a="$node_dir/" -v b="$node_run/" '{
      m = $5; gsub(/\\040/, " ", m)
      if (index(m "/", a) == 1 || index(m "/", b) == 1) print m
    }' /proc/self/mountinfo | sort -ru
}

# Refuses to start over what another node left; cleans up first what ours left.
node_check_host() {
  local found
  if [ -d "$node_dir" ] || [ "$(node_bridge_owner)" = "flowline $repo" ]; then
    log "cleaning up what this checkout's previous node left"
    node_down
  fi
  found=$(node_leftovers)
  [ -z "$found" ] || die "this host holds what another Kubernetes node (or a crashed run without its record) left:
$(awk '{print "  " $0}' <<<"$found")
If another checkout's local cluster owns them, stop it there (make cluster-down). If nothing
else uses them, hack/cluster.sh clean-node removes them (the same clean-up as make cluster-down)."
  # Routes or addresses inside the node's subnet (a broader route, a VPN's 10/8, is fine:
  # the bridge's /24 is more specific).
  local taken
  taken=$({ ip -4 route show root "$node_subnet"; ip -4 -o addr show to "$node_subnet"; } 2>/dev/null || true)
  [ -z "$taken" ] || die "$node_subnet is already in use on this host ($taken); the node needs it for its bridge"
}

node_record_host() {
  mkdir -p "$node_host"
  local k p t
  for k in "${node_sysctls[@]}"; do
    printf '%s=%s\n' "$k" "$(sysctl -n "$k" 2>/dev/null)"
  done >"$node_host/sysctl.tmp"
  mv "$node_host/sysctl.tmp" "$node_host/sysctl"
  for p in "${node_host_paths[@]}"; do
    [ -e "$p" ] && printf '%s %s\n' "$p" "$(stat -c %a "$p")"
  done >"$node_host/paths" || true
  for t in iptables ip6tables; do
    "$t-save" 2>/dev/null | awk '/^\*/ {print substr($0, 2)}' >"$node_host/$t-tables" || true
  done
  [ -f /sys/fs/cgroup/cgroup.subtree_control ] && cat /sys/fs/cgroup/cgroup.subtree_control >"$node_host/subtree_control"
  return 0
}

node_make_certs() {
  local pki=$node_pki
  [ -f "$pki/kubelet-client.crt" ] && [ -f "$pki/apiserver-kubelet-client.crt" ] && [ -f "$pki/kubelet-server.crt" ] && return 0
  (
    cd "$pki" || exit 1
    sign() { # name subject extensions
      openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$1.key" -out "$1.csr" 2>/dev/null
      printf '%b' "$3" >"$1.ext"
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
        -extfile "$1.ext" -out "$1.crt" 2>/dev/null
    }
    sign kubelet-client "/O=system:nodes/CN=system:node:$node_name" 'extendedKeyUsage=clientAuth\n'
    sign kubelet-server "/CN=system:node:$node_name" \
      "subjectAltName=IP:$node_ip,DNS:$node_name\nextendedKeyUsage=serverAuth\n"
    sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" 'extendedKeyUsage=clientAuth\n'
  )
}

node_write_config() {
  local cni_bin runc pki=$node_pki
  cni_bin=$(node_cni_bin)
  runc=$(command -v runc)
  mkdir -p "$node_dir/cni" "$node_dir/kubelet" "$node_run"
  chmod 700 "$node_run"

  cat >"$node_dir/containerd.toml" <<TOML
# containerd of the local node: its own root, state and socket, nothing shared with a
# system containerd; images come from hack/images.sh, never from a registry.
version = 2
root = "$node_dir/containerd"
state = "$node_run/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]

[grpc]
  address = "$node_sock"

[plugins."io.containerd.internal.v1.opt"]
  path = "$node_dir/containerd-opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$image_pause"
  # root may lack CAP_SYS_RESOURCE (containers, CI): never ask for a lower oom_score_adj
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$runc"
        Root = "$node_run/runc"
        SystemdCgroup = false

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$cni_bin"
    conf_dir = "$node_dir/cni"
    max_conf_num = 1
TOML

  # The bridge is created by node_up with the node's address; the plugin only attaches
  # pods to it. No gateway on the pods (no default route), no masquerading.
  cat >"$node_dir/cni/10-flowline.conflist" <<JSON
{
  "cniVersion": "0.4.0",
  "name": "flowline",
  "plugins": [{
    "type": "bridge",
    "bridge": "$node_bridge",
    "isGateway": false,
    "isDefaultGateway": false,
    "ipMasq": false,
    "hairpinMode": true,
    "ipam": {
      "type": "host-local",
      "dataDir": "$node_dir/cni-ipam",
      "ranges": [[{"subnet": "$node_subnet", "rangeStart": "${node_pod_range[0]}",
                   "rangeEnd": "${node_pod_range[1]}", "gateway": "$node_ip"}]]
    }
  }]
}
JSON

  printf 'nameserver 127.0.0.1\noptions ndots:1\n' >"$node_dir/kubelet/resolv.conf"

  cat >"$node_dir/kubelet/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: flowline-local
  cluster:
    server: https://127.0.0.1:$api_port
    certificate-authority: $pki/ca.crt
users:
- name: $node_name
  user:
    client-certificate: $pki/kubelet-client.crt
    client-key: $pki/kubelet-client.key
contexts:
- name: node
  context: {cluster: flowline-local, user: $node_name}
current-context: node
KC

  cat >"$node_dir/kubelet/config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# Serves on the bridge address only.
address: $node_ip
port: 10250
readOnlyPort: 0
healthzBindAddress: $node_ip
healthzPort: 10248
tlsCertFile: $pki/kubelet-server.crt
tlsPrivateKeyFile: $pki/kubelet-server.key
rotateCertificates: false
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$node_sock
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
# Names resolve nowhere: 127.0.0.1 inside a pod is the pod's own loopback.
clusterDNS: [127.0.0.1]
clusterDomain: cluster.local
resolvConf: $node_dir/kubelet/resolv.conf
podLogsDir: $node_dir/pod-logs
# Imported images cannot be pulled again: never collect them, and no disk-pressure
# evictions on a full laptop disk.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, nodefs.inodesFree: 1%, imagefs.available: 1%}
serializeImagePulls: false
shutdownGracePeriod: 0s
YAML
}

node_up() {
  local started=$SECONDS
  node_record_host
  log "creating bridge $node_bridge ($node_ip/$node_prefix), the node's only address"
  ip link add "$node_bridge" type bridge
  ip link set dev "$node_bridge" alias "flowline $repo"
  # Packets that arrive on the bridge are never routed on, whatever net.ipv4.ip_forward says.
  sysctl -qw "net.ipv4.conf.$node_bridge.forwarding=0" "net.ipv6.conf.$node_bridge.disable_ipv6=1"
  ip addr add "$node_ip/$node_prefix" dev "$node_bridge"
  ip link set "$node_bridge" up
  iptables -w -I FORWARD -i "$node_bridge" ! -o "$node_bridge" -j DROP
  if command -v ip6tables >/dev/null 2>&1; then
    ip6tables -w -I FORWARD -i "$node_bridge" ! -o "$node_bridge" -j DROP 2>/dev/null || true
  fi

  node_make_certs
  node_write_config
  log "starting containerd (socket $node_sock)"
  # A pull is the one thing that could leave the machine: send it to a dead proxy.
  run_bg containerd env -u NO_PROXY -u no_proxy HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 \
    http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9 \
    containerd --config "$node_dir/containerd.toml"
  wait_for containerd 30 ctr --address "$node_sock" version
  "$repo/hack/images.sh"

  log "starting the kubelet of $node_name"
  local kubelet_started; kubelet_started=$(date +%s%N)
  run_bg kubelet env -u NO_PROXY -u no_proxy HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 \
    http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9 "$bin/kubelet" \
    --config "$node_dir/kubelet/config.yaml" --kubeconfig "$node_dir/kubelet/kubeconfig" \
    --root-dir "$node_dir/kubelet/root" --hostname-override "$node_name" --node-ip "$node_ip" \
    --node-labels flowline.io/node=real --v 1
  wait_for "node $node_name Ready" 90 node_ready
  log "node $node_name Ready $((($(date +%s%N) - kubelet_started) / 1000000)) ms after the kubelet started ($((SECONDS - started)) s for the whole node)"
}

node_ready() {
  [ "$(kubectl_ get node "$node_name" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

node_healthy() {
  local c pid
  for c in containerd kubelet; do
    pid=$(cat "$dir/$c.pid" 2>/dev/null) || return 1
    alive "$pid" || return 1
  done
  node_ready
}

# SIGKILL: neither the kubelet nor containerd has anything to save, everything goes.
node_kill_pid() { # name
  local pid
  pid=$(cat "$dir/$1.pid" 2>/dev/null) || return 0
  if kill -9 "$pid" 2>/dev/null; then
    for _ in $(seq 50); do alive "$pid" || break; sleep 0.1; done
  fi
  rm -f "$dir/$1.pid"
}

# Kills every process in a kubepods cgroup (the containers), until none is left.
node_kill_containers() {
  local cgroups pids
  for _ in $(seq 50); do
    cgroups=$(find /sys/fs/cgroup -maxdepth 2 -type d -name kubepods 2>/dev/null)
    [ -n "$cgroups" ] || return 0
    # shellcheck disable=SC2086
    pids=$(find $cgroups -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u)
    [ -n "$pids" ] || return 0
    # shellcheck disable=SC2086
    kill -9 $pids 2>/dev/null || true
    sleep 0.1
  done
  log "warning: processes left in kubepods cgroups: $pids"
}

node_unmount_all() {
  local m
  for _ in 1 2 3 4 5; do
    m=$(node_mounts)
    [ -n "$m" ] || return 0
    while IFS= read -r m; do
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done <<<"$m"
  done
  [ -z "$(node_mounts)" ] || die "could not unmount: $(node_mounts | tr '\n' ' ')"
}

node_remove_cgroups() {
  local cg
  for _ in $(seq 20); do
    cg=$(find /sys/fs/cgroup -maxdepth 2 -type d -name kubepods 2>/dev/null)
    [ -n "$cg" ] || break
    # shellcheck disable=SC2086
    find $cg -depth -type d -exec rmdir {} + 2>/dev/null || true
    sleep 0.1
  done
  [ -z "$cg" ] || log "warning: cgroups left: $cg"
  if [ -f "$node_host/subtree_control" ] && [ -f /sys/fs/cgroup/cgroup.subtree_control ]; then
    local c enabled
    read -r -a enabled </sys/fs/cgroup/cgroup.subtree_control
    for c in "${enabled[@]}"; do
      grep -qw "$c" "$node_host/subtree_control" || echo "-$c" >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null ||
        log "warning: could not disable the $c controller the kubelet enabled in /sys/fs/cgroup"
    done
  fi
}

node_remove_iptables() {
  local t table chains save
  for t in iptables ip6tables; do
    command -v "$t" >/dev/null 2>&1 || continue
    while "$t" -w -D FORWARD -i "$node_bridge" ! -o "$node_bridge" -j DROP 2>/dev/null; do :; done
    for table in filter nat mangle raw security; do
      save=$("$t-save" -t "$table" 2>/dev/null) || continue
      chains=$(awk '/^:KUBE-/ {print substr($1, 2)}' <<<"$save")
      [ -n "$chains" ] || continue
      {
        echo "*$table"
        # Jumps into KUBE-* chains from other chains, then the chains themselves.
        grep -E '^-A ' <<<"$save" | grep -vE '^-A KUBE-' | grep -E -- '-j KUBE-[^ ]+' | sed 's/^-A /-D /' || true
        awk '{print "-F " $0}' <<<"$chains"
        awk '{print "-X " $0}' <<<"$chains"
        echo COMMIT
      } | "$t-restore" -w --noflush || log "warning: could not delete the $t chains: $(tr '\n' ' ' <<<"$chains")"
    done
    # Tables that exist only because the node made them, now empty: gone with nft.
    if [ -f "$node_host/$t-tables" ] && command -v nft >/dev/null 2>&1 && "$t" --version 2>/dev/null | grep -q nf_tables; then
      local family=ip; [ "$t" = ip6tables ] && family=ip6
      for table in $("$t-save" 2>/dev/null | awk '/^\*/ {print substr($0, 2)}'); do
        grep -qx "$table" "$node_host/$t-tables" && continue
        if ! "$t-save" -t "$table" | grep -qE '^-A |^:[^ ]+ (DROP|REJECT)'; then
          nft delete table "$family" "$table" 2>/dev/null || log "warning: could not delete the empty $family table $table"
        fi
      done
    fi
  done
}

# The host directories: our entries in them, and those the node created.
node_remove_host_paths() {
  local p ids id mode record=0
  [ -f "$node_host/paths" ] && record=1
  was_there() { grep -q "^$1 " "$node_host/paths" 2>/dev/null; }
  # Shim sockets: /run/containerd/s/<sha256 of our socket/namespace/container id>.
  ids=$(ls "$node_run/containerd/io.containerd.runtime.v2.task/k8s.io" 2>/dev/null || true)
  # CNI results: /var/lib/cni/results/<network>-<container id>-<interface>.
  for id in $ids; do
    rm -f "/run/containerd/s/$(printf '%s/k8s.io/%s' "$node_sock" "$id" | sha256sum | cut -d' ' -f1)" \
      /var/lib/cni/results/*-"$id"-*
  done
  if [ -d /var/log/containers ]; then
    find /var/log/containers -maxdepth 1 -type l -lname "$node_dir/*" -delete 2>/dev/null || true
  fi
  rm -rf /var/lib/cni/networks/flowline 2>/dev/null || true
  for p in "${node_host_paths[@]}"; do
    [ -e "$p" ] || continue
    if was_there "$p"; then
      mode=$(awk -v p="$p" '$1 == p {print $2}' "$node_host/paths")
      if [ -n "$mode" ]; then chmod "$mode" "$p" 2>/dev/null || true; fi
      continue
    fi
    case "$p" in
      # Shared with a system containerd or kubelet that may have started meanwhile.
      /run/containerd | /run/containerd/s | /var/log/containers | /run/mount) ;;
      *)
        if [ "$record" = 1 ] && ! awk -v p="$p/" 'index($5 "/", p) == 1 {found = 1} END {exit !found}' /proc/self/mountinfo; then
          rm -rf --one-file-system "$p"
          continue
        fi ;;
    esac
    find "$p" -depth -type d -empty -delete 2>/dev/null || true
    if [ "$record" = 1 ] && [ -e "$p" ]; then
      log "warning: $p was created while the node ran and is not empty; left in place"
    fi
  done
}

# Stops the node and puts the host back as node_record_host found it. Safe to run on a
# node that crashed half-way or was never started.
node_down() {
  node_kill_pid kubelet
  node_kill_containers
  node_kill_pid containerd
  local p
  for p in $(node_pids); do kill -9 "$p" 2>/dev/null || true; done  # shims, a kubelet without pid file
  for _ in $(seq 50); do [ -z "$(node_pids)" ] && break; sleep 0.1; done
  node_unmount_all
  node_remove_cgroups
  local ifc
  for ifc in $(ip -o link show master "$node_bridge" 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
    ip link del "$ifc" 2>/dev/null || true
  done
  if [ -e "/sys/class/net/$node_bridge" ]; then
    local owner; owner=$(node_bridge_owner)
    if [ "$owner" = "flowline $repo" ] || [ -z "$owner" ] || [ "${FLOWLINE_NODE_FORCE:-}" = 1 ]; then
      ip link del "$node_bridge"
    else
      log "warning: $node_bridge belongs to another checkout ($owner); left in place"
    fi
  fi
  node_remove_iptables
  if [ -f "$node_host/sysctl" ]; then
    local line key want
    while IFS= read -r line; do
      key=${line%%=*}; want=${line#*=}
      if [ -n "$want" ] && [ "$(sysctl -n "$key" 2>/dev/null)" != "$want" ]; then
        sysctl -qw "$key=$want" || log "warning: could not restore $key=$want"
      fi
    done <"$node_host/sysctl"
  elif [ -d "$node_dir" ]; then
    log "warning: no record of the host's kernel tunables in $node_host; not restored"
  fi
  node_remove_host_paths
  [ -z "$(node_mounts)" ] || die "mounts left under $node_dir or $node_run; not deleting them"
  rm -rf --one-file-system "$node_run" "$node_dir"
  rm -f "$step_image_file"
}
