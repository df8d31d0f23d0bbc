#!/usr/bin/env bash
# Builds the images of the local cluster's real node and imports them into its
# containerd. Nothing is pulled: each image is one layer written by hack/node/image.py
# from files on this machine.
#
#   flowline.local/pause:1        the pod sandbox: hack/node/pause, a static Go program
#   flowline.local/toolbox:1      busybox (static) with its applets: sh, echo, cat, sleep,
#                                 env, wget, nc, ip, ...; runs as any user
#   flowline.local/flowline:dev   the step image: the flowline binary ($FLOWLINE_BIN_PATH,
#                                 default target/debug/flowline) with the shared libraries
#                                 it links and their loader, CA certificates, user 65532;
#                                 skipped (and said so) while there is no binary
#
#   hack/images.sh              build what changed and import it into the running node
#   hack/images.sh --build-only build into .flowline/images/ only
#
# Once the step image is imported, .flowline/cluster/step-image holds its reference on
# one line (`flowline.local/flowline:dev`), for `flowline operator --step-image`; the
# file is absent when there is no step image on the node.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=node/env.sh
source "$repo/hack/node/env.sh"
out="$repo/.flowline/images"
mkdir -p "$out"
build_only=0
[ "${1:-}" = --build-only ] && build_only=1
if [ "${FLOWLINE_USE_EXISTING_CLUSTER:-}" = 1 ]; then
  build_only=1
  echo "[images] an existing cluster: images only built into $out; load the tars there (kind load image-archive, docker load, ctr images import)" >&2
fi

log() { echo "[images] $*" >&2; }
die() { echo "[images] error: $*" >&2; exit 1; }

# The key of a build: this script, image.py and the named inputs (size, mtime, path).
key_of() {
  { cat "$repo/hack/images.sh" "$repo/hack/node/image.py"; stat -L -c '%n %s %Y' "$@"; } | sha256sum | cut -c1-16
}

# build name tag inputs... -- image.py arguments...; skipped when the key is unchanged.
build() {
  local name=$1 tag=$2; shift 2
  local inputs=()
  while [ "$1" != -- ]; do inputs+=("$1"); shift; done
  shift
  local key; key=$(key_of "${inputs[@]}")
  if [ -f "$out/$name.tar" ] && [ "$(cat "$out/$name.key" 2>/dev/null)" = "$key" ]; then
    return 0
  fi
  python3 "$repo/hack/node/image.py" --tag "$tag" --out "$out/$name.tar" "$@" >/dev/null
  echo "$key" >"$out/$name.key"
  log "built $tag ($(du -h "$out/$name.tar" | cut -f1))"
}

# --file arguments for a dynamically linked executable's libraries and loader.
libraries_of() {
  local lib
  ldd "$1" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u |
    while IFS= read -r lib; do echo "--file=$(readlink -f "$lib"):$lib:0755"; done
}

passwd='root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n'
group='root:x:0:\nnonroot:x:65532:\n'

# --- pause ----------------------------------------------------------------------------
pause_src="$repo/hack/node/pause"
pause_key=$(key_of "$pause_src/main.go" "$pause_src/go.mod" "$(command -v go)")
if [ ! -x "$out/pause" ] || [ "$(cat "$out/pause.bin-key" 2>/dev/null)" != "$pause_key" ]; then
  (cd "$pause_src" && CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local GOPROXY=off GOSUMDB=off \
    GOCACHE="${GOCACHE:-${FLOWLINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/flowline}/go-build}" \
    go build -trimpath -ldflags "-s -w" -o "$out/pause" .)
  echo "$pause_key" >"$out/pause.bin-key"
fi
build pause "$image_pause" "$out/pause" -- \
  --file "$out/pause:/pause:0755" --entrypoint '["/pause"]' --user 65535:65535

# --- toolbox --------------------------------------------------------------------------
busybox=$(command -v busybox) || die "no busybox (Debian/Ubuntu: apt-get install busybox-static)"
applets=()
for applet in $("$busybox" --list); do
  [ "$applet" = busybox ] || applets+=("--symlink=busybox:/bin/$applet")
done
mapfile -t busybox_libs < <(libraries_of "$busybox")
build toolbox "$image_toolbox" "$busybox" -- \
  --file "$(readlink -f "$busybox"):/bin/busybox:0755" "${applets[@]}" "${busybox_libs[@]}" \
  --dir /tmp:1777 --dir /home/nonroot:0755:65532:65532 --text "/etc/passwd:$passwd" --text "/etc/group:$group" \
  --env PATH=/bin --cmd '["sh"]'

# --- flowline (step image) -------------------------------------------------------------
flowline_bin=${FLOWLINE_BIN_PATH:-$repo/target/debug/flowline}
step=0
if [ -f "$flowline_bin" ] && [ -x "$flowline_bin" ]; then
  step=1
  mapfile -t flowline_libs < <(libraries_of "$flowline_bin")
  # rustls-native-certs reads the system bundle (webhook deliveries, http.request steps).
  certs=()
  for c in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt; do
    if [ -f "$c" ]; then certs=("$c" "--file=$c:/etc/ssl/certs/ca-certificates.crt:0644"); break; fi
  done
  build flowline "$image_step" "$flowline_bin" ${certs[@]+"${certs[0]}"} -- \
    --file "$(readlink -f "$flowline_bin"):/usr/local/bin/flowline:0755" "${flowline_libs[@]}" ${certs[@]+"${certs[1]}"} \
    --dir /tmp:1777 --dir /home/nonroot:0755:65532:65532 --text "/etc/passwd:$passwd" --text "/etc/group:$group" \
    --env PATH=/usr/local/bin --env HOME=/home/nonroot --user 65532:65532 \
    --entrypoint '["/usr/local/bin/flowline"]' --cmd '["operator", "--listen", "0.0.0.0:8080"]'
else
  log "no flowline binary at $flowline_bin: skipping $image_step (cargo build, then make images)"
fi

[ "$build_only" = 1 ] && exit 0

# --- import ---------------------------------------------------------------------------
ctr_() { ctr --address "$node_sock" --namespace k8s.io "$@"; }
ctr_ version >/dev/null 2>&1 || die "the local node's containerd is not running ($node_sock); make cluster starts it (images built in $out)"
names=(pause toolbox)
[ "$step" = 1 ] && names+=(flowline)
imported=()
for name in "${names[@]}"; do
  # The node's record of what it holds goes with the node (make cluster-down).
  [ "$(cat "$node_dir/imported-$name" 2>/dev/null)" = "$(cat "$out/$name.key")" ] && continue
  ctr_ images import --snapshotter overlayfs "$out/$name.tar" >/dev/null
  cp "$out/$name.key" "$node_dir/imported-$name"
  imported+=("$name")
done
[ ${#imported[@]} = 0 ] || log "imported ${imported[*]} into the node's containerd"
if [ "$step" = 1 ]; then
  echo "$image_step" >"$step_image_file.tmp"
  mv "$step_image_file.tmp" "$step_image_file"
else
  rm -f "$step_image_file"
fi
