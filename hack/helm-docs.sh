#!/usr/bin/env bash
# The chart's README (charts/flowline/README.md) from values.yaml's `# --` comments
# and README.md.gotmpl, with helm-docs.
#
#   hack/helm-docs.sh           regenerate charts/flowline/README.md (make chart-docs)
#   hack/helm-docs.sh --check   fail when the committed README differs from a fresh
#                               rendering, or when a value has no `# --` description
#   hack/helm-docs.sh --install only make helm-docs available in .flowline/bin
#
# helm-docs is built once with `go install` from the Go module proxy into the
# version-keyed cache ($FLOWLINE_CACHE, default ~/.cache/flowline/helm-docs-<version>/),
# like hack/k8s/build.sh does for helm and kwok; later calls only refresh the symlink
# .flowline/bin/helm-docs. A helm-docs already on PATH is not used: another version
# would render another table.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
chart="$repo/charts/flowline"

# Pinned: the newest release the Go module proxy serves here.
HELM_DOCS_VERSION=v1.14.2

cache_root=${FLOWLINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/flowline}
cache="$cache_root/helm-docs-$HELM_DOCS_VERSION"
bin_dir="$repo/.flowline/bin"
tool="$cache/helm-docs"

log() { echo "[helm-docs] $*" >&2; }
die() { echo "[helm-docs] FAIL: $*" >&2; exit 1; }

install() {
  mkdir -p "$cache" "$bin_dir"
  exec 8>"$cache/.lock" # concurrent checkouts build it once
  flock 8
  if [ ! -x "$tool" ]; then
    command -v go >/dev/null || die "go is needed to build helm-docs $HELM_DOCS_VERSION (https://go.dev/dl)"
    log "building helm-docs $HELM_DOCS_VERSION with go install (first time only; ~2 min on 2 cores)"
    GOBIN="$cache" GOFLAGS= GOSUMDB=off GOTOOLCHAIN=local \
      GOCACHE=${GOCACHE:-$cache_root/go-build} \
      go install -trimpath -ldflags "-s -w" "github.com/norwoodj/helm-docs/cmd/helm-docs@$HELM_DOCS_VERSION"
  fi
  exec 8>&-
  ln -sfn "$tool" "$bin_dir/helm-docs"
}

# Renders the README of a copy of the chart into $1 (the chart itself is not touched).
render() { # output-file
  local work
  work=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf '$work'" RETURN
  cp -R "$chart" "$work/flowline"
  # --sort-values-order file: the table in the order of values.yaml, where related
  # values stand together.
  (cd "$work" && "$tool" --chart-search-root flowline --template-files README.md.gotmpl \
    --output-file README.md --sort-values-order file --log-level warning) >&2
  cp "$work/flowline/README.md" "$1"
}

# Values without a `# --` description: the rows helm-docs would render with an empty
# description (a value, or a map or list documented as a whole). helm-docs' own
# --documentation-strict-mode is no use here: it also demands a comment on every
# parent map and on each key inside a map documented as a whole.
undocumented() {
  local work
  work=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf '$work'" RETURN
  cp -R "$chart" "$work/flowline"
  printf '{{ range .Values }}{{ if not (or .Description .AutoDescription) }}{{ .Key }}\n{{ end }}{{ end }}' \
    >"$work/flowline/undocumented.gotmpl"
  (cd "$work" && "$tool" --chart-search-root flowline --template-files undocumented.gotmpl \
    --output-file undocumented.txt --log-level warning) >&2
  grep -v '^$' "$work/flowline/undocumented.txt" || true
}

install
case "${1:-}" in
  --install) ;;
  --check)
    missing=$(undocumented)
    [ -z "$missing" ] || die "values without a \`# --\` description in charts/flowline/values.yaml: $(echo "$missing" | tr '\n' ' ')"
    fresh=$(mktemp)
    # shellcheck disable=SC2064
    trap "rm -f '$fresh'" EXIT
    render "$fresh"
    if ! diff -u "$chart/README.md" "$fresh" >&2; then
      die "charts/flowline/README.md is stale (diff above: committed vs generated): run make chart-docs"
    fi
    log "charts/flowline/README.md is up to date; every value has a description"
    ;;
  "")
    render "$chart/README.md"
    log "wrote charts/flowline/README.md"
    ;;
  *) die "unknown argument $1 (none, --check or --install)" ;;
esac
