#!/usr/bin/env bash
# Makes the local cluster's binaries available in $FLOWLINE_BIN (default: .flowline/bin):
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, the kubelet
# (unless FLOWLINE_REAL_NODE=0), helm and kwok.
#
# Each binary is taken, in order, from $KUBEBUILDER_ASSETS (when it names a directory
# holding it), from the version-keyed cache ($FLOWLINE_CACHE, default
# ~/.cache/flowline/k8s-<version>/), or built from Go modules into that cache. Only the
# first build pays; later calls only refresh the symlinks.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=versions.env
source "$here/versions.env"

cache_root=${FLOWLINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/flowline}
ETCD_VERSION=$(awk '$1 == "require" && $2 == "go.etcd.io/etcd/server/v3" {print $3}' "$here/etcd/go.mod")
cache="$cache_root/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-helm-$HELM_VERSION-kwok-$KWOK_VERSION"
bin_dir=${FLOWLINE_BIN:-$repo/.flowline/bin}
mkdir -p "$cache" "$bin_dir"

export GOSUMDB=off GOFLAGS=-mod=mod GOTOOLCHAIN=local
export GOCACHE=${GOCACHE:-$cache_root/go-build}

log() { echo "[k8s-build] $*" >&2; }

# Serialise concurrent builds (make run and make test started together, say).
exec 9>"$cache/.lock"
flock 9

kube_commands=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
# The kubelet of the local cluster's real node; not built for the kwok-only cluster.
[ "${FLOWLINE_REAL_NODE:-1}" = 0 ] || kube_commands+=(kubelet)

# Where a binary comes from: KUBEBUILDER_ASSETS wins over the cache.
source_of() {
  if [ -n "${KUBEBUILDER_ASSETS:-}" ] && [ -x "$KUBEBUILDER_ASSETS/$1" ]; then
    echo "$KUBEBUILDER_ASSETS/$1"
  else
    echo "$cache/$1"
  fi
}

missing_kube=()
for c in "${kube_commands[@]}"; do
  [ -x "$(source_of "$c")" ] || missing_kube+=("$c")
done
if [ ${#missing_kube[@]} -gt 0 ]; then
  log "building ${missing_kube[*]} $K8S_VERSION from Go modules (first time only; ~15-30 min on 2 cores)"
  minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  commit=$(curl -fsSL "${GOPROXY_URL:-https://proxy.golang.org}/k8s.io/kubernetes/@v/$K8S_VERSION.info" \
    | sed -n 's/.*"Hash":"\([0-9a-f]*\)".*/\1/p' || true)
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    [ -n "$commit" ] && ldflags+=" -X $pkg.gitCommit=$commit"
  done
  pkgs=()
  for c in "${missing_kube[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
  (cd "$here/kube" && go build -trimpath -ldflags "$ldflags" -o "$cache/" "${pkgs[@]}")
fi

if [ ! -x "$(source_of etcd)" ]; then
  log "building etcd $ETCD_VERSION from Go modules"
  (cd "$here/etcd" && go build -trimpath -ldflags "-s -w" -o "$cache/etcd" .)
fi

go_install() { # name module version [extra ldflags]
  if [ ! -x "$(source_of "$1")" ]; then
    log "building $1 $3 with go install"
    GOBIN="$cache" GOFLAGS="" go install -trimpath -ldflags "-s -w ${4:-}" "$2@$3"
  fi
}
# helm's default Kubernetes version (what `helm template` and `helm lint` assume without
# a cluster) is set at link time, as helm's release build sets it; a plain `go install`
# leaves v1.20, which the chart's kubeVersion refuses. A helm built before this is
# replaced once (the marker file records the version it was linked with).
kube_minor=${K8S_VERSION#v1.}; kube_minor=${kube_minor%%.*}
helm_flags=""
for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
  helm_flags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$kube_minor"
done
helm_flags+=" -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
if [ -z "${KUBEBUILDER_ASSETS:-}" ] && [ "$(cat "$cache/helm.kube-minor" 2>/dev/null)" != "$kube_minor" ]; then
  rm -f "$cache/helm"
fi
go_install helm helm.sh/helm/v3/cmd/helm "$HELM_VERSION" "$helm_flags"
[ -n "${KUBEBUILDER_ASSETS:-}" ] || echo "$kube_minor" >"$cache/helm.kube-minor"
go_install kwok sigs.k8s.io/kwok/cmd/kwok "$KWOK_VERSION"

for c in etcd "${kube_commands[@]}" helm kwok; do
  ln -sfn "$(source_of "$c")" "$bin_dir/$c"
done
log "binaries ready in $bin_dir (cache: $cache)"
