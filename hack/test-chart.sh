#!/usr/bin/env bash
# Tests of the Helm chart (charts/flowline) and examples/ against a real API server:
# the local control plane of `make cluster`, or the cluster in KUBECONFIG.
#
#   1. the chart's copy of the CRDs equals crds/flowline.yaml; the image's build context holds what cargo reads;
#      charts/flowline/README.md equals what helm-docs generates now, and every value has a `# --` description
#   2. helm lint --strict and helm template of every value set; every value reaches the
#      objects it is meant for (per-component pod settings over the shared ones,
#      topology spread, a brought ServiceAccount, commonLabels, extraObjects, egress
#      NetworkPolicy, ServiceMonitor and PodMonitor); wrong values are refused
#   3. server-side dry run of every rendering (strict field validation); kubeconform
#      -strict of every rendering, of examples/ and of the CRDs, against JSON schemas
#      generated from this API server's OpenAPI document and from the CRDs (Flowline's
#      from crds/flowline.yaml); kube-score of every value set (the checks it skips are
#      explained there)
#   4. helm install, cluster mode, every option on; the Deployments become available;
#      the built-in view and edit roles include Flowline's kinds (aggregated ClusterRoles)
#   5. every file in examples/ is applied for real and accepted
#   6. RBAC is enough and no more: the flowline binary runs as each Deployment's own
#      ServiceAccount (a token for it) with the Deployment's own arguments, and the API,
#      a run, a job step in a namespace that enforces the restricted Pod Security
#      Standard, and a signed webhook delivery to a local HTTPS receiver (trusted
#      through the chart's CA bundle ConfigMap) work; `kubectl auth can-i` shows what
#      each account may and may not do (the API's: no Jobs, Pods or status writes)
#   7. helm upgrade changes a value and keeps the bootstrap key; revoking it works
#   8. helm uninstall removes everything but the CRDs
#   9. namespaced mode: Roles (one per process) only in the listed namespaces (no Secrets elsewhere), the
#      listed Namespace objects only; the binary runs as that ServiceAccount with the
#      Deployments' --watch-namespace: keys of the listed namespaces work, one of another
#      namespace is refused, a run succeeds in each listed namespace; the admission
#      policy refuses deleting an active workflow, allows it once paused, ignores other
#      namespaces and lets a namespace be deleted
#  10. the CRD upgrade path: helm upgrade leaves CRDs alone, the documented
#      `kubectl apply --server-side --force-conflicts` upgrades them
#
# Needs KUBECONFIG, helm and kubectl (.flowline/bin is searched first), curl, python3,
# openssl, and a built flowline binary (target/debug/flowline, or FLOWLINE_BIN_PATH);
# hack/helm-docs.sh builds helm-docs, and this script kubeconform and kube-score (each
# once, with go install from the Go module proxy, cached by version), which needs go.
# Everything it creates is deleted on exit, failed or not. Nothing is skipped: a check
# that cannot run fails the script.
#
# Shared-cluster manners: the cluster-mode release is installed without the admission
# policy, which would otherwise refuse deleting active workflows in every namespace
# (including other tests' namespaces); the policy is exercised in namespaced mode,
# bound to throwaway namespaces. The CRD upgrade path uses a copy of the CRDs under a
# throwaway API group, never the real CRDs. Step 6 runs a flowline operator for a few
# seconds, which reconciles Runs in every namespace: `make test` runs this script after
# the cargo cluster tests, not beside them. (Step 9's operator watches only its two
# throwaway namespaces.)
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
chart="$repo/charts/flowline"
export PATH="$repo/.flowline/bin:$PATH"
started=$SECONDS

log() { printf '[chart-test %3ds] %s\n' "$((SECONDS - started))" "$*" >&2; }
die() { printf '[chart-test %3ds] FAIL: %s\n' "$((SECONDS - started))" "$*" >&2; exit 1; }
step() { log "== $*"; }

for tool in helm kubectl curl python3 openssl flock; do
  command -v "$tool" >/dev/null || die "$tool not found (run make cluster, which builds helm and kubectl into .flowline/bin)"
done

# kubeconform and kube-score, pinned: built once with `go install` from the Go module
# proxy into the version-keyed cache ($FLOWLINE_CACHE, default ~/.cache/flowline/), as
# hack/helm-docs.sh does for helm-docs, and linked into .flowline/bin. A fresh machine
# (.ci/run) needs only go; later runs only refresh the links.
KUBECONFORM_VERSION=v0.8.0
KUBE_SCORE_VERSION=v1.20.0
cache_root=${FLOWLINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/flowline}
go_tool() { # name module version
  local name=$1 module=$2 version=$3 dir="$cache_root/$1-$3"
  mkdir -p "$dir" "$repo/.flowline/bin"
  (
    exec 8>"$dir/.lock" # concurrent checkouts build it once
    flock 8
    [ -x "$dir/$name" ] && exit 0
    command -v go >/dev/null || die "go is needed to build $name $version (https://go.dev/dl)"
    log "building $name $version with go install (first time only)"
    GOBIN="$dir" GOFLAGS= GOSUMDB=off GOTOOLCHAIN=local GOCACHE=${GOCACHE:-$cache_root/go-build} \
      go install -trimpath -ldflags "-s -w" "$module@$version" >"$dir/build.log" 2>&1 ||
      { cat "$dir/build.log" >&2; die "go install $module@$version failed"; }
  ) || exit 1
  ln -sfn "$dir/$name" "$repo/.flowline/bin/$name"
}
go_tool kubeconform github.com/yannh/kubeconform/cmd/kubeconform "$KUBECONFORM_VERSION"
go_tool kube-score github.com/zegl/kube-score/cmd/kube-score "$KUBE_SCORE_VERSION"
kubeconform=$repo/.flowline/bin/kubeconform
kube_score=$repo/.flowline/bin/kube-score

[ -n "${KUBECONFIG:-}" ] || die "KUBECONFIG is not set (make chart-test sets it)"
kubectl get --raw /readyz >/dev/null 2>&1 || die "the cluster in $KUBECONFIG is not reachable (make cluster)"
for crd in workflows runs webhooks; do
  kubectl get crd "$crd.flowline.io" >/dev/null 2>&1 || die "CRD $crd.flowline.io is not installed (make install-crds)"
done
# FLOWLINE_BIN_PATH, as for hack/images.sh. FLOWLINE_BIN is read only when it names a
# file: `make cluster` (hack/k8s/build.sh) takes FLOWLINE_BIN as its binaries' directory.
flowline_src=${FLOWLINE_BIN_PATH:-}
if [ -z "$flowline_src" ] && [ -f "${FLOWLINE_BIN:-}" ]; then flowline_src=$FLOWLINE_BIN; fi
flowline_src=${flowline_src:-$repo/target/debug/flowline}
[ -f "$flowline_src" ] && [ -x "$flowline_src" ] ||
  die "no flowline binary at $flowline_src (make build, or set FLOWLINE_BIN_PATH)"

# One chart test at a time per checkout: they share cluster-scoped fixtures.
mkdir -p "$repo/.flowline"
exec 9>"$repo/.flowline/chart-test.lock"
flock -w 600 9 || die "another chart test holds $repo/.flowline/chart-test.lock"

tmp=$(mktemp -d)
id=$(printf '%05d' $((RANDOM % 100000)))
ns_rel="flowline-ct$id"          # release namespace (and the cluster-mode account)
ns_a="flowline-ct$id-a"          # namespaced mode: listed accounts
ns_b="flowline-ct$id-b"
ns_other="flowline-ct$id-other"  # namespaced mode: not listed
ns_restricted="flowline-ct$id-restricted"  # enforces the restricted Pod Security Standard
rel="ct$id"                      # cluster mode
reln="ct$id-ns"                  # namespaced mode
relc="ct$id-crds"                # the CRD upgrade path
fullname="$rel-flowline"
fullname_ns="$reln-flowline"
crd_group="ct$id.flowline.io"
servicemonitor_crd_created=
podmonitor_crd_created=
httproute_crd_created=
pids=()
releases=()

cleanup() {
  local rc=$?
  set +e
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done
  for r in "${releases[@]}"; do
    helm status "$r" -n "$ns_rel" >/dev/null 2>&1 && helm uninstall "$r" -n "$ns_rel" --wait --timeout 60s >/dev/null 2>&1
  done
  kubectl delete namespace "$ns_rel" "$ns_a" "$ns_b" "$ns_other" "$ns_restricted" --ignore-not-found --wait=false >/dev/null 2>&1
  # Bounded: right after a CRD update the apiserver's CRD finalizer can fail once with
  # "storage is (re)initializing" and not come back to it for minutes; a leftover copy
  # under the test's own group harms nothing, a hung cleanup would stall the suite.
  kubectl delete crd "workflows.$crd_group" "runs.$crd_group" "webhooks.$crd_group" \
    --ignore-not-found --timeout 30s >/dev/null 2>&1 ||
    log "note: the CRD copies under $crd_group are still terminating (left to the apiserver)"
  if [ -n "$servicemonitor_crd_created" ]; then
    kubectl delete crd servicemonitors.monitoring.coreos.com --ignore-not-found >/dev/null 2>&1
  fi
  if [ -n "$podmonitor_crd_created" ]; then
    kubectl delete crd podmonitors.monitoring.coreos.com --ignore-not-found >/dev/null 2>&1
  fi
  if [ -n "$httproute_crd_created" ]; then
    kubectl delete crd httproutes.gateway.networking.k8s.io --ignore-not-found >/dev/null 2>&1
  fi
  # kubectl caches API discovery: with the copies still cached, a later `kubectl get
  # workflow x` in another test resolves to the (gone) throwaway group. Refresh it.
  kubectl api-resources >/dev/null 2>&1
  rm -rf "$tmp"
  if [ "$rc" = 0 ]; then
    log "chart-test passed in $((SECONDS - started))s"
  else
    log "chart-test FAILED (exit $rc) after $((SECONDS - started))s; everything it created was deleted"
  fi
  exit "$rc"
}
trap cleanup EXIT

# Runs a command quietly; on failure shows its output and stops.
quiet() { # description command...
  local what=$1; shift
  "$@" >"$tmp/out" 2>&1 || { cat "$tmp/out" >&2; die "$what"; }
}
# Runs a command that must fail and whose output must contain a text.
refused() { # description expected-text command...
  local what=$1 text=$2; shift 2
  if "$@" >"$tmp/out" 2>&1; then cat "$tmp/out" >&2; die "$what: accepted, expected a refusal"; fi
  grep -qF -- "$text" "$tmp/out" || { cat "$tmp/out" >&2; die "$what: refused, but without \"$text\""; }
}
# `kubectl auth can-i` as a ServiceAccount; want is yes or no.
can_i() { # want account-namespace account-name verb resource [kubectl flags...]
  local want=$1 sa_ns=$2 sa=$3 verb=$4 resource=$5; shift 5
  local got
  got=$(kubectl auth can-i "$verb" "$resource" "$@" --as "system:serviceaccount:$sa_ns:$sa" 2>/dev/null) || true
  [ "$got" = "$want" ] || die "can-i $verb $resource $* as $sa: got '${got:-error}', want $want"
}
# Waits until a command succeeds.
eventually() { # description seconds command...
  local what=$1 seconds=$2; shift 2
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || die "$what: not within ${seconds}s"
    sleep 0.5
  done
}
json_get() { # dot.path < json (list items by index)
  python3 -c 'import json, sys
v = json.load(sys.stdin)
for p in sys.argv[1].split("."):
    v = v[int(p)] if isinstance(v, list) else v[p]
print(v if isinstance(v, str) else json.dumps(v))' "$1"
}
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
render_doc() { # rendering kind name -> that object's YAML from a helm template output
  python3 -c 'import sys
kind, name = sys.argv[2], sys.argv[3]
for doc in open(sys.argv[1]).read().split("\n---\n"):
    if f"\nkind: {kind}\n" in f"\n{doc}\n" and f"\n  name: {name}\n" in f"{doc}\n":
        print(doc)' "$@"
}
workflow() { # name state -> a Workflow manifest
  printf 'apiVersion: flowline.io/v1\nkind: Workflow\nmetadata: {name: %s}\nspec: {name: %s, state: %s}\n' "$1" "$1" "$2"
}

kube_version=$(kubectl get --raw /version | sed -n 's/.*"gitVersion": *"\([^"]*\)".*/\1/p')
[ -n "$kube_version" ] || die "cannot read the server version"
log "cluster $kube_version, helm $(helm version --template '{{.Version}}'), run id $id"

# ---------------------------------------------------------------------------------------
step "1. the chart's CRDs equal crds/flowline.yaml; the image's build context holds what cargo reads; the chart's README is fresh"
cmp -s "$repo/crds/flowline.yaml" "$chart/crds/flowline.yaml" ||
  die "charts/flowline/crds/flowline.yaml differs from crds/flowline.yaml: run make chart-crds"
# Regenerates the README into a temporary file and diffs it against the committed one;
# also fails on a value without a `# --` description.
"$repo/hack/helm-docs.sh" --check || die "charts/flowline/README.md: see above (make chart-docs)"

# The image cannot be built here (no container runtime): check at least that its
# build context (.dockerignore is an allowlist) lets in what cargo reads.
need=(Cargo.toml Cargo.lock src)
grep -q '^\[\[bench\]\]' "$repo/Cargo.toml" && need+=(benches)
grep -q '^\[\[test\]\]' "$repo/Cargo.toml" && need+=(tests)
# build.rs embeds the web console's files.
[ -e "$repo/build.rs" ] && need+=(build.rs console)
while read -r p; do need+=("${p%%/*}"); done < <(sed -n 's/^path *= *"\([^"]*\)".*/\1/p' "$repo/Cargo.toml")
for p in "${need[@]}"; do
  [ -e "$repo/$p" ] || die "Cargo.toml needs $p, which does not exist"
  grep -qxE "!/?$p/?" "$repo/.dockerignore" || die "the image build needs $p, which .dockerignore does not let in"
done

for ns in "$ns_rel" "$ns_a" "$ns_b" "$ns_other" "$ns_restricted"; do quiet "create namespace $ns" kubectl create namespace "$ns"; done
# Step pods must pass the strictest Pod Security Standard: this namespace enforces it.
quiet "label $ns_restricted" kubectl label namespace "$ns_restricted" \
  pod-security.kubernetes.io/enforce=restricted pod-security.kubernetes.io/enforce-version=latest

# The local cluster has no Prometheus Operator. ServiceMonitor and PodMonitor CRDs
# reduced to the fields the chart sets (no unknown fields allowed; types, enums and
# patterns as in monitoring.coreos.com/v1) stand in for it while the test runs.
if ! kubectl get crd servicemonitors.monitoring.coreos.com >/dev/null 2>&1; then
  servicemonitor_crd_created=1
  quiet "install a stand-in ServiceMonitor CRD" kubectl apply -f - <<'YAML'
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: servicemonitors.monitoring.coreos.com
  labels: {flowline.io/chart-test: stand-in}
spec:
  group: monitoring.coreos.com
  names: {kind: ServiceMonitor, plural: servicemonitors, singular: servicemonitor, listKind: ServiceMonitorList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [selector, endpoints]
            properties:
              selector:
                type: object
                properties:
                  matchLabels: {type: object, additionalProperties: {type: string}}
              namespaceSelector:
                type: object
                properties:
                  matchNames: {type: array, items: {type: string}}
              endpoints:
                type: array
                items:
                  type: object
                  properties:
                    port: {type: string}
                    path: {type: string}
                    interval: &duration {type: string, pattern: '^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$'}
                    scrapeTimeout: *duration
                    relabelings: &relabelings
                      type: array
                      items:
                        type: object
                        properties:
                          action:
                            type: string
                            default: replace
                            enum: [replace, Replace, keep, Keep, drop, Drop, hashmod, HashMod, labelmap, LabelMap, labeldrop,
                              LabelDrop, labelkeep, LabelKeep, lowercase, Lowercase, uppercase, Uppercase, keepequal, KeepEqual,
                              dropequal, DropEqual]
                          modulus: {type: integer, format: int64}
                          regex: {type: string}
                          replacement: {type: string}
                          separator: {type: string}
                          sourceLabels: {type: array, items: {type: string, pattern: '^[a-zA-Z_][a-zA-Z0-9_]*$'}}
                          targetLabel: {type: string}
                    metricRelabelings: *relabelings
YAML
  quiet "ServiceMonitor CRD established" kubectl wait --for condition=Established --timeout 30s crd/servicemonitors.monitoring.coreos.com
  log "installed a stand-in ServiceMonitor CRD (deleted on exit)"
fi
if ! kubectl get crd podmonitors.monitoring.coreos.com >/dev/null 2>&1; then
  podmonitor_crd_created=1
  quiet "install a stand-in PodMonitor CRD" kubectl apply -f - <<'YAML'
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: podmonitors.monitoring.coreos.com
  labels: {flowline.io/chart-test: stand-in}
spec:
  group: monitoring.coreos.com
  names: {kind: PodMonitor, plural: podmonitors, singular: podmonitor, listKind: PodMonitorList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [selector]
            properties:
              selector:
                type: object
                properties:
                  matchLabels: {type: object, additionalProperties: {type: string}}
              namespaceSelector:
                type: object
                properties:
                  matchNames: {type: array, items: {type: string}}
              podMetricsEndpoints:
                type: array
                items:
                  type: object
                  properties:
                    port: {type: string}
                    path: {type: string}
                    interval: &duration {type: string, pattern: '^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$'}
                    scrapeTimeout: *duration
                    relabelings: &relabelings
                      type: array
                      items:
                        type: object
                        properties:
                          action:
                            type: string
                            default: replace
                            enum: [replace, Replace, keep, Keep, drop, Drop, hashmod, HashMod, labelmap, LabelMap, labeldrop,
                              LabelDrop, labelkeep, LabelKeep, lowercase, Lowercase, uppercase, Uppercase, keepequal, KeepEqual,
                              dropequal, DropEqual]
                          modulus: {type: integer, format: int64}
                          regex: {type: string}
                          replacement: {type: string}
                          separator: {type: string}
                          sourceLabels: {type: array, items: {type: string, pattern: '^[a-zA-Z_][a-zA-Z0-9_]*$'}}
                          targetLabel: {type: string}
                    metricRelabelings: *relabelings
YAML
  quiet "PodMonitor CRD established" kubectl wait --for condition=Established --timeout 30s crd/podmonitors.monitoring.coreos.com
  log "installed a stand-in PodMonitor CRD (deleted on exit)"
fi
# Nor Gateway API: an HTTPRoute CRD reduced to the fields the chart sets stands in.
if ! kubectl get crd httproutes.gateway.networking.k8s.io >/dev/null 2>&1; then
  httproute_crd_created=1
  quiet "install a stand-in HTTPRoute CRD" kubectl apply -f - <<'YAML'
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: httproutes.gateway.networking.k8s.io
  labels: {flowline.io/chart-test: stand-in}
  # A *.k8s.io group needs it; the real Gateway API CRDs carry their approval.
  annotations: {api-approved.kubernetes.io: "https://github.com/kubernetes-sigs/gateway-api"}
spec:
  group: gateway.networking.k8s.io
  names: {kind: HTTPRoute, plural: httproutes, singular: httproute, listKind: HTTPRouteList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              parentRefs:
                type: array
                items:
                  type: object
                  required: [name]
                  properties:
                    name: {type: string}
                    namespace: {type: string}
                    sectionName: {type: string}
              hostnames: {type: array, items: {type: string}}
              rules:
                type: array
                items:
                  type: object
                  properties:
                    matches:
                      type: array
                      items:
                        type: object
                        properties:
                          path:
                            type: object
                            properties:
                              type: {type: string, enum: [Exact, PathPrefix, RegularExpression]}
                              value: {type: string}
                    backendRefs:
                      type: array
                      items:
                        type: object
                        required: [name]
                        properties:
                          name: {type: string}
                          port: {type: integer}
YAML
  quiet "HTTPRoute CRD established" kubectl wait --for condition=Established --timeout 30s crd/httproutes.gateway.networking.k8s.io
  log "installed a stand-in HTTPRoute CRD (deleted on exit)"
fi

# ---------------------------------------------------------------------------------------
step "2. helm lint --strict and helm template of every value set"
# name and helm flags of each value set; the namespaced one uses throwaway namespaces.
sets=(default full namespaced gateway components)
# The ServiceMonitor and PodMonitor of components and gateway go to another namespace
# than the release's: a throwaway one here.
declare -A set_flags=(
  [default]=""
  [gateway]="-f $chart/ci/gateway-values.yaml --set podMonitor.namespace=$ns_other"
  [components]="-f $chart/ci/components-values.yaml --set serviceMonitor.namespace=$ns_other"
  [full]="-f $chart/ci/full-values.yaml --set delivery.allowCidrs={10.0.0.0/8,fd00::/8} --set delivery.concurrency=32
    --set delivery.caBundle.configMap=corp-ca --set delivery.caBundle.key=bundle.pem
    --set api.trustedProxies={10.0.0.0/8,192.168.1.1} --set api.unauthenticatedRequestsPerMinute=30"
  [namespaced]="-f $chart/ci/namespaced-values.yaml --set watchNamespaces={$ns_a,$ns_b} --set bootstrapAdminKey.namespace=$ns_a"
)
# Without a cluster and without --kube-version, as a user's first `helm template` goes:
# the helm make cluster builds assumes the cluster's Kubernetes version, not v1.20.
helm template "$rel" "$chart" >/dev/null 2>"$tmp/out" || { cat "$tmp/out" >&2; die "helm template without --kube-version"; }
for s in "${sets[@]}"; do
  # shellcheck disable=SC2086 # the flags are words on purpose
  quiet "helm lint --strict ($s values)" helm lint --strict "$chart" ${set_flags[$s]} --kube-version "$kube_version"
  # shellcheck disable=SC2086
  helm template "$rel" "$chart" -n "$ns_rel" --kube-version "$kube_version" ${set_flags[$s]} \
    >"$tmp/render-$s.yaml" 2>"$tmp/out" || { cat "$tmp/out" >&2; die "helm template ($s values)"; }
  log "$s: $(grep -c '^kind:' "$tmp/render-$s.yaml") objects: $(grep '^kind:' "$tmp/render-$s.yaml" | sort | uniq -c | awk '{printf "%s%s×%s", sep, $3, $1; sep=", "}')"
done
# What each rendering must hold.
for kind in Deployment Service ServiceAccount ClusterRole ClusterRoleBinding PodDisruptionBudget NetworkPolicy \
  ValidatingAdmissionPolicy ValidatingAdmissionPolicyBinding Job; do
  grep -q "^kind: $kind$" "$tmp/render-default.yaml" || die "the default rendering has no $kind"
done
# The one Secret by default is the seal key (and none with sealKey.existingSecret).
render_doc "$tmp/render-default.yaml" Secret "$fullname-seal-key" >"$tmp/seal-key.yaml"
[ "$(grep -c '^kind: Secret$' "$tmp/render-default.yaml")" = 1 ] && grep -qx 'type: flowline.io/seal-key' "$tmp/seal-key.yaml" ||
  die "the default rendering must hold one Secret, the seal key"
helm template "$rel" "$chart" -n "$ns_rel" --kube-version "$kube_version" --set sealKey.existingSecret=my-seal-key >"$tmp/render-own-seal.yaml" ||
  die "helm template (sealKey.existingSecret)"
grep -q '^kind: Secret$' "$tmp/render-own-seal.yaml" && die "sealKey.existingSecret: the chart still makes a seal key"
grep -q -- '- --seal-key-secret=my-seal-key' "$tmp/render-own-seal.yaml" || die "sealKey.existingSecret does not reach the arguments"
grep -qx -- '  resourceNames: \[my-seal-key\]' "$tmp/render-own-seal.yaml" || die "sealKey.existingSecret: the seal key Role does not name it"
for kind in HorizontalPodAutoscaler Ingress ServiceMonitor ApiKey; do
  grep -q "^kind: $kind$" "$tmp/render-default.yaml" && die "the default rendering has a $kind (it must be off by default)"
  grep -q "^kind: $kind$" "$tmp/render-full.yaml" || die "the full rendering has no $kind"
done
# One Role per process and listed namespace (and the key-migration hook's, per listed
# namespace), the leader-election Role and the seal key's.
[ "$(grep -c '^kind: Role$' "$tmp/render-namespaced.yaml")" = 8 ] || die "namespaced mode must render one Role per process and listed namespace"
[ "$(grep -c '^kind: Role$' "$tmp/render-default.yaml")" = 2 ] || die "cluster mode must render only the leader-election and the seal key's Roles"
grep -q 'resources: \[secrets\]' <(sed -n '/^kind: ClusterRole$/,/^---/p' "$tmp/render-namespaced.yaml") &&
  die "namespaced mode must not grant Secrets in a ClusterRole"
grep -q -- '- --default-plan=pro' "$tmp/render-full.yaml" || die "config.defaultPlan does not reach the arguments"
# Traces: otlp.endpoint reaches both Deployments; off by default.
[ "$(grep -c -- '- --otlp-endpoint=http://otel-collector.monitoring:4318$' "$tmp/render-full.yaml")" = 2 ] ||
  die "otlp.endpoint must reach the controller and the API Deployment"
grep -q -- '--otlp-endpoint' "$tmp/render-default.yaml" && die "traces must be off by default"
# Webhook deliveries: the controller alone gets the delivery.* flags and the CA bundle mount.
for s in default full; do
  render_doc "$tmp/render-$s.yaml" Deployment "$fullname-controller" >"$tmp/controller-$s.yaml"
  render_doc "$tmp/render-$s.yaml" Deployment "$fullname-api" >"$tmp/api-$s.yaml"
  [ -s "$tmp/controller-$s.yaml" ] && [ -s "$tmp/api-$s.yaml" ] || die "the $s rendering has no controller or API Deployment"
  grep -qE -- '--allow-cidr|--ca-bundle|--delivery-concurrency|--no-api|name: ca-bundle' "$tmp/api-$s.yaml" &&
    die "the API Deployment ($s values) got delivery flags or the CA bundle: only the controller delivers"
done
grep -q -- '- --delivery-concurrency=16$' "$tmp/controller-default.yaml" || die "the default controller lacks --delivery-concurrency=16"
grep -q -- '- --no-api$' "$tmp/controller-default.yaml" || die "the controller does not run with --no-api"
# Each Deployment runs as its own ServiceAccount.
for s in default full; do
  for d in api controller; do
    grep -qx "      serviceAccountName: $fullname-$d" "$tmp/$d-$s.yaml" || die "the $d Deployment ($s values) does not run as $fullname-$d"
  done
done
# The unauthenticated budget and the trusted proxies: the API's flags alone.
grep -qx -- ' *- --unauthenticated-requests-per-minute=60' "$tmp/api-default.yaml" || die "the default API lacks --unauthenticated-requests-per-minute=60"
grep -q -- '--trusted-proxy' "$tmp/api-default.yaml" && die "the default API trusts a proxy"
for want in '- --unauthenticated-requests-per-minute=30' '- --trusted-proxy=10.0.0.0/8' '- --trusted-proxy=192.168.1.1'; do
  grep -qF -- "$want" "$tmp/api-full.yaml" || die "api.* values: the full API lacks \"$want\""
done
# The console: served by the API pods unless console.enabled=false (--no-console); the
# Ingress publishes its paths one by one, never `/` as a prefix (that would publish
# /metrics and the health endpoints).
grep -q -- '--no-console' "$tmp/api-default.yaml" "$tmp/api-full.yaml" && die "the console is off by default"
render_doc "$tmp/render-full.yaml" Ingress "$fullname" >"$tmp/ingress-full.yaml"
for want in '- path: /v1' '- path: /assets' '- path: /workflows' '- path: /runs' '- path: /webhooks' '- path: /api-keys' '- path: /events'; do
  grep -qF -- "$want" "$tmp/ingress-full.yaml" || die "the Ingress does not route \"$want\""
done
python3 - "$tmp/ingress-full.yaml" <<'PY' || die "the Ingress must route / (Exact), /v1 and the console's prefixes, nothing else"
import re, sys
routes = re.findall(r"- path: (\S+)\n\s+pathType: (\S+)", open(sys.argv[1]).read())
want = {("/v1", "Prefix"), ("/", "Exact")} | {(p, "Prefix") for p in ["/assets", "/workflows", "/runs", "/webhooks", "/api-keys", "/events"]}
sys.exit(0 if set(routes) == want and len(routes) == len(want) else f"routes: {routes}")
PY
# shellcheck disable=SC2086
helm template "$rel" "$chart" -n "$ns_rel" --kube-version "$kube_version" ${set_flags[full]} --set console.enabled=false \
  >"$tmp/render-no-console.yaml" || die "helm template (console.enabled=false)"
render_doc "$tmp/render-no-console.yaml" Deployment "$fullname-api" >"$tmp/api-no-console.yaml"
grep -qx -- ' *- --no-console' "$tmp/api-no-console.yaml" || die "console.enabled=false does not pass --no-console to the API"
[ "$(render_doc "$tmp/render-no-console.yaml" Ingress "$fullname" | grep -c -- '- path: ')" = 1 ] ||
  die "console.enabled=false: the Ingress must route /v1 alone"
# Sharded execution: the flag, one Lease name per shard, and the member Leases' rule
# only when sharded.
helm template "$rel" "$chart" -n "$ns_rel" --kube-version "$kube_version" --set controller.shards=3 \
  >"$tmp/render-sharded.yaml" || die "helm template (controller.shards=3)"
render_doc "$tmp/render-sharded.yaml" Deployment "$fullname-controller" >"$tmp/controller-sharded.yaml"
grep -qx -- ' *- --shards=3' "$tmp/controller-sharded.yaml" || die "controller.shards=3 does not pass --shards=3"
render_doc "$tmp/render-sharded.yaml" Role "$fullname-leader-election" >"$tmp/role-sharded.yaml"
grep -qx -- ' *- --member-slots=3' "$tmp/controller-sharded.yaml" ||
  die "controller.shards=3 with one replica does not pass --member-slots=3 (the replica, a surge pod, one stopping)"
for want in "- $fullname-controller" "- $fullname-controller-shard-1" "- $fullname-controller-shard-2" \
  "- $fullname-controller-member-0" "- $fullname-controller-member-2" "verbs: [update]"; do
  grep -qxF -- "  $want" "$tmp/role-sharded.yaml" || die "controller.shards=3: the leader-election Role lacks \"$want\""
done
grep -qF -- "shard-3" "$tmp/role-sharded.yaml" && die "controller.shards=3: a fourth shard Lease is granted"
grep -qF -- "member-3" "$tmp/role-sharded.yaml" && die "controller.shards=3: a fourth member slot is granted"
grep -qE -- 'patch|delete' "$tmp/role-sharded.yaml" && die "controller.shards=3: Leases may be patched or deleted"
render_doc "$tmp/render-default.yaml" Role "$fullname-leader-election" >"$tmp/role-default.yaml"
grep -qE -- 'shard-|member-|patch|delete' "$tmp/role-default.yaml" &&
  die "the default (one shard) leader-election Role grants shard or member Leases"
grep -qE -- '--unauthenticated-requests|--trusted-proxy|--default-plan|--enterprise-requests' "$tmp/controller-full.yaml" &&
  die "the controller got the API's rate-limit flags (it serves no /v1)"
# Every rendering's arguments parse as flags of the Deployment's subcommand: `flowline
# api` refuses the controller's flags. A trailing --help makes the binary stop once
# clap has accepted every argument before it (and fail on the first it does not).
for s in "${sets[@]}" no-console; do
  for d in api controller; do
    mapfile -t rendered_args < <(render_doc "$tmp/render-$s.yaml" Deployment "$fullname-$d" |
      sed -n '/^        args:$/,/^        env:$/p' | sed -n 's/^        - //p' | sed -e 's/^"\(.*\)"$/\1/' -e "s/^'\(.*\)'$/\1/")
    [ "${#rendered_args[@]}" -gt 1 ] || die "no arguments found in the $d Deployment ($s values)"
    "$flowline_src" "${rendered_args[@]}" --help >/dev/null 2>"$tmp/out" ||
      { cat "$tmp/out" >&2; die "the $d Deployment's arguments ($s values) do not parse: flowline ${rendered_args[*]}"; }
  done
done
log "the arguments of both Deployments parse as flowline api / flowline operator flags in every rendering"
grep -qE -- '- --step-image=.+:.+$' "$tmp/controller-default.yaml" || die "the controller does not pass its own image as --step-image"
grep -qE -- '--allow-cidr|--ca-bundle|volumes:' "$tmp/controller-default.yaml" &&
  die "the default controller allows private networks or mounts a CA bundle"
for want in '- --delivery-concurrency=32' '- --allow-cidr=10.0.0.0/8' '- --allow-cidr=fd00::/8' \
  '- --ca-bundle=/etc/flowline/ca/bundle.pem' 'mountPath: /etc/flowline/ca' 'name: corp-ca' \
  '- {key: "bundle.pem", path: "bundle.pem"}'; do
  grep -qF -- "$want" "$tmp/controller-full.yaml" || die "delivery.* values: the full controller lacks \"$want\""
done
# Namespaced mode: both Deployments watch the listed namespaces (--watch-namespace);
# in cluster mode neither gets the flag.
for d in api controller; do
  render_doc "$tmp/render-namespaced.yaml" Deployment "$fullname-$d" >"$tmp/$d-namespaced.yaml"
  grep -qxE -- " *- --watch-namespace=$ns_a,$ns_b" "$tmp/$d-namespaced.yaml" ||
    die "namespaced mode: the $d Deployment lacks --watch-namespace=$ns_a,$ns_b"
  for s in default full; do
    grep -q -- '--watch-namespace' "$tmp/$d-$s.yaml" && die "cluster mode ($s values): the $d Deployment got --watch-namespace"
  done
done
# Each listed namespace's Role of a process grants exactly the rules of that process's
# cluster-mode ClusterRole; the Namespace objects are readable by the API alone, by name
# only, the listed ones (cluster mode: all).
python3 - "$tmp/render-default.yaml" "$tmp/render-namespaced.yaml" "$fullname" "$ns_a" "$ns_b" <<'PY' || die "namespaced RBAC rendering (above)"
import sys
default, namespaced, fullname, ns_a, ns_b = sys.argv[1:6]
def find(path, kind, name, namespace=None):
    found = [d for d in open(path).read().split("\n---\n")
             if f"\nkind: {kind}\n" in f"\n{d}\n" and f"\n  name: {name}\n" in f"{d}\n"
             and (namespace is None or f"\n  namespace: {namespace}\n" in f"{d}\n")]
    if len(found) != 1:
        sys.exit(f"{path}: {len(found)} {kind} {name} {namespace or ''}, want 1")
    return found[0]
rules = lambda doc: doc[doc.index("\nrules:\n"):].strip()
for process in ("api", "controller"):
    want = rules(find(default, "ClusterRole", f"{fullname}-{process}"))
    for ns in (ns_a, ns_b):
        if rules(find(namespaced, "Role", f"{fullname}-{process}", ns)) != want:
            sys.exit(f"the {process} Role in {ns} differs from the cluster-mode ClusterRole's rules")
    # The controller's cluster-wide rules are the three CRDs, nothing else.
    for path in (default, namespaced):
        if "namespaces" in rules(find(path, "ClusterRole", f"{fullname}-controller-cluster")):
            sys.exit(f"{path}: the controller may read Namespace objects")
def namespaces_rule(path):
    doc = rules(find(path, "ClusterRole", fullname + "-api-cluster"))
    return doc[doc.index("  resources: [namespaces]\n"):].split("\n- ")[0]
ns_rule = namespaces_rule(namespaced)
if f"  resourceNames:\n    - {ns_a}\n    - {ns_b}\n  verbs: [get, list, watch]" not in ns_rule:
    sys.exit(f"namespaced mode: the namespaces rule is not limited to {ns_a} and {ns_b}:\n{ns_rule}")
if "resourceNames" in namespaces_rule(default):
    sys.exit("cluster mode: the namespaces rule is limited by resourceNames")
PY

# The values of pods, ServiceAccounts, probes, PDBs, images, routes and aggregated roles
# (grep reads render_doc's output to the end: `grep -q` would break its pipe).
for d in api controller; do
  render_doc "$tmp/render-gateway.yaml" Deployment "$fullname-$d" >"$tmp/$d-gateway.yaml"
  for want in 'example.com/tier: ' 'annotations:' 'example.com/scrape-logs: "true"' '- name: FLOWLINE_CHART_TEST' \
    'value: extra-env' 'name: scratch' 'mountPath: /scratch' 'sizeLimit: 16Mi' \
    'failureThreshold: 20' 'periodSeconds: 15' 'timeoutSeconds: 2' 'failureThreshold: 3'; do
    grep -qF -- "$want" "$tmp/$d-full.yaml" || die "the full $d Deployment lacks \"$want\" (podLabels, podAnnotations, extraEnv, extraVolumes, probes)"
  done
  # extraArgs come last, after the component's own flags, then the component's own
  # extraArgs (controller.extraArgs, api.extraArgs).
  case $d in
    api) own_extra=--trusted-proxy=172.16.0.0/12 other_extra=--leader-lease-seconds=20 ;;
    controller) own_extra=--leader-lease-seconds=20 other_extra=--trusted-proxy=172.16.0.0/12 ;;
  esac
  last_args=$(sed -n '/^        args:$/,/^        env:$/p' "$tmp/$d-full.yaml" | grep -- '^        - ' | tail -2 | tr -d '\n')
  [ "$last_args" = "        - --crd-wait-seconds=45        - $own_extra" ] ||
    die "the full $d Deployment's last arguments are $last_args, not extraArgs then $d.extraArgs"
  grep -qF -- "$other_extra" "$tmp/$d-full.yaml" && die "the $d Deployment got the other process's extraArgs ($other_extra)"
  grep -qF -- 'periodSeconds: 2' "$tmp/$d-default.yaml" && grep -qF -- 'failureThreshold: 30' "$tmp/$d-default.yaml" ||
    die "the default $d Deployment lost the default startup probe"
  grep -qE -- 'priorityClassName|@sha256:|FLOWLINE_CHART_TEST|/scratch' "$tmp/$d-default.yaml" &&
    die "the default $d Deployment got an optional pod setting"
  grep -qx "      priorityClassName: flowline-critical" "$tmp/$d-gateway.yaml" || die "priorityClassName does not reach the $d pods"
  grep -qF 'image: "flowline@sha256:0123456789abcdef' "$tmp/$d-gateway.yaml" || die "image.digest does not pin the $d image"
done
grep -qF -- '- --step-image=flowline@sha256:0123456789abcdef' "$tmp/controller-gateway.yaml" || die "image.digest does not pin the step Jobs' image"
for d in api controller; do
  render_doc "$tmp/render-full.yaml" ServiceAccount "$fullname-$d" | grep -F 'eks.amazonaws.com/role-arn: arn:aws:iam::123456789012:role/flowline' >/dev/null ||
    die "serviceAccount.annotations do not reach the $d ServiceAccount"
  render_doc "$tmp/render-full.yaml" PodDisruptionBudget "$fullname-$d" | grep -x '  maxUnavailable: 50%' >/dev/null ||
    die "podDisruptionBudget.maxUnavailable does not reach the $d PDB"
  render_doc "$tmp/render-default.yaml" PodDisruptionBudget "$fullname-$d" | grep -x '  maxUnavailable: 1' >/dev/null ||
    die "the default $d PDB does not allow one pod down"
done
grep -q '^kind: PodDisruptionBudget$' "$tmp/render-gateway.yaml" && die "podDisruptionBudget.enabled=false still renders a PDB"
render_doc "$tmp/render-gateway.yaml" HTTPRoute "$fullname" >"$tmp/route.yaml"
for want in '- name: public' 'namespace: gateway-system' 'sectionName: https' '- flowline.example.com' \
  '- path: {type: PathPrefix, value: /v1}' "- name: $fullname" 'port: 80' 'example.com/team: automation'; do
  grep -qF -- "$want" "$tmp/route.yaml" || die "the HTTPRoute lacks \"$want\""
done
for s in default full namespaced; do
  grep -q '^kind: HTTPRoute$' "$tmp/render-$s.yaml" && die "the $s rendering has an HTTPRoute (off by default)"
done
for role in view edit; do
  render_doc "$tmp/render-default.yaml" ClusterRole "$fullname-$role" | grep -x "    rbac.authorization.k8s.io/aggregate-to-$role: \"true\"" >/dev/null ||
    die "no ClusterRole $fullname-$role aggregated into $role"
  [ -z "$(render_doc "$tmp/render-gateway.yaml" ClusterRole "$fullname-$role")" ] || die "rbac.aggregateToDefaultRoles=false still renders $fullname-$role"
done
grep -q '^kind: Service$' "$tmp/render-gateway.yaml" || die "the gateway rendering has no Service for the route"
log "pod metadata, ServiceAccount annotations, extra env/args/volumes, probes, PDBs, image digest, priorityClassName, HTTPRoute and aggregated roles render as set"

# Per-component pod settings over the shared ones, topology spread, ServiceAccounts
# (brought or named), commonLabels, extraObjects, egress NetworkPolicy, ServiceMonitor
# and PodMonitor: where each value lands, object by object (the renderings as JSON).
for s in "${sets[@]}"; do
  kubectl create --dry-run=client --validate=false -o json -f "$tmp/render-$s.yaml" >"$tmp/render-$s.json" ||
    die "kubectl could not read the $s rendering"
done
python3 - "$tmp" "$rel" "$fullname" "$ns_rel" "$ns_other" <<'PY' || die "per-component settings, ServiceAccounts, commonLabels, extraObjects, egress or monitors (above)"
import json, sys
tmp, rel, fullname, ns_rel, ns_other = sys.argv[1:6]
def documents(path):
    text, at, decoder = open(path).read(), 0, json.JSONDecoder()
    while text[at:].strip():
        doc, at = decoder.raw_decode(text, len(text) - len(text[at:].lstrip()))
        yield from doc["items"] if doc.get("kind", "").endswith("List") else [doc]
render = {s: list(documents(f"{tmp}/render-{s}.json")) for s in ("default", "full", "namespaced", "gateway", "components")}
failures = []
def check(ok, what):
    if not ok:
        failures.append(what)
def objects(s, kind, name=None):
    return [o for o in render[s] if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
def one(s, kind, name):
    found = objects(s, kind, name)
    check(len(found) == 1, f"{s}: {len(found)} {kind} {name}, want 1")
    return found[0] if found else {"metadata": {}, "spec": {}}
def pod(s, component):
    return one(s, "Deployment", f"{fullname}-{component}")["spec"]["template"]
def selector(component, instance=True):
    labels = {"app.kubernetes.io/name": "flowline", "app.kubernetes.io/component": component}
    if instance:
        labels["app.kubernetes.io/instance"] = rel
    return {"matchLabels": labels}
def soft_spread(component, key="kubernetes.io/hostname"):
    return {"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": selector(component)}
def same(s, what, got, want):
    check(got == want, f"{s}: {what} is {json.dumps(got)}, want {json.dumps(want)}")
defaults = {
    "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
    "container": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}},
}

# Defaults: both Deployments spread softly over nodes, the shared security contexts, no
# placement, ingress-only NetworkPolicies, the chart's ServiceAccounts, no monitors.
for c in ("api", "controller"):
    t = pod("default", c)["spec"]
    same("default", f"{c} topologySpreadConstraints", t.get("topologySpreadConstraints"), [soft_spread(c)])
    same("default", f"{c} pod securityContext", t.get("securityContext"), defaults["securityContext"])
    same("default", f"{c} container securityContext", t["containers"][0].get("securityContext"), defaults["container"])
    for key in ("nodeSelector", "tolerations", "affinity", "priorityClassName"):
        check(key not in t, f"default: the {c} pods have a {key}")
    same("default", f"{c} serviceAccountName", t["serviceAccountName"], f"{fullname}-{c}")
    one("default", "ServiceAccount", f"{fullname}-{c}")
    np = one("default", "NetworkPolicy", f"{fullname}-{c}")["spec"]
    same("default", f"{c} NetworkPolicy policyTypes", np.get("policyTypes"), ["Ingress"])
    check("egress" not in np, f"default: the {c} NetworkPolicy has egress rules")
for kind in ("PodMonitor", "ServiceMonitor"):
    check(not objects("default", kind), f"default: a {kind} (off by default)")

# full (installed by step 4): the controller replaces the shared placement and container
# securityContext, the API its pod securityContext; labels and annotations merge.
ctl, api = pod("full", "controller"), pod("full", "api")
same("full", "controller nodeSelector", ctl["spec"].get("nodeSelector"), {"kubernetes.io/arch": "amd64"})
same("full", "API nodeSelector (shared)", api["spec"].get("nodeSelector"), {"kubernetes.io/os": "linux"})
same("full", "controller tolerations", ctl["spec"].get("tolerations"),
     [{"key": "dedicated", "operator": "Equal", "value": "flowline-controller", "effect": "NoSchedule"}])
same("full", "API tolerations (shared)", api["spec"].get("tolerations"),
     [{"key": "dedicated", "operator": "Equal", "value": "flowline", "effect": "NoSchedule"}])
check(list(ctl["spec"].get("affinity", {})) == ["podAntiAffinity"], "full: the controller's affinity is not its podAntiAffinity")
check("affinity" not in api["spec"], "full: the API pods got an affinity")
same("full", "controller topologySpreadConstraints", ctl["spec"].get("topologySpreadConstraints"),
     [soft_spread("controller", "topology.kubernetes.io/zone")])
same("full", "API topologySpreadConstraints", api["spec"].get("topologySpreadConstraints"), [soft_spread("api")])
same("full", "controller container securityContext", ctl["spec"]["containers"][0].get("securityContext"),
     dict(defaults["container"], runAsNonRoot=True))
same("full", "API container securityContext (shared)", api["spec"]["containers"][0].get("securityContext"), defaults["container"])
same("full", "controller pod securityContext (shared)", ctl["spec"].get("securityContext"), defaults["securityContext"])
same("full", "API pod securityContext", api["spec"].get("securityContext"), dict(defaults["securityContext"], fsGroup=65532))
for c, t, team, tier in (("controller", ctl, "control-plane", "control"), ("api", api, "automation", "edge")):
    labels = t["metadata"]["labels"]
    same("full", f"{c} pod label team", labels.get("team"), team)
    same("full", f"{c} pod label example.com/tier", labels.get("example.com/tier"), tier)
    same("full", f"{c} pod label example.com/cost-center (commonLabels)", labels.get("example.com/cost-center"), "4242")
    same("full", f"{c} pod annotation example.com/scrape-logs (shared)", t["metadata"].get("annotations", {}).get("example.com/scrape-logs"), "true")
same("full", "controller pod annotation", ctl["metadata"]["annotations"].get("example.com/component-note"), "controller")
check("example.com/component-note" not in api["metadata"].get("annotations", {}), "full: the API pods got the controller's annotation")
same("full", "controller ServiceAccount annotations", one("full", "ServiceAccount", f"{fullname}-controller")["metadata"].get("annotations"),
     {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/flowline", "example.com/identity": "controller"})
same("full", "API ServiceAccount annotations", one("full", "ServiceAccount", f"{fullname}-api")["metadata"].get("annotations"),
     {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/flowline"})
# commonLabels on every object the chart templates; extraObjects rendered with tpl.
for o in render["full"]:
    labels = o["metadata"].get("labels", {})
    if labels.get("app.kubernetes.io/instance") == rel:
        same("full", f"{o['kind']} {o['metadata']['name']} label example.com/cost-center", labels.get("example.com/cost-center"), "4242")
        same("full", f"{o['kind']} {o['metadata']['name']} label app.kubernetes.io/part-of", labels.get("app.kubernetes.io/part-of"), "flowline")
extra = one("full", "ConfigMap", f"{fullname}-extra")
same("full", "extraObjects ConfigMap", (extra["metadata"].get("namespace"), extra.get("data")), (ns_rel, {"release": rel}))
# Egress: DNS, the API server, extraRules for both; destinations for the controller alone.
dns = {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}],
       "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
               "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}]}
apiserver = {"to": [{"ipBlock": {"cidr": "127.0.0.1/32"}}], "ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]}
otlp = {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}], "ports": [{"port": 4318, "protocol": "TCP"}]}
deliveries = {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"]}}],
              "ports": [{"port": 443, "protocol": "TCP"}]}
for c, want in (("api", [dns, apiserver, otlp]), ("controller", [dns, apiserver, otlp, deliveries])):
    np = one("full", "NetworkPolicy", f"{fullname}-{c}")["spec"]
    same("full", f"{c} NetworkPolicy policyTypes", np.get("policyTypes"), ["Ingress", "Egress"])
    same("full", f"{c} NetworkPolicy egress", np.get("egress"), want)
sm = one("full", "ServiceMonitor", fullname)
same("full", "ServiceMonitor namespace", sm["metadata"].get("namespace"), ns_rel)
same("full", "ServiceMonitor annotations", sm["metadata"].get("annotations"), {"example.com/dashboard": "flowline"})
same("full", "ServiceMonitor label release", sm["metadata"]["labels"].get("release"), "kube-prometheus-stack")
same("full", "ServiceMonitor endpoints", sm["spec"]["endpoints"], [{
    "port": "http", "path": "/metrics", "interval": "15s", "scrapeTimeout": "10s",
    "relabelings": [{"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}],
    "metricRelabelings": [{"sourceLabels": ["__name__"], "regex": "flowline_http_request_duration_seconds_bucket", "action": "drop"}]}])

# components: a brought ServiceAccount for the controller (no object of the chart's, every
# binding names it), a named one for the API; the controller replaces every shared pod
# setting, the API keeps them.
sa_ctl, sa_api = "flowline-controller-byo", "flowline-api-sa"
check(not [o for o in objects("components", "ServiceAccount")
           if o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "controller"],
      "components: the chart created a ServiceAccount for the controller (serviceAccount.create=false)")
check(not objects("components", "ServiceAccount", f"{fullname}-controller") and not objects("components", "ServiceAccount", f"{fullname}-api"),
      "components: a ServiceAccount of the default names was rendered")
same("components", "API ServiceAccount annotations", one("components", "ServiceAccount", sa_api)["metadata"].get("annotations"),
     {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/flowline",
      "iam.gke.io/gcp-service-account": "flowline-api@example.iam.gserviceaccount.com"})
same("components", "the brought ServiceAccount (extraObjects)", one("components", "ServiceAccount", sa_ctl)["metadata"].get("namespace"), ns_rel)
bindings = {"controller": [("ClusterRoleBinding", f"{fullname}-controller"), ("ClusterRoleBinding", f"{fullname}-controller-cluster"),
                           ("RoleBinding", f"{fullname}-leader-election")],
            "api": [("ClusterRoleBinding", f"{fullname}-api"), ("ClusterRoleBinding", f"{fullname}-api-cluster")]}
for c, sa in (("controller", sa_ctl), ("api", sa_api)):
    for kind, name in bindings[c]:
        same("components", f"{kind} {name} subjects", one("components", kind, name).get("subjects"),
             [{"kind": "ServiceAccount", "name": sa, "namespace": ns_rel}])
    same("components", f"{c} serviceAccountName", pod("components", c)["spec"]["serviceAccountName"], sa)
ctl, api = pod("components", "controller")["spec"], pod("components", "api")["spec"]
same("components", "controller priorityClassName", ctl.get("priorityClassName"), "flowline-critical")
same("components", "API priorityClassName (shared)", api.get("priorityClassName"), "flowline-default")
same("components", "controller nodeSelector", ctl.get("nodeSelector"), {"example.com/pool": "control"})
same("components", "API nodeSelector (shared)", api.get("nodeSelector"), {"kubernetes.io/os": "linux"})
same("components", "controller tolerations", ctl.get("tolerations"), [{"key": "example.com/control", "operator": "Exists", "effect": "NoSchedule"}])
same("components", "API tolerations (shared)", api.get("tolerations"), [{"key": "dedicated", "operator": "Equal", "value": "flowline", "effect": "NoSchedule"}])
check(list(ctl.get("affinity", {})) == ["podAntiAffinity"], "components: the controller's affinity is not its own (podAntiAffinity alone)")
check(list(api.get("affinity", {})) == ["nodeAffinity"], "components: the API's affinity is not the shared one (nodeAffinity)")
check("topologySpreadConstraints" not in ctl, "components: controller.topologySpreadConstraints=[] still spreads")
same("components", "API topologySpreadConstraints", api.get("topologySpreadConstraints"), [
    soft_spread("api", "topology.kubernetes.io/zone"),
    {"maxSkew": 2, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": selector("api", instance=False)}])
same("components", "controller pod securityContext", ctl.get("securityContext"),
     {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001, "seccompProfile": {"type": "RuntimeDefault"}})
same("components", "API pod securityContext", api.get("securityContext"), {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}})
same("components", "controller container securityContext", ctl["containers"][0].get("securityContext"), dict(defaults["container"], privileged=False))
same("components", "API container securityContext (shared)", api["containers"][0].get("securityContext"), defaults["container"])
for c, team, note in (("controller", "control-plane", "controller"), ("api", "automation", "shared")):
    meta = pod("components", c)["metadata"]
    same("components", f"{c} pod label team", meta["labels"].get("team"), team)
    same("components", f"{c} pod annotations", meta.get("annotations"), {"example.com/shared": "yes", "example.com/overridden": note})
for o in render["components"]:
    labels = o["metadata"].get("labels", {})
    if labels.get("app.kubernetes.io/instance") == rel and labels.get("app.kubernetes.io/name") == "flowline":
        same("components", f"{o['kind']} {o['metadata']['name']} label app.kubernetes.io/part-of (commonLabels)",
             labels.get("app.kubernetes.io/part-of"), "automation-platform")
for c in ("controller", "api"):
    same("components", f"{c} pod label app.kubernetes.io/part-of", pod("components", c)["metadata"]["labels"].get("app.kubernetes.io/part-of"), "automation-platform")
same("components", "extraObjects PriorityClass (a string, through tpl)", one("components", "PriorityClass", "flowline-critical").get("description"),
     f"Flowline's controller ({ns_rel}/{fullname})")
np = {c: one("components", "NetworkPolicy", f"{fullname}-{c}")["spec"].get("egress") for c in ("api", "controller")}
local_dns = {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}], "to": [{"ipBlock": {"cidr": "169.254.20.10/32"}}]}
apiservers = {"to": [{"ipBlock": {"cidr": "10.0.0.2/32"}}, {"ipBlock": {"cidr": "10.0.0.3/32"}}], "ports": [{"port": 6443, "protocol": "TCP"}]}
same("components", "API egress", np["api"], [local_dns, apiservers])
same("components", "controller egress", np["controller"], [local_dns, apiservers, {"to": [{"ipBlock": {"cidr": "203.0.113.0/24"}}],
     "ports": [{"port": 443, "protocol": "TCP"}, {"port": 8443, "endPort": 8450, "protocol": "TCP"}]}])
sm = one("components", "ServiceMonitor", fullname)
same("components", "ServiceMonitor namespace and namespaceSelector", (sm["metadata"].get("namespace"), sm["spec"].get("namespaceSelector")),
     (ns_other, {"matchNames": [ns_rel]}))
check("scrapeTimeout" not in sm["spec"]["endpoints"][0], "components: an empty serviceMonitor.scrapeTimeout was rendered")

# gateway: a PodMonitor (in another namespace), no ServiceMonitor nor headless Service.
check(not objects("gateway", "ServiceMonitor") and not objects("gateway", "Service", f"{fullname}-controller"),
      "gateway: a ServiceMonitor or the controller's headless Service beside the PodMonitor")
pm = one("gateway", "PodMonitor", fullname)
same("gateway", "PodMonitor namespace", pm["metadata"].get("namespace"), ns_other)
same("gateway", "PodMonitor spec", pm.get("spec"), {
    "selector": {"matchLabels": {"app.kubernetes.io/name": "flowline", "app.kubernetes.io/instance": rel}},
    "namespaceSelector": {"matchNames": [ns_rel]},
    "podMetricsEndpoints": [{"port": "http", "path": "/metrics", "interval": "1m", "scrapeTimeout": "20s",
        "relabelings": [{"sourceLabels": ["__meta_kubernetes_pod_label_app_kubernetes_io_component"], "targetLabel": "component"}],
        "metricRelabelings": [{"regex": "pod_template_hash", "action": "labeldrop"}]}]})
same("gateway", "PodMonitor label release", pm["metadata"]["labels"].get("release"), "kube-prometheus-stack")
# namespaced: the default names in every RoleBinding.
for o in objects("namespaced", "RoleBinding"):
    for subject in o.get("subjects", []):
        check(subject["name"] in (f"{fullname}-api", f"{fullname}-controller", f"{fullname}-key-migration"),
              f"namespaced: RoleBinding {o['metadata']['name']} binds {subject['name']}")

if failures:
    print("\n".join(failures), file=sys.stderr)
    sys.exit(1)
PY
log "per-component pod settings over the shared ones (placement, priority, security contexts, metadata), topology spread"
log "  (default, replaced, none), brought and named ServiceAccounts bound by every binding, commonLabels on every object,"
log "  extraObjects through tpl, egress rules (DNS, API server, destinations, extraRules), ServiceMonitor and PodMonitor render as set"

# Wrong values fail at install time, with a message that says why.
bad_values=(
  "controller.replicas=-1|minimum: got -1, want 0"
  "config.defaultPlan=gold|value must be one of"
  "imagee.tag=x|additional properties 'imagee' not allowed"
  "watchNamespaces={Bad_NS}|does not match pattern"
  "api.autoscaling.enabled=yes|got string, want boolean"
  "ingress.enabled=true|ingress.enabled needs ingress.host"
  "console.enabled=no|got string, want boolean"
  "service.type=Internal|value must be one of"
  "serviceMonitor.interval=soon|does not match pattern"
  "delivery.concurrency=0|minimum: got 0, want 1"
  "delivery.allowCidrs={localhost}|does not match pattern"
  "delivery.caBundle.configMap=Corp_CA|does not match pattern"
  "api.trustedProxies={proxy.local}|does not match pattern"
  "api.unauthenticatedRequestsPerMinute=0|minimum: got 0, want 1"
  "image.digest=latest|does not match pattern"
  "priorityClassName=Top_Priority|does not match pattern"
  "extraArgs={verbose}|does not match pattern"
  "api.extraArgs={verbose}|does not match pattern"
  "controller.extraArgs={-v}|does not match pattern"
  "httpRoute.enabled=true|httpRoute.enabled needs httpRoute.parentRefs"
  "podLabels.app\\.kubernetes\\.io/component=other|podLabels may not set app.kubernetes.io/component"
  "podDisruptionBudget.maxUnavailable=half|does not match pattern '^[0-9]+%$'"
  "probes.liveness.periodSeconds=0|minimum: got 0, want 1"
  "controller.shards=0|minimum: got 0, want 1"
  "controller.shards=65|maximum: got 65, want 64"
  "controller.serviceAccount.name=Flowline_SA|does not match pattern"
  "api.serviceAccount.create=no|got string, want boolean"
  "controller.topologySpreadConstraints[0].whenUnsatisfiable=Sometimes|value must be one of"
  "api.priorityClassName=Top_Priority|does not match pattern"
  "controller.podLabels.app\\.kubernetes\\.io/component=other|controller.podLabels may not set app.kubernetes.io/component"
  "commonLabels.app\\.kubernetes\\.io/instance=other|commonLabels may not set app.kubernetes.io/instance"
  "commonLabels.team=two words|does not match pattern"
  "extraObjects={42}|extraObjects/0"
  "networkPolicy.egress.enabled=true|networkPolicy.egress.enabled needs networkPolicy.egress.kubeAPIServer.cidrs"
  "networkPolicy.egress.kubeAPIServer.cidrs={10.0.0.1}|does not match pattern"
  "networkPolicy.enabled=false,networkPolicy.egress.enabled=true|networkPolicy.egress.enabled needs networkPolicy.enabled"
  "serviceMonitor.scrapeTimeout=soon|does not match pattern"
  "podMonitor.relabelings[0].action=explode|value must be one of"
  "serviceMonitor.enabled=true,podMonitor.enabled=true|enable one"
)
for entry in "${bad_values[@]}"; do
  refused "helm template --set ${entry%%|*}" "${entry#*|}" \
    helm template "$rel" "$chart" -n "$ns_rel" --kube-version "$kube_version" --set "${entry%%|*}"
done
refused "an HPA without a CPU request" "needs api.resources.requests.cpu" \
  helm template "$rel" "$chart" --kube-version "$kube_version" --set api.autoscaling.enabled=true --set api.resources.requests=null
refused "a bootstrap key outside watchNamespaces" "is not one of watchNamespaces" \
  helm template "$rel" "$chart" --kube-version "$kube_version" --set "watchNamespaces={$ns_a}" \
  --set bootstrapAdminKey.enabled=true --set bootstrapAdminKey.namespace="$ns_b"
log "${#bad_values[@]} + 2 wrong value sets refused with their reason"

# ---------------------------------------------------------------------------------------
step "3. server-side dry run, kubeconform -strict and kube-score of every rendering"
for s in "${sets[@]}"; do
  quiet "server-side dry run ($s values)" kubectl apply --dry-run=server --validate=strict -f "$tmp/render-$s.yaml"
done
quiet "the documented CRD upgrade command (dry run)" \
  kubectl apply --server-side --force-conflicts --dry-run=server -f "$chart/crds/"
log "all renderings and the chart's CRDs accepted by the API server"

# kubeconform, offline: JSON schemas of every kind this API server serves, generated
# from its /openapi/v2 document, in the "-strict" flavour kubeconform's -strict asks for
# (no property a schema does not list). Custom resources from their CRDs' own
# openAPIV3Schema instead (the v2 document only approximates those): Flowline's from
# crds/flowline.yaml, so examples/ is validated against the CRDs the chart ships, and
# the stand-in monitoring and Gateway API CRDs above. No kind is skipped and a kind
# without a schema fails.
kubectl get --raw /openapi/v2 >"$tmp/openapi-v2.json" || die "kubectl get --raw /openapi/v2"
kubectl get crd -o json >"$tmp/cluster-crds.json" || die "kubectl get crd"
kubectl create --dry-run=client --validate=false -o json -f "$repo/crds/flowline.yaml" >"$tmp/flowline-crds.json" ||
  die "kubectl could not read crds/flowline.yaml"
python3 - "$tmp/openapi-v2.json" "$tmp/schemas" "$tmp/flowline-crds.json" "$tmp/cluster-crds.json" <<'PY' >"$tmp/out" 2>&1 ||
import copy, json, os, sys

# argv: openapi-v2.json out-dir crds.json... (CustomResourceDefinitions as JSON; for
# a kind in several files, the first file's)
openapi, out, crd_files = sys.argv[1], sys.argv[2], sys.argv[3:]
defs = json.load(open(openapi))["definitions"]
META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"

def strict(node):
    """kubeconform's -strict looks for the -strict flavour of a schema: every object
    schema that lists its properties gets additionalProperties: false (as
    openapi2jsonschema --strict does), unless it keeps unknown fields. Also JSON
    Schema for OpenAPI's nullable and int-or-string."""
    if not isinstance(node, dict):
        return node
    node = dict(node)
    for kw in ("properties", "patternProperties", "definitions"):
        if isinstance(node.get(kw), dict):
            node[kw] = {k: strict(v) for k, v in node[kw].items()}
    for kw in ("items", "additionalProperties", "not"):
        if isinstance(node.get(kw), dict):
            node[kw] = strict(node[kw])
        elif isinstance(node.get(kw), list):
            node[kw] = [strict(v) for v in node[kw]]
    for kw in ("allOf", "anyOf", "oneOf"):
        if isinstance(node.get(kw), list):
            node[kw] = [strict(v) for v in node[kw]]
    if node.pop("x-kubernetes-int-or-string", False) or node.get("format") == "int-or-string":
        node.pop("type", None)
        node.pop("format", None)
        node["oneOf"] = [{"type": "string"}, {"type": "integer"}]
    if node.pop("nullable", False) and isinstance(node.get("type"), str):
        node["type"] = [node["type"], "null"]
    if ("properties" in node and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")):
        node["additionalProperties"] = False
    return node

# A Quantity is a string or a number in YAML; the v2 document says string only.
defs["io.k8s.apimachinery.pkg.api.resource.Quantity"] = {"oneOf": [{"type": "string"}, {"type": "number"}]}
defs = {name: strict(d) for name, d in defs.items()}

def refs(node, found):
    if isinstance(node, dict):
        r = node.get("$ref")
        if isinstance(r, str) and r.startswith("#/definitions/"):
            name = r[len("#/definitions/"):]
            if name not in found:
                found.add(name)
                refs(defs[name], found)
        for v in node.values():
            refs(v, found)
    elif isinstance(node, list):
        for v in node:
            refs(v, found)
    return found

written = {}
def write(group, version, kind, schema, source):
    """<out>/<group>/<kind>_<version>.json, the layout of the schema location
    {{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json; the core group is
    "v1" there (kubeconform's .Group of apiVersion v1)."""
    path = os.path.join(out, group or version, f"{kind.lower()}_{version}.json")
    schema = dict(schema)
    schema["definitions"] = {n: defs[n] for n in sorted(refs(schema, set()))}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(schema, f)
    written[path] = source

# Built-in kinds (and whatever else the API server serves), from /openapi/v2.
for name, d in defs.items():
    for gvk in d.get("x-kubernetes-group-version-kind", []):
        write(gvk["group"], gvk["version"], gvk["kind"], d, "openapi")

# CRDs from their own openAPIV3Schema, which the v2 document only approximates
# (it drops nullable, int-or-string and types under them). They replace what the
# v2 document gave for the same kinds.
def documents(path):
    """The objects of `kubectl create --dry-run=client -o json`: one JSON document per
    object, one after the other (or a List)."""
    text, at, decoder = open(path).read(), 0, json.JSONDecoder()
    while text[at:].strip():
        doc, end = decoder.raw_decode(text, at + len(text[at:]) - len(text[at:].lstrip()))
        yield from doc["items"] if doc.get("kind", "").endswith("List") else [doc]
        at = end

from_crds = set()
for crd in (c for path in crd_files for c in documents(path)):
    spec = crd["spec"]
    if (spec["group"], spec["names"]["kind"]) in from_crds:
        continue
    from_crds.add((spec["group"], spec["names"]["kind"]))
    for v in spec["versions"]:
        schema = strict(copy.deepcopy(v["schema"]["openAPIV3Schema"]))
        props = schema.setdefault("properties", {})
        props["apiVersion"] = {"type": "string", "enum": [f"{spec['group']}/{v['name']}"]}
        props["kind"] = {"type": "string", "enum": [spec["names"]["kind"]]}
        props["metadata"] = {"$ref": f"#/definitions/{META}"}
        schema["additionalProperties"] = False
        write(spec["group"], v["name"], spec["names"]["kind"], schema, "crd")

print(f"{len(written)} schemas ({sum(1 for s in written.values() if s == 'crd')} from CRDs)")
PY
  { cat "$tmp/out" >&2; die "could not generate the JSON schemas"; }
log "kubeconform schemas: $(cat "$tmp/out")"
kubeconform_files=("$tmp"/render-*.yaml "$repo"/examples/*.yaml "$repo/crds/flowline.yaml")
"$kubeconform" -strict -summary -n 4 \
  -schema-location "$tmp/schemas/{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json" \
  "${kubeconform_files[@]}" >"$tmp/out" 2>&1 || { cat "$tmp/out" >&2; die "kubeconform -strict"; }
grep -qE 'Invalid: 0, Errors: 0, Skipped: 0$' "$tmp/out" || { cat "$tmp/out" >&2; die "kubeconform skipped a resource"; }
log "kubeconform $KUBECONFORM_VERSION -strict: $(tail -n 1 "$tmp/out") (${#kubeconform_files[@]} files: every rendering, examples/, the CRDs)"

# kube-score on each value set, failing on warnings too. What it is told to skip, and why:
#   --ignore-container-cpu-limit: no CPU limit by default, on purpose. CFS throttling
#     delays a busy controller's Lease renewals, and a leader that misses them exits
#     (status 3); the CPU request reserves what the pods need. controller.resources and
#     api.resources accept a limit. (Memory requests and limits and the CPU request are
#     still checked.)
#   container-ephemeral-storage-request-and-limit: the containers write nothing to the
#     node's disk (read-only root filesystem, no emptyDir unless extraVolumes adds one);
#     their only ephemeral storage is the container log, which the kubelet's log rotation
#     bounds, not the chart. A limit would get the pods evicted on nodes whose rotation
#     keeps more. resources accept ephemeral-storage.
#   deployment-has-host-podantiaffinity: the Deployments spread over nodes with
#     topologySpreadConstraints (controller.* and api.*; kube-score's own
#     pod-topology-spread-constraints check passes); this check looks at podAntiAffinity
#     only. A hard anti-affinity is one value away (controller.affinity, api.affinity).
# Per value set:
#   container-image-pull-policy (all but full, which sets image.pullPolicy=Always):
#     IfNotPresent is the default because the image is pinned (the chart's appVersion as
#     the tag, or image.digest), so a pull cannot change what runs, and pods restart
#     while the registry is unreachable. kube-score wants Always so that imagePullSecrets
#     are checked at every start; image.pullPolicy=Always does that.
#   pod-networkpolicy (default, namespaced, gateway): egress rules are off by default
#     (networkPolicy.egress.enabled): deliveries and http.request steps go to URLs users
#     choose. Ingress is restricted, and the value sets with egress on (full,
#     components) are scored on both.
#   deployment-has-poddisruptionbudget (gateway): the set turns PDBs off on purpose
#     (podDisruptionBudget.enabled=false).
#   container-security-context-user-group-id (components): its API pods leave the UID
#     and GID to OpenShift's restricted SCC (which picks them from the namespace's
#     range, above 10000), as documented for OpenShift.
kube_score_common=(--output-format ci --exit-one-on-warning --ignore-container-cpu-limit
  --ignore-test container-ephemeral-storage-request-and-limit --ignore-test deployment-has-host-podantiaffinity
  --enable-optional-test container-seccomp-profile --enable-optional-test container-ports-check)
declare -A kube_score_skip=(
  [default]="container-image-pull-policy pod-networkpolicy"
  [full]=""
  [namespaced]="container-image-pull-policy pod-networkpolicy"
  [gateway]="container-image-pull-policy pod-networkpolicy deployment-has-poddisruptionbudget"
  [components]="container-image-pull-policy container-security-context-user-group-id"
)
for s in "${sets[@]}"; do
  skip=()
  for t in ${kube_score_skip[$s]}; do skip+=(--ignore-test "$t"); done
  "$kube_score" score "${kube_score_common[@]}" "${skip[@]}" "$tmp/render-$s.yaml" >"$tmp/out" 2>&1 ||
    { grep -vE '^\[(OK|SKIPPED)\]' "$tmp/out" >&2; die "kube-score ($s values)"; }
  grep -q '^\[OK\]' "$tmp/out" || { cat "$tmp/out" >&2; die "kube-score ($s values) checked nothing"; }
done
log "kube-score $KUBE_SCORE_VERSION: every value set passes (warnings included; the skipped checks are explained in this script)"

# ---------------------------------------------------------------------------------------
step "4. helm install, cluster mode, every option on (admission policy: step 9)"
# The chart's images cannot run on the local cluster's real node (nothing is pulled):
# a flowline.io/fake-* annotation sends the Deployments' pods to kwok's node
# (hack/kwok/fake-pods.yaml), where they run until deleted.
fake_pods=(--set-string 'podAnnotations.flowline\.io/fake-hang=true')
# The key-migration hook Job's pod completes there at once (Helm waits for it); the
# migration itself runs for real in step 6, as the hook's ServiceAccount.
fake_pods+=(--set-string 'keyMigration.podAnnotations.flowline\.io/fake-exit-code=0')
# A CA and a server certificate for the HTTPS receiver of step 6 (localhost, 127.0.0.1).
# Not one self-signed certificate: `openssl req -x509` marks it CA:TRUE, and rustls
# refuses a CA certificate as a server's own (CaUsedAsEndEntity). The CA goes into a
# ConfigMap that delivery.caBundle names, as an administrator would do with a private CA.
mkdir -p "$tmp/tls"
quiet "openssl: the test CA" openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=flowline chart-test CA" \
  -keyout "$tmp/tls/ca.key" -out "$tmp/tls/ca.crt"
quiet "openssl: the receiver's key" openssl req -newkey rsa:2048 -nodes -subj /CN=localhost \
  -keyout "$tmp/tls/receiver.key" -out "$tmp/tls/receiver.csr"
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\nextendedKeyUsage=serverAuth\n' \
  >"$tmp/tls/receiver.ext"
quiet "openssl: the receiver's certificate" openssl x509 -req -days 1 -in "$tmp/tls/receiver.csr" \
  -CA "$tmp/tls/ca.crt" -CAkey "$tmp/tls/ca.key" -CAcreateserial -extfile "$tmp/tls/receiver.ext" -out "$tmp/tls/receiver.crt"
ca_configmap="$rel-test-ca"
quiet "create configmap $ca_configmap" kubectl create configmap "$ca_configmap" -n "$ns_rel" --from-file=bundle.pem="$tmp/tls/ca.crt"
releases+=("$rel")
quiet "helm install $rel" helm install "$rel" "$chart" -n "$ns_rel" -f "$chart/ci/full-values.yaml" "${fake_pods[@]}" \
  --set admissionPolicy.enabled=false --set "delivery.caBundle.configMap=$ca_configmap" \
  --set delivery.caBundle.key=bundle.pem --set 'delivery.allowCidrs={127.0.0.0/8}' --wait --timeout 120s
quiet "Deployments available" kubectl wait -n "$ns_rel" --for condition=Available --timeout 60s \
  "deployment/$fullname-controller" "deployment/$fullname-api"
for obj in "serviceaccount/$fullname-api" "serviceaccount/$fullname-controller" "service/$fullname" "service/$fullname-controller" \
  "horizontalpodautoscaler/$fullname-api" "ingress/$fullname" "servicemonitor/$fullname" \
  "poddisruptionbudget/$fullname-api" "poddisruptionbudget/$fullname-controller" "networkpolicy/$fullname-api" "networkpolicy/$fullname-controller" \
  "secret/$fullname-admin-key" "apikeys.flowline.io/$fullname-admin" "role/$fullname-leader-election" \
  "rolebinding/$fullname-leader-election" "configmap/$fullname-extra"; do
  kubectl get -n "$ns_rel" "$obj" >/dev/null 2>&1 || die "helm install did not create $obj"
done
cluster_objects=()
for name in "$fullname-api" "$fullname-controller" "$fullname-api-cluster" "$fullname-controller-cluster"; do
  cluster_objects+=("clusterrole/$name" "clusterrolebinding/$name")
done
for obj in "${cluster_objects[@]}"; do
  kubectl get "$obj" >/dev/null 2>&1 || die "helm install did not create $obj"
done
log "installed: controller and API Deployments available, every optional object present"
# commonLabels on every object of the release, pods included; each Deployment's pods
# carry their own labels and placement (controller.*, api.*) and were scheduled.
unlabelled=$(kubectl get -n "$ns_rel" deployments,services,serviceaccounts,networkpolicies,poddisruptionbudgets,horizontalpodautoscalers,ingresses,servicemonitors,roles,rolebindings,secrets,pods \
  -l "app.kubernetes.io/instance=$rel,example.com/cost-center!=4242" -o name)
[ -z "$unlabelled" ] || die "objects of the release without commonLabels: $unlabelled"
pods_with() { kubectl get pods -n "$ns_rel" -l "app.kubernetes.io/instance=$rel,$1" --field-selector spec.nodeName!= -o name | wc -l; }
[ "$(pods_with app.kubernetes.io/component=controller,team=control-plane,example.com/tier=control,example.com/cost-center=4242)" -ge 2 ] ||
  die "the controller pods lack their labels (controller.podLabels over podLabels, commonLabels) or were not scheduled"
[ "$(pods_with app.kubernetes.io/component=api,team=automation,example.com/tier=edge,example.com/cost-center=4242)" -ge 2 ] ||
  die "the API pods lack their labels (api.podLabels, podLabels, commonLabels) or were not scheduled"
[ "$(kubectl get deployment -n "$ns_rel" "$fullname-controller" -o jsonpath='{.spec.template.spec.nodeSelector}{.spec.template.spec.topologySpreadConstraints[0].topologyKey}')" = \
  '{"kubernetes.io/arch":"amd64"}topology.kubernetes.io/zone' ] || die "the controller Deployment lacks its own nodeSelector or topology spread"
[ "$(kubectl get configmap -n "$ns_rel" "$fullname-extra" -o jsonpath='{.data.release}')" = "$rel" ] ||
  die "the extraObjects ConfigMap was not rendered with tpl"
log "commonLabels on every object and pod; per-component pod labels and placement scheduled; extraObjects installed"
# The aggregated ClusterRoles: a user bound to the built-in view (edit) role in a
# namespace may read (also write) its Workflows, Runs and Webhooks; the
# clusterrole-aggregation controller fills the built-in roles in, so wait for it.
for role in view edit; do
  quiet "bind $role to ct-$role" kubectl create rolebinding "ct-$role" -n "$ns_rel" --clusterrole "$role" --user "ct-$role"
done
user_can() { # user verb resource [kubectl flags...]
  local user=$1 verb=$2 resource=$3; shift 3
  [ "$(kubectl auth can-i "$verb" "$resource" -n "$ns_rel" --as "$user" "$@" 2>/dev/null)" = yes ]
}
eventually "view aggregates list workflows" 30 user_can ct-view list workflows.flowline.io
eventually "edit aggregates create runs" 30 user_can ct-edit create runs.flowline.io
user_can ct-view get webhooks.flowline.io || die "view does not show webhooks"
user_can ct-view create workflows.flowline.io && die "view may create workflows"
user_can ct-view patch runs.flowline.io --subresource status && die "view may write run status"
user_can ct-edit delete workflows.flowline.io || die "edit may not delete workflows"
user_can ct-edit patch runs.flowline.io --subresource status && die "edit may write run status (the controllers' alone)"
log "aggregated roles: view reads, edit writes Workflows, Runs and Webhooks; status stays the controllers'"

# ---------------------------------------------------------------------------------------
step "5. examples/ applied"
examples=("$repo"/examples/*.yaml)
[ "${#examples[@]}" -ge 4 ] || die "expected at least 4 files in examples/"
for f in "${examples[@]}"; do
  quiet "kubectl apply $f" kubectl apply --server-side --validate=strict -n "$ns_rel" -f "$f"
  quiet "objects of $f present" kubectl get -n "$ns_rel" -f "$f"
done
log "${#examples[@]} example files accepted: $(kubectl get -n "$ns_rel" workflows,webhooks -o name | tr '\n' ' ')"

# ---------------------------------------------------------------------------------------
step "6. RBAC: the binary runs as each Deployment's own ServiceAccount"
sa_api=$fullname-api
sa_ctl=$fullname-controller
# What the code calls, in an arbitrary account namespace (rbac.yaml says which call
# needs which verb), and no more. The API, which faces the internet: spec writes,
# keys and signing Secrets; no Jobs, no Pods, no status, no Events, no Lease.
for verb in get list watch create patch delete; do
  for r in workflows.flowline.io webhooks.flowline.io; do
    can_i yes "$ns_rel" "$sa_api" "$verb" "$r" -n "$ns_other"
  done
done
# Keys are ApiKeys (hashes only): cached, made and revoked, never changed.
for verb in list watch create delete; do can_i yes "$ns_rel" "$sa_api" "$verb" apikeys.flowline.io -n "$ns_other"; done
for verb in patch update; do can_i no "$ns_rel" "$sa_api" "$verb" apikeys.flowline.io -n "$ns_other"; done
# No Secret of an account, for any verb: inbound hook and webhook signing secrets are
# sealed into their Workflow or Webhook.
for verb in get list watch create patch update delete; do can_i no "$ns_rel" "$sa_api" "$verb" secrets -n "$ns_other"; done
# The seal key, read by name by both processes in the release namespace; the API may
# read no other Secret there (the controller reads Secrets by name in every account,
# and in cluster mode the release namespace is one).
for sa in "$sa_api" "$sa_ctl"; do
  can_i yes "$ns_rel" "$sa" get "secrets/$fullname-seal-key" -n "$ns_rel"
  can_i no "$ns_rel" "$sa" list secrets -n "$ns_rel"
done
can_i no "$ns_rel" "$sa_api" get "secrets/$fullname-admin-key" -n "$ns_rel"
for verb in get list watch create patch; do can_i yes "$ns_rel" "$sa_api" "$verb" runs.flowline.io -n "$ns_other"; done
for verb in delete; do can_i no "$ns_rel" "$sa_api" "$verb" runs.flowline.io -n "$ns_other"; done
for r in workflows runs webhooks; do
  for verb in get patch update; do
    can_i no "$ns_rel" "$sa_api" "$verb" "$r.flowline.io" --subresource status -n "$ns_other"
  done
done
for verb in create get list watch delete deletecollection; do
  can_i no "$ns_rel" "$sa_api" "$verb" jobs.batch -n "$ns_other"
done
# Step logs: the pods of Jobs listed by label, their logs read; nothing else on pods.
can_i yes "$ns_rel" "$sa_api" list pods -n "$ns_other"
can_i yes "$ns_rel" "$sa_api" get pods --subresource log -n "$ns_other"
for verb in create get watch delete deletecollection; do
  can_i no "$ns_rel" "$sa_api" "$verb" pods -n "$ns_other"
done
can_i no "$ns_rel" "$sa_api" create pods --subresource exec -n "$ns_other"
can_i no "$ns_rel" "$sa_api" create events.events.k8s.io -n "$ns_other"
can_i no "$ns_rel" "$sa_api" create leases.coordination.k8s.io -n "$ns_rel"
can_i no "$ns_rel" "$sa_api" get "leases.coordination.k8s.io/$fullname-controller" -n "$ns_rel"
for verb in get list watch; do can_i yes "$ns_rel" "$sa_api" "$verb" namespaces; done
# The controller: status writes, step Jobs, Secrets by name only.
for verb in get list watch; do can_i yes "$ns_rel" "$sa_ctl" "$verb" workflows.flowline.io -n "$ns_other"; done
for verb in get list watch create patch delete; do can_i yes "$ns_rel" "$sa_ctl" "$verb" runs.flowline.io -n "$ns_other"; done
for verb in list watch; do can_i yes "$ns_rel" "$sa_ctl" "$verb" webhooks.flowline.io -n "$ns_other"; done
for r in workflows runs webhooks; do
  can_i yes "$ns_rel" "$sa_ctl" patch "$r.flowline.io" --subresource status -n "$ns_other"
done
# Workflow and Webhook specs belong to the API and to whoever applies the objects. A
# Run is patched by the controller: pinned to its workflow version, cancelled when
# superseded (cancel_in_progress), labelled with its phase.
for r in workflows webhooks; do
  can_i no "$ns_rel" "$sa_ctl" patch "$r.flowline.io" -n "$ns_other"
done
can_i no "$ns_rel" "$sa_ctl" create workflows.flowline.io -n "$ns_other"
for verb in create list watch deletecollection; do can_i yes "$ns_rel" "$sa_ctl" "$verb" jobs.batch -n "$ns_other"; done
for verb in list watch; do can_i yes "$ns_rel" "$sa_ctl" "$verb" pods -n "$ns_other"; done
can_i no "$ns_rel" "$sa_ctl" create pods -n "$ns_other"
can_i yes "$ns_rel" "$sa_ctl" get pods --subresource log -n "$ns_other"
for verb in get create; do can_i yes "$ns_rel" "$sa_ctl" "$verb" secrets -n "$ns_other"; done
for verb in list watch patch update delete; do can_i no "$ns_rel" "$sa_ctl" "$verb" secrets -n "$ns_other"; done
for verb in create patch; do can_i yes "$ns_rel" "$sa_ctl" "$verb" events.events.k8s.io -n "$ns_other"; done
can_i no "$ns_rel" "$sa_ctl" delete events.events.k8s.io -n "$ns_other"
for verb in get list watch; do can_i no "$ns_rel" "$sa_ctl" "$verb" namespaces; done
# Leader election and sharding (the full values run two shards): the shard Leases by
# name, in the release namespace only, the controller's alone (listing them all: the
# shard-count check reads every shard Lease of the election); member Lease slots
# updated by name, in the release namespace only; no Lease patched or deleted.
can_i yes "$ns_rel" "$sa_ctl" create leases.coordination.k8s.io -n "$ns_rel"
can_i yes "$ns_rel" "$sa_ctl" list leases.coordination.k8s.io -n "$ns_rel"
can_i no "$ns_rel" "$sa_ctl" list leases.coordination.k8s.io -n "$ns_other"
for verb in get update; do
  for lease in "$fullname-controller" "$fullname-controller-shard-1"; do
    can_i yes "$ns_rel" "$sa_ctl" "$verb" "leases.coordination.k8s.io/$lease" -n "$ns_rel"
    can_i no "$ns_rel" "$sa_ctl" "$verb" "leases.coordination.k8s.io/$lease" -n "$ns_other"
  done
  can_i no "$ns_rel" "$sa_ctl" "$verb" leases.coordination.k8s.io/someone-else -n "$ns_rel"
  can_i no "$ns_rel" "$sa_ctl" "$verb" "leases.coordination.k8s.io/$fullname-controller-shard-2" -n "$ns_rel"
done
# Member Lease slots: two replicas, so slots 0 to 3, updated by name only.
for lease in "$fullname-controller-member-0" "$fullname-controller-member-3"; do
  can_i yes "$ns_rel" "$sa_ctl" update "leases.coordination.k8s.io/$lease" -n "$ns_rel"
  can_i no "$ns_rel" "$sa_ctl" update "leases.coordination.k8s.io/$lease" -n "$ns_other"
done
can_i no "$ns_rel" "$sa_ctl" update "leases.coordination.k8s.io/$fullname-controller-member-4" -n "$ns_rel"
for verb in patch delete; do
  can_i no "$ns_rel" "$sa_ctl" "$verb" "leases.coordination.k8s.io/$fullname-controller-member-0" -n "$ns_rel"
  can_i no "$ns_rel" "$sa_ctl" "$verb" leases.coordination.k8s.io -n "$ns_other"
done
# Both: the three CRDs, read only; nothing else cluster-wide.
for sa in "$sa_api" "$sa_ctl"; do
  for verb in get list watch; do
    can_i yes "$ns_rel" "$sa" "$verb" customresourcedefinitions.apiextensions.k8s.io/workflows.flowline.io
  done
  can_i no "$ns_rel" "$sa" update workflows.flowline.io -n "$ns_other"
  can_i no "$ns_rel" "$sa" update secrets -n "$ns_other"
  can_i no "$ns_rel" "$sa" get configmaps -n "$ns_other"
  can_i no "$ns_rel" "$sa" delete namespaces
  can_i no "$ns_rel" "$sa" patch customresourcedefinitions.apiextensions.k8s.io/workflows.flowline.io
  can_i no "$ns_rel" "$sa" get customresourcedefinitions.apiextensions.k8s.io/servicemonitors.monitoring.coreos.com
  can_i no "$ns_rel" "$sa" get clusterroles.rbac.authorization.k8s.io
done
log "can-i: every call the code makes is allowed to the process that makes it; the API may not"
log "  touch Jobs, Pods, status, Events or the Lease; the controller lists no Secrets and writes no spec"

# A kubeconfig holding a token of a ServiceAccount of the release namespace, and
# nothing else.
server=$(kubectl config view --raw --minify -o jsonpath='{.clusters[0].cluster.server}')
ca=$(kubectl config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
sa_kubeconfig() { # service-account file
  local sa=$1 file=$2 token
  token=$(kubectl create token "$sa" -n "$ns_rel" --duration 10m) || die "kubectl create token $sa"
  (umask 077; cat >"$file") <<KC
apiVersion: v1
kind: Config
clusters: [{name: cluster, cluster: {server: "$server", certificate-authority-data: "$ca"}}]
users: [{name: $sa, user: {token: "$token"}}]
contexts: [{name: sa, context: {cluster: cluster, user: $sa, namespace: $ns_rel}}]
current-context: sa
KC
}
sa_kubeconfig "$sa_api" "$tmp/sa-api.kubeconfig"
sa_kubeconfig "$sa_ctl" "$tmp/sa-controller.kubeconfig"
cp "$flowline_src" "$tmp/flowline"
mint_key() { # namespace: prints a new admin key of that account (created with the cluster credentials)
  local value
  value=$("$tmp/flowline" api-key create --namespace "$1" --name t --scopes admin 2>"$tmp/out") ||
    { cat "$tmp/out" >&2; die "flowline api-key create --namespace $1"; }
  [[ "$value" == flk_* ]] || die "flowline api-key create --namespace $1 printed no key: $value"
  printf '%s\n' "$value"
}

# A file the Deployment mounts from a ConfigMap, copied from the cluster into $tmp:
# the mount path (e.g. /etc/flowline/ca) does not exist on this machine. Prints the
# local path. Fails unless the Deployment mounts the file's directory from a ConfigMap
# that holds the file (items mapped as the pod would see them).
mounted_file() { # deployment path-in-the-pod
  local deploy=$1 path=$2 local_path
  local_path="$tmp/mounts/$deploy$path"
  mkdir -p "$(dirname "$local_path")"
  kubectl get -n "$ns_rel" "deployment/$deploy" -o json >"$tmp/deploy.json"
  python3 - "$tmp/deploy.json" "$path" "$ns_rel" "$local_path" <<'PY' || die "deployment/$deploy: $path is not a file mounted from a ConfigMap"
import json, subprocess, sys
deploy, path, ns, out = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3], sys.argv[4]
pod = deploy["spec"]["template"]["spec"]
volumes = {v["name"]: v for v in pod.get("volumes", [])}
for m in pod["containers"][0].get("volumeMounts", []):
    prefix = m["mountPath"].rstrip("/") + "/"
    cm = volumes.get(m["name"], {}).get("configMap")
    if not path.startswith(prefix) or cm is None:
        continue
    rel = path[len(prefix):]
    items = cm.get("items")
    key = next((i["key"] for i in items if i["path"] == rel), None) if items else rel
    if key is None:
        sys.exit(f"no item of configmap {cm['name']} is mounted as {rel}")
    data = json.loads(subprocess.check_output(["kubectl", "get", "-n", ns, "configmap", cm["name"], "-o", "json"]))
    if key not in data.get("data", {}):
        sys.exit(f"configmap {cm['name']} has no key {key}")
    open(out, "w").write(data["data"][key])
    sys.exit(0)
sys.exit(f"{path} is under no ConfigMap volume mount")
PY
  printf '%s\n' "$local_path"
}

# Starts the binary with a Deployment's own arguments and environment, as the
# ServiceAccount of the kubeconfig; sets base to its URL once /readyz answers.
# Changed: --listen (a free local port) and --ca-bundle (the same file, copied from
# the ConfigMap the Deployment mounts, since the mount path does not exist here).
start_like() { # deployment log-file kubeconfig
  local deploy=$1 logf=$2 kubeconfig=$3 port args=() envs=() replaced=0 a
  port=$(free_port)
  while IFS= read -r a; do
    if [[ "$a" == --listen=* ]]; then a="--listen=127.0.0.1:$port"; replaced=1; fi
    if [[ "$a" == --ca-bundle=* ]]; then a="--ca-bundle=$(mounted_file "$deploy" "${a#--ca-bundle=}")" || exit 1; fi
    args+=("$a")
  done < <(kubectl get -n "$ns_rel" "deployment/$deploy" -o jsonpath='{range .spec.template.spec.containers[0].args[*]}{@}{"\n"}{end}')
  [ "$replaced" = 1 ] || die "deployment/$deploy has no --listen= argument"
  # Its step Jobs' pods complete on kwok's node (the chart's image cannot run here).
  if [[ "$deploy" == *-controller ]]; then args+=(--job-pod-annotation=flowline.io/fake-exit-code=0); fi
  local name value field
  while IFS='|' read -r name value field; do
    case "$field" in
      "") ;;
      metadata.namespace) value=$ns_rel ;;
      *) die "deployment/$deploy: env $name from $field is not known to this test" ;;
    esac
    envs+=("$name=$value")
  done < <(kubectl get -n "$ns_rel" "deployment/$deploy" -o jsonpath='{range .spec.template.spec.containers[0].env[*]}{.name}{"|"}{.value}{"|"}{.valueFrom.fieldRef.fieldPath}{"\n"}{end}')
  env "${envs[@]}" KUBECONFIG="$kubeconfig" "$tmp/flowline" "${args[@]}" >"$logf" 2>&1 9>&- &
  local pid=$!
  pids+=("$pid")
  local deadline=$((SECONDS + 40))
  until curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; do
    kill -0 "$pid" 2>/dev/null || { tail -n 20 "$logf" >&2; die "flowline ${args[0]} (as $deploy) exited"; }
    if grep -m 3 -iE 'forbidden|code: 403' "$logf" >&2; then
      die "flowline ${args[0]} (as $deploy) lacks a permission (above): the chart's RBAC is short of what the code calls"
    fi
    [ "$SECONDS" -lt "$deadline" ] || { tail -n 20 "$logf" >&2; die "flowline ${args[0]} (as $deploy) not ready in 40s"; }
    sleep 0.2
  done
  log "flowline ${args[*]} is ready as the ServiceAccount"
  base="http://127.0.0.1:$port"
}
key=$(kubectl get secret -n "$ns_rel" "$fullname-admin-key" -o jsonpath='{.data.api-key}' | base64 -d)
[[ "$key" == flk_* ]] || die "the bootstrap key does not look like a key"
call() { # method path expected-status [json-body]; the body lands in $tmp/body
  local method=$1 path=$2 want=$3 data=${4:-} code
  local args=(-sS -o "$tmp/body" -w '%{http_code}' -X "$method" -H "Authorization: Bearer $key")
  [ -n "$data" ] && args+=(-H 'Content-Type: application/json' -d "$data")
  code=$(curl "${args[@]}" "$base$path") || die "$method $path: no answer"
  [ "$code" = "$want" ] || die "$method $path answered $code (want $want): $(cat "$tmp/body")"
}

# A key kept as a Secret by an earlier version, moved by the key-migration hook. Its
# ServiceAccount and RBAC are hook objects, deleted once the hook Job succeeds (here on
# kwok's node), so they are applied again from the rendering and the migration runs
# for real as that ServiceAccount: it may list and delete Secrets and make ApiKeys in
# the accounts' namespaces, nothing else.
legacy_key="flk_$(openssl rand -hex 20)"
quiet "a key Secret as earlier versions made them" kubectl create secret generic key-legacy -n "$ns_other" \
  --type flowline.io/api-key --from-literal=name=legacy --from-literal=scopes=admin \
  --from-literal=sha256="$(printf %s "$legacy_key" | sha256sum | cut -d' ' -f1)" \
  --from-literal=created-at=2025-06-01T00:00:00Z
helm template "$rel" "$chart" -n "$ns_rel" -f "$chart/ci/full-values.yaml" --show-only templates/key-migration.yaml |
  awk 'BEGIN { RS = "\n---\n" } !/\nkind: Job\n/ { printf "---\n%s\n", $0 }' \
  >"$tmp/key-migration-rbac.yaml" || die "rendering the key-migration hook"
grep -q '^kind: ClusterRoleBinding' "$tmp/key-migration-rbac.yaml" || die "the key-migration hook has no ClusterRoleBinding"
quiet "the key-migration hook's ServiceAccount and RBAC" kubectl apply -n "$ns_rel" -f "$tmp/key-migration-rbac.yaml"
sa_mig=$fullname-key-migration
for verb in list delete; do can_i yes "$ns_rel" "$sa_mig" "$verb" secrets -n "$ns_other"; done
for verb in get watch create patch; do can_i no "$ns_rel" "$sa_mig" "$verb" secrets -n "$ns_other"; done
for verb in get create; do can_i yes "$ns_rel" "$sa_mig" "$verb" apikeys.flowline.io -n "$ns_other"; done
can_i no "$ns_rel" "$sa_mig" delete apikeys.flowline.io -n "$ns_other"
sa_kubeconfig "$sa_mig" "$tmp/sa-migration.kubeconfig"
KUBECONFIG="$tmp/sa-migration.kubeconfig" "$tmp/flowline" api-key migrate >"$tmp/out" 2>&1 ||
  { cat "$tmp/out" >&2; die "flowline api-key migrate as the hook's ServiceAccount"; }
grep -q "moved API key $ns_other/key-legacy" "$tmp/out" || { cat "$tmp/out" >&2; die "the legacy key was not moved"; }
[ "$(kubectl get apikeys.flowline.io -n "$ns_other" key-legacy -o jsonpath='{.spec.scopes[0]}/{.metadata.annotations.flowline\.io/created-at}')" = "admin/2025-06-01T00:00:00Z" ] ||
  die "the moved key lost its scope or its age"
kubectl get secret -n "$ns_other" key-legacy >/dev/null 2>&1 && die "the legacy key Secret survived its migration"
KUBECONFIG="$tmp/sa-migration.kubeconfig" "$tmp/flowline" api-key migrate >"$tmp/out" 2>&1 ||
  { cat "$tmp/out" >&2; die "flowline api-key migrate, run again"; }
quiet "removing the hook's ServiceAccount and RBAC" kubectl delete -n "$ns_rel" -f "$tmp/key-migration-rbac.yaml"
log "key migration: a key Secret of an earlier version became ApiKey key-legacy (scope and age kept), as the hook's ServiceAccount; a second run changes nothing"

start_like "$fullname-api" "$tmp/api.log" "$tmp/sa-api.kubeconfig"
legacy_code=$(curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $legacy_key" "$base/v1/workflows")
[ "$legacy_code" = 200 ] || die "the moved legacy key answered $legacy_code (want 200)"
call GET /v1/workflows 200
call GET /v1/workflows/order-relay 200
[ "$(json_get steps.0.action <"$tmp/body")" = http.request ] || die "the API does not show the example's steps: $(cat "$tmp/body")"
log "flowline api as the ServiceAccount: the bootstrap key works, the examples are readable"

# An HTTPS receiver on 127.0.0.1 with the certificate of step 4 (its CA is in the
# ConfigMap the controller Deployment mounts): records every POST (path, headers,
# body in base64) as a JSON line and answers 200.
cat >"$tmp/receiver.py" <<'PY'
import base64, http.server, json, os, ssl, sys, threading
cert, key, record, port_file = sys.argv[1:5]
lock = threading.Lock()
class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        entry = {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
                 "body": base64.b64encode(body).decode()}
        with lock, open(record, "a") as f:
            f.write(json.dumps(entry) + "\n")
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
tls.load_cert_chain(cert, key)
server.socket = tls.wrap_socket(server.socket, server_side=True)
with open(port_file + ".new", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(port_file + ".new", port_file)
server.serve_forever()
PY
: >"$tmp/received.jsonl"
python3 "$tmp/receiver.py" "$tmp/tls/receiver.crt" "$tmp/tls/receiver.key" "$tmp/received.jsonl" "$tmp/receiver.port" \
  >"$tmp/receiver.log" 2>&1 9>&- &
pids+=("$!")
eventually "the HTTPS receiver listens" 10 test -s "$tmp/receiver.port"
receiver_port=$(cat "$tmp/receiver.port")

api_base=$base
start_like "$fullname-controller" "$tmp/operator.log" "$tmp/sa-controller.kubeconfig"
# The controller runs with --no-api: /v1 is the API process's alone.
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $key" "$base/v1/workflows")
[ "$code" = 404 ] || die "the controller (--no-api) answered /v1/workflows with $code"
base=$api_base
# Inbound hook secrets, sealed into their Workflow: one the API makes (nothing but an
# annotation, no Secret), and one a Secret brings (kubectl, GitOps, or an earlier
# version), which the controller seals into the status. The API reads no Secret for
# either, and verifies both.
hook_post() { # workflow secret: POSTs a signed hook; prints the status code
  python3 - "$base" "$1" "$2" <<'PY'
import base64, hashlib, hmac, sys, time, urllib.error, urllib.request
base, wf, secret = sys.argv[1:4]
msg, ts, body = f"msg_{time.time_ns()}", str(int(time.time())), b'{"order": 7}'
key = base64.b64decode(secret.removeprefix("whsec_"))
sig = base64.b64encode(hmac.new(key, f"{msg}.{ts}.".encode() + body, hashlib.sha256).digest()).decode()
req = urllib.request.Request(f"{base}/v1/hooks/{wf}", data=body, method="POST", headers={
    "Content-Type": "application/json", "webhook-id": msg, "webhook-timestamp": ts,
    "webhook-signature": f"v1,{sig}"})
try:
    print(urllib.request.urlopen(req).status)
except urllib.error.HTTPError as e:
    print(e.code)
PY
}
hook_accepted() { # what workflow secret: until a signed hook answers 202 (10 s)
  local deadline=$((SECONDS + 10)) code
  until code=$(hook_post "$2" "$3") && [ "$code" = 202 ]; do
    [ "$SECONDS" -lt "$deadline" ] || { tail -n 20 "$tmp/api.log" >&2; die "$1: the hook answered ${code:-nothing}, not 202, within 10s"; }
    sleep 0.5
  done
}
call POST /v1/workflows 201 '{"name": "hooked", "trigger": {"type": "webhook"}}'
made=$(json_get id <"$tmp/body")
made_secret=$(json_get hook_secret <"$tmp/body")
call PATCH "/v1/workflows/$made" 200 '{"state": "active", "steps": [{"id": "t", "action": "transform", "with": {"value": 1}}]}'
[[ "$(kubectl get workflow -n "$ns_rel" "$made" -o jsonpath='{.metadata.annotations.flowline\.io/hook-secret}')" == v1.* ]] ||
  die "the API's hook secret is not sealed into the workflow's annotation"
kubectl get secret -n "$ns_rel" "$made-hook" >/dev/null 2>&1 && die "the API made a hook Secret"
hook_accepted "a hook signed with the secret the API made" "$made" "$made_secret"
[ "$(hook_post "$made" "whsec_$(printf 'x%.0s' {1..32} | base64)")" = 401 ] || die "a hook signed with another secret was not refused"
brought="whsec_$(head -c 24 /dev/urandom | base64)"
kubectl apply -n "$ns_rel" -f - >/dev/null <<YAML || die "applying a webhook workflow and its hook Secret"
apiVersion: flowline.io/v1
kind: Workflow
metadata: {name: brought-hook-$id}
spec:
  name: Brought hook
  state: active
  trigger: {type: webhook}
  steps: [{id: t, action: transform, with: {value: 1}}]
---
apiVersion: v1
kind: Secret
metadata: {name: brought-hook-$id-hook}
type: flowline.io/hook-secret
stringData: {secret: "$brought"}
YAML
sealed_status() { test -n "$(kubectl get workflow -n "$ns_rel" "brought-hook-$id" -o jsonpath='{.status.hookSecret.sealed}')"; }
# The controller first takes its shards (a lease duration at most: the full values' 20 s).
deadline=$((SECONDS + 90))
until sealed_status; do
  [ "$SECONDS" -lt "$deadline" ] || { tail -n 30 "$tmp/operator.log" >&2; die "the controller did not seal the Secret's hook secret into the status within 90s"; }
  sleep 0.5
done
hook_accepted "a hook signed with the secret a Secret brought" "brought-hook-$id" "$brought"
log "inbound hook secrets: the API's sealed into the workflow's annotation (no Secret made), a Secret's sealed by the"
log "  controller into the status; the API verifies both without reading a Secret, and refuses another secret"
# The webhook exists before the run, so the run's run.succeeded event goes to it.
call POST /v1/webhooks 201 "{\"url\": \"https://localhost:$receiver_port/hook\", \"events\": [\"run.succeeded\"]}"
hook=$(json_get id <"$tmp/body")
hook_secret=$(json_get secret <"$tmp/body")
[[ "$hook_secret" == whsec_* ]] || die "the webhook's secret does not look like one: $(cat "$tmp/body")"
call POST /v1/workflows 201 '{"name": "chart test"}'
wf=$(json_get id <"$tmp/body")
call PATCH "/v1/workflows/$wf" 200 '{"state": "active", "steps": [
  {"id": "wait", "action": "delay", "with": {"ms": 50}},
  {"id": "shape", "action": "transform", "with": {"value": {"order": "{{ trigger.payload.order }}"}}}]}'
call POST "/v1/workflows/$wf/runs" 201 '{"payload": {"order": 42}}'
run=$(json_get id <"$tmp/body")
run_done() { call GET "/v1/runs/$run" 200; [ "$(json_get status <"$tmp/body")" != running ]; }
deadline=$((SECONDS + 30))
until run_done; do
  [ "$SECONDS" -lt "$deadline" ] || { tail -n 30 "$tmp/operator.log" >&2; die "run $run did not finish within 30s: $(cat "$tmp/body")"; }
  sleep 0.5
done
call GET "/v1/runs/$run" 200
[ "$(json_get status <"$tmp/body")" = succeeded ] || die "run $run did not succeed: $(cat "$tmp/body")"
[ "$(json_get steps.1.output.order <"$tmp/body")" = 42 ] || die "run $run has the wrong output: $(cat "$tmp/body")"

# A job step in a namespace that enforces the restricted Pod Security Standard: the
# step pod is admitted (kwok then plays its kubelet) and the run succeeds. A pod spec
# that asks for more than "restricted" allows is refused by Pod Security admission, the
# Job never gets a pod, and the run does not finish.
key_main=$key
key=$(mint_key "$ns_restricted")
eventually "the new key of $ns_restricted accepted by flowline api" 10 \
  curl -fsS -o /dev/null -H "Authorization: Bearer $key" "$base/v1/workflows"
call POST /v1/workflows 201 '{"name": "restricted"}'
wf_restricted=$(json_get id <"$tmp/body")
call PATCH "/v1/workflows/$wf_restricted" 200 '{"state": "active", "executor": "job", "steps": [
  {"id": "shape", "action": "transform", "with": {"value": {"ok": true}}}]}'
call POST "/v1/workflows/$wf_restricted/runs" 201 '{}'
run_restricted=$(json_get id <"$tmp/body")
refused_by_pod_security() {
  kubectl get events -n "$ns_restricted" -o jsonpath='{range .items[*]}{.reason}: {.message}{"\n"}{end}' |
    grep -m 1 -E 'FailedCreate: .*violates PodSecurity'
}
deadline=$((SECONDS + 60))
until run=$run_restricted run_done; do
  if reason=$(refused_by_pod_security); then
    die "the step pod of run $run_restricted was refused by Pod Security admission in $ns_restricted: $reason"
  fi
  [ "$SECONDS" -lt "$deadline" ] || {
    tail -n 30 "$tmp/operator.log" >&2
    kubectl get jobs,pods -n "$ns_restricted" >&2
    die "run $run_restricted (a job step in $ns_restricted) did not finish within 60s: $(cat "$tmp/body")"
  }
  sleep 0.5
done
call GET "/v1/runs/$run_restricted" 200
[ "$(json_get status <"$tmp/body")" = succeeded ] || die "run $run_restricted in $ns_restricted did not succeed: $(cat "$tmp/body")"
[ "$(kubectl get pods -n "$ns_restricted" -l "flowline.io/run=$run_restricted" -o name | wc -l)" -ge 1 ] ||
  die "run $run_restricted succeeded without a step pod in $ns_restricted: it did not run as a Job"
log "a job step ran in $ns_restricted (pod-security.kubernetes.io/enforce=restricted): run $run_restricted succeeded"
key=$key_main

# The run's run.succeeded event reached the receiver, signed with the webhook's secret:
# X-Service-Signature = sha256=<hex HMAC-SHA256 of the raw body, keyed with the secret>.
# Exit status: 0 delivered and signed right, 1 not (yet) delivered, 2 signed wrong.
delivered() {
  python3 - "$tmp/received.jsonl" "$run" "$hook_secret" <<'PY'
import base64, hashlib, hmac, json, sys
record, run, secret = sys.argv[1:4]
for line in open(record):
    entry = json.loads(line)
    body = base64.b64decode(entry["body"])
    try:
        event = json.loads(body)
    except ValueError:
        continue
    if event.get("event") != "run.succeeded" or (event.get("data") or {}).get("run_id") != run:
        continue
    want = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    got = entry["headers"].get("x-service-signature")
    if entry["path"] != "/hook" or got != want:
        print(f"path {entry['path']}, X-Service-Signature {got!r}, want {want!r}; body {body.decode()}", file=sys.stderr)
        sys.exit(2)
    print(f"event {event.get('id')}, {len(body)} bytes")
    sys.exit(0)
sys.exit(1)
PY
}
deadline=$((SECONDS + 30))
until delivery=$(delivered 2>"$tmp/out"); do
  [ $? = 2 ] && { cat "$tmp/out" >&2; die "the delivery of run.succeeded for $run is not signed with the webhook's secret"; }
  [ "$SECONDS" -lt "$deadline" ] || {
    tail -n 30 "$tmp/operator.log" >&2; tail -n 5 "$tmp/receiver.log" >&2
    die "no run.succeeded delivery for run $run within 30s (received: $(wc -l <"$tmp/received.jsonl") POSTs)"
  }
  sleep 0.5
done
# The attempt shows in the deliveries list once the worker wrote the Webhook's status.
delivery_listed() {
  call GET "/v1/webhooks/$hook/deliveries" 200
  python3 -c 'import json, sys
sys.exit(0 if any(d.get("status_code") == 200 and d.get("event") == "run.succeeded" for d in json.load(sys.stdin)["data"]) else 1)' <"$tmp/body"
}
deadline=$((SECONDS + 30))
until delivery_listed; do
  [ "$SECONDS" -lt "$deadline" ] || die "GET /v1/webhooks/$hook/deliveries shows no attempt with status_code 200 within 30s: $(cat "$tmp/body")"
  sleep 0.5
done
call POST "/v1/webhooks/$hook/rotate-secret" 200
[ "$(json_get secret <"$tmp/body")" != "$hook_secret" ] || die "rotate-secret returned the old secret"
[[ "$(json_get secret <"$tmp/body")" == whsec_* ]] || die "rotate-secret returned no new secret: $(cat "$tmp/body")"
call DELETE "/v1/webhooks/$hook" 204
call POST /v1/api-keys 201 '{"name": "chart test", "scopes": ["read"]}'
call DELETE "/v1/api-keys/$(json_get id <"$tmp/body")" 204
call POST /v1/webhooks 201 '{"url": "https://receiver.example.com/hook", "events": ["run.failed"]}'
call DELETE "/v1/webhooks/$(json_get id <"$tmp/body")" 204
call PATCH "/v1/workflows/$wf" 200 '{"state": "paused"}'
call DELETE "/v1/workflows/$wf" 204
for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; done
pids=()
if grep -iE 'forbidden|code: 403' "$tmp/api.log" "$tmp/operator.log" >&2; then
  die "the binary met a permission error as the ServiceAccount (above)"
fi
log "flowline operator as the ServiceAccount: workflow created, activated, run $run succeeded (output 42),"
log "  API key and webhook created and deleted, workflow paused and deleted; no permission errors"
log "  webhook delivery: run.succeeded of $run POSTed to https://localhost:$receiver_port/hook ($delivery),"
log "  TLS trusted through the chart's CA bundle ConfigMap, 127.0.0.0/8 allowed by delivery.allowCidrs,"
log "  X-Service-Signature verified with the webhook's secret; listed in /deliveries with status 200; secret rotated"

# ---------------------------------------------------------------------------------------
step "7. helm upgrade"
key_hash() { kubectl get apikeys.flowline.io -n "$ns_rel" "$fullname-admin" -o jsonpath='{.spec.sha256}'; }
hash_before=$(key_hash)
quiet "helm upgrade $rel" helm upgrade "$rel" "$chart" -n "$ns_rel" -f "$chart/ci/full-values.yaml" "${fake_pods[@]}" \
  --set admissionPolicy.enabled=false --set config.defaultPlan=enterprise --set delivery.concurrency=8 \
  --wait --timeout 120s
kubectl get -n "$ns_rel" "deployment/$fullname-api" -o jsonpath='{.spec.template.spec.containers[0].args}' |
  grep -q -- '--default-plan=enterprise' || die "helm upgrade did not change the API's arguments"
kubectl get -n "$ns_rel" "deployment/$fullname-controller" -o jsonpath='{.spec.template.spec.containers[0].args}' |
  grep -q -- '--delivery-concurrency=8' || die "helm upgrade did not change the controller's arguments"
quiet "Deployments available after the upgrade" kubectl rollout status -n "$ns_rel" --timeout 60s \
  "deployment/$fullname-controller" "deployment/$fullname-api"
[ "$(kubectl get secret -n "$ns_rel" "$fullname-admin-key" -o jsonpath='{.data.api-key}' | base64 -d)" = "$key" ] ||
  die "helm upgrade changed the bootstrap key value"
[ "$(key_hash)" = "$hash_before" ] || die "helm upgrade changed the bootstrap key record"
log "upgraded (revision 2): --default-plan=enterprise (API) and --delivery-concurrency=8 (controller) rolled out; the bootstrap key is unchanged"
quiet "helm upgrade (revoke the bootstrap key)" helm upgrade "$rel" "$chart" -n "$ns_rel" --reuse-values \
  --set bootstrapAdminKey.enabled=false --wait --timeout 120s
for obj in "secret/$fullname-admin-key" "apikeys.flowline.io/$fullname-admin"; do
  kubectl get -n "$ns_rel" "$obj" >/dev/null 2>&1 && die "$obj survived bootstrapAdminKey.enabled=false"
done
log "upgraded (revision 3): bootstrapAdminKey.enabled=false deleted the key's value Secret and its ApiKey (key revoked)"

# ---------------------------------------------------------------------------------------
step "8. helm uninstall"
quiet "helm uninstall $rel" helm uninstall "$rel" -n "$ns_rel" --wait --timeout 60s
for obj in "${cluster_objects[@]}"; do
  kubectl get "$obj" >/dev/null 2>&1 && die "$obj survived helm uninstall"
done
left=$(kubectl get -n "$ns_rel" deployments,services,serviceaccounts,secrets,roles,rolebindings,networkpolicies,poddisruptionbudgets,horizontalpodautoscalers,ingresses,servicemonitors \
  -l "app.kubernetes.io/instance=$rel" -o name)
# Kept on purpose (helm.sh/resource-policy: keep): the seal key of the hook secrets
# sealed into Workflows, which outlive the release.
[ "$left" = "secret/$fullname-seal-key" ] || die "left behind by helm uninstall: $left (only the seal key should be)"
quiet "deleting the kept seal key" kubectl delete -n "$ns_rel" "secret/$fullname-seal-key"
kubectl get configmap -n "$ns_rel" "$fullname-extra" >/dev/null 2>&1 && die "the extraObjects ConfigMap survived helm uninstall"
quiet "the CRDs stay after uninstall" kubectl get crd workflows.flowline.io runs.flowline.io webhooks.flowline.io
log "uninstalled: no object of the release is left but its seal key; the CRDs (and workflows) stay"

# ---------------------------------------------------------------------------------------
step "9. namespaced mode and the admission policy"
releases+=("$reln")
# shellcheck disable=SC2086
quiet "helm install $reln (namespaced)" helm install "$reln" "$chart" -n "$ns_rel" ${set_flags[namespaced]} "${fake_pods[@]}" \
  --wait --timeout 120s
sa_api=$fullname_ns-api
sa_ctl=$fullname_ns-controller
# Each process's Role in each listed namespace grants what its cluster-mode ClusterRole
# grants (step 2 compares the renderings; here a sample, as the API server sees it).
for ns in "$ns_a" "$ns_b"; do
  for verb in get list watch create patch delete; do can_i no "$ns_rel" "$sa_api" "$verb" secrets -n "$ns"; done
  for verb in list watch create delete; do can_i yes "$ns_rel" "$sa_api" "$verb" apikeys.flowline.io -n "$ns"; done
  can_i yes "$ns_rel" "$sa_api" create workflows.flowline.io -n "$ns"
  for r in runs webhooks; do
    can_i no "$ns_rel" "$sa_api" patch "$r.flowline.io" --subresource status -n "$ns"
    can_i yes "$ns_rel" "$sa_ctl" patch "$r.flowline.io" --subresource status -n "$ns"
  done
  can_i no "$ns_rel" "$sa_api" create jobs.batch -n "$ns"
  can_i no "$ns_rel" "$sa_api" create pods -n "$ns"
  can_i yes "$ns_rel" "$sa_ctl" create jobs.batch -n "$ns"
  can_i yes "$ns_rel" "$sa_ctl" create events.events.k8s.io -n "$ns"
  can_i yes "$ns_rel" "$sa_ctl" get secrets -n "$ns"
  can_i no "$ns_rel" "$sa_ctl" list secrets -n "$ns"
  # Its Namespace object, by name: what a list or watch with fieldSelector=metadata.name=<ns> is checked against.
  for verb in get list watch; do
    can_i yes "$ns_rel" "$sa_api" "$verb" "namespaces/$ns"
    can_i no "$ns_rel" "$sa_ctl" "$verb" "namespaces/$ns"
  done
done
for sa in "$sa_api" "$sa_ctl"; do
  for ns in "$ns_rel" "$ns_other" default kube-system; do
    can_i no "$ns_rel" "$sa" get secrets -n "$ns"
    can_i no "$ns_rel" "$sa" list workflows.flowline.io -n "$ns"
  done
  can_i no "$ns_rel" "$sa" list secrets --all-namespaces
  can_i no "$ns_rel" "$sa" watch workflows.flowline.io --all-namespaces
  for verb in get watch; do can_i no "$ns_rel" "$sa" "$verb" "namespaces/$ns_other"; done
  for verb in list watch; do can_i no "$ns_rel" "$sa" "$verb" namespaces; done
  can_i yes "$ns_rel" "$sa" get customresourcedefinitions.apiextensions.k8s.io/runs.flowline.io
done
can_i yes "$ns_rel" "$sa_ctl" create leases.coordination.k8s.io -n "$ns_rel"
can_i yes "$ns_rel" "$sa_ctl" update "leases.coordination.k8s.io/$fullname_ns-controller" -n "$ns_rel"
can_i no "$ns_rel" "$sa_api" update "leases.coordination.k8s.io/$fullname_ns-controller" -n "$ns_rel"
kubectl get apikeys.flowline.io -n "$ns_a" "$fullname_ns-admin" >/dev/null 2>&1 || die "the bootstrap key is not in $ns_a"
log "can-i: Secrets and workflows only in $ns_a and $ns_b; not in $ns_rel, $ns_other, default, kube-system, nor cluster-wide;"
log "  Namespace objects $ns_a and $ns_b only, and only for the API; Jobs and status only for the controller; the Lease in $ns_rel"

# The binary in namespaced mode: API and controller as this release's ServiceAccount,
# with the namespaced Deployments' own arguments (--watch-namespace=$ns_a,$ns_b).
for d in api controller; do
  deploy_args=$(kubectl get -n "$ns_rel" "deployment/$fullname_ns-$d" -o jsonpath='{.spec.template.spec.containers[0].args}')
  [[ "$deploy_args" == *"\"--watch-namespace=$ns_a,$ns_b\""* ]] ||
    die "deployment/$fullname_ns-$d lacks --watch-namespace=$ns_a,$ns_b: $deploy_args"
done
# A key of an unlisted namespace, made before the processes start: had they listed
# Secrets beyond their namespaces, their first list would hold it.
other_key=$(mint_key "$ns_other")
sa_kubeconfig "$sa_api" "$tmp/sa-ns-api.kubeconfig"
sa_kubeconfig "$sa_ctl" "$tmp/sa-ns-controller.kubeconfig"
start_like "$fullname_ns-api" "$tmp/api-ns.log" "$tmp/sa-ns-api.kubeconfig"
api_base=$base
start_like "$fullname_ns-controller" "$tmp/operator-ns.log" "$tmp/sa-ns-controller.kubeconfig"
operator_base=$base
base=$api_base
# Keys made now reach the API through its watch of each listed namespace.
declare -A ns_key=() ns_wf=() ns_run=()
for ns in "$ns_a" "$ns_b"; do
  ns_key[$ns]=$(mint_key "$ns")
  eventually "the new key of $ns accepted by flowline api" 10 \
    curl -fsS -o /dev/null -H "Authorization: Bearer ${ns_key[$ns]}" "$base/v1/workflows"
done
key=$(kubectl get secret -n "$ns_a" "$fullname_ns-admin-key" -o jsonpath='{.data.api-key}' | base64 -d)
call GET /v1/workflows 200
# Through the API, in each listed namespace: a workflow, activated with one transform
# step, and a run, which only the namespaced controller can take to succeeded.
for ns in "$ns_a" "$ns_b"; do
  key=${ns_key[$ns]}
  call POST /v1/workflows 201 '{"name": "namespaced"}'
  ns_wf[$ns]=$(json_get id <"$tmp/body")
  call PATCH "/v1/workflows/${ns_wf[$ns]}" 200 '{"state": "active", "steps": [
    {"id": "shape", "action": "transform", "with": {"value": {"account": "{{ trigger.payload.account }}"}}}]}'
  call POST "/v1/workflows/${ns_wf[$ns]}/runs" 201 "{\"payload\": {\"account\": \"$ns\"}}"
  ns_run[$ns]=$(json_get id <"$tmp/body")
done
for ns in "$ns_a" "$ns_b"; do
  key=${ns_key[$ns]} run=${ns_run[$ns]}
  deadline=$((SECONDS + 30))
  until run_done; do
    [ "$SECONDS" -lt "$deadline" ] || { tail -n 30 "$tmp/operator-ns.log" >&2; die "run $run in $ns did not finish within 30s: $(cat "$tmp/body")"; }
    sleep 0.5
  done
  call GET "/v1/runs/$run" 200
  [ "$(json_get status <"$tmp/body")" = succeeded ] || die "run $run in $ns did not succeed: $(cat "$tmp/body")"
  [ "$(json_get steps.0.output.account <"$tmp/body")" = "$ns" ] || die "run $run in $ns has the wrong output: $(cat "$tmp/body")"
  quiet "run $run is a Run of $ns" kubectl get -n "$ns" "runs.flowline.io/$run"
  # Finished by this operator, not by another one that happens to watch the cluster.
  grep -qE "run finished.*\"$run\"|\"$run\".*run finished" "$tmp/operator-ns.log" ||
    { tail -n 30 "$tmp/operator-ns.log" >&2; die "run $run succeeded, but the namespaced operator did not log finishing it"; }
done
# Accounts stay apart, and a key of an unlisted namespace is unknown to the API (the
# operator runs with --no-api and serves no /v1 at all).
key=${ns_key[$ns_a]}
call GET "/v1/workflows/${ns_wf[$ns_b]}" 404
key=$other_key
base=$api_base call GET /v1/workflows 401
base=$operator_base call GET /v1/workflows 404
for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; done
pids=()
if grep -iE 'forbidden|code: 403' "$tmp/api-ns.log" "$tmp/operator-ns.log" >&2; then
  die "the binary met a permission error as the namespaced ServiceAccount (above)"
fi
log "flowline api and operator with --watch-namespace=$ns_a,$ns_b as the namespaced ServiceAccount: ready;"
log "  keys from flowline api-key create accepted in $ns_a and $ns_b (and the bootstrap key), a key of $ns_other refused (401);"
log "  in each listed namespace a workflow created, activated, run ${ns_run[$ns_a]} / ${ns_run[$ns_b]} succeeded; no permission errors"

policy="$fullname_ns-active-workflow-delete"
workflow guarded active | quiet "create an active workflow in $ns_a" kubectl apply -n "$ns_a" -f -
workflow unguarded active | quiet "create an active workflow in $ns_other" kubectl apply -n "$ns_other" -f -
# The policy takes a moment to load; a server-side dry run goes through admission.
policy_loaded() { ! kubectl delete workflow guarded -n "$ns_a" --dry-run=server; }
eventually "the admission policy refuses a dry-run delete" 30 policy_loaded
refused "kubectl delete of an active workflow" "ValidatingAdmissionPolicy '$policy'" \
  kubectl delete workflow guarded -n "$ns_a"
grep -qF "workflow guarded is active and cannot be deleted: set spec.state to paused (or draft) first" "$tmp/out" ||
  { cat "$tmp/out" >&2; die "the refusal does not carry the policy's message"; }
log "refused: $(cat "$tmp/out")"
quiet "pause the workflow" kubectl patch workflow guarded -n "$ns_a" --type merge -p '{"spec":{"state":"paused"}}'
quiet "kubectl delete of a paused workflow" kubectl delete workflow guarded -n "$ns_a"
quiet "kubectl delete of an active workflow outside watchNamespaces" kubectl delete workflow unguarded -n "$ns_other"
workflow doomed active | quiet "create an active workflow in $ns_b" kubectl apply -n "$ns_b" -f -
refused "kubectl delete of an active workflow in $ns_b" "is active and cannot be deleted" \
  kubectl delete workflow doomed -n "$ns_b" --dry-run=server
quiet "deleting namespace $ns_b that holds an active workflow" kubectl delete namespace "$ns_b" --timeout 60s
log "allowed: delete once paused; active workflows outside the listed namespaces; deleting a namespace"

quiet "helm uninstall $reln" helm uninstall "$reln" -n "$ns_rel" --wait --timeout 60s
for d in api controller; do
  kubectl get role -n "$ns_a" "$fullname_ns-$d" >/dev/null 2>&1 && die "role/$fullname_ns-$d survived helm uninstall"
done
kubectl get validatingadmissionpolicy "$policy" >/dev/null 2>&1 && die "the admission policy survived helm uninstall"
log "namespaced release uninstalled"

# ---------------------------------------------------------------------------------------
step "10. the CRD upgrade path (a copy of the CRDs under the group $crd_group)"
# The copy drops categories and short names so that it cannot shadow the real kinds in
# `kubectl get flowline` or `kubectl get flw`. "old" lacks the state `paused`: the kind
# of change a new release brings (a new enum value, a new field).
sed -e "s/flowline\.io/$crd_group/g" -e '/^    categories:$/,+1d' -e '/^    shortNames:$/,+1d' \
  "$chart/crds/flowline.yaml" >"$tmp/crds-new.yaml"
grep -qE '^    (categories|shortNames):' "$tmp/crds-new.yaml" && die "could not strip categories/shortNames from the CRD copy"
sed -e '/^ *- paused$/d' "$tmp/crds-new.yaml" >"$tmp/crds-old.yaml"
cmp -s "$tmp/crds-old.yaml" "$tmp/crds-new.yaml" && die "the old CRD copy does not differ from the new one"
mini_chart() { # dir crds-file: a chart holding only CRDs and one ConfigMap
  mkdir -p "$1/crds" "$1/templates"
  printf 'apiVersion: v2\nname: crd-path\nversion: 0.1.0\n' >"$1/Chart.yaml"
  cp "$2" "$1/crds/flowline.yaml"
  printf 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: {{ .Release.Name }}}\n' >"$1/templates/marker.yaml"
}
mini_chart "$tmp/chart-old" "$tmp/crds-old.yaml"
mini_chart "$tmp/chart-new" "$tmp/crds-new.yaml"
releases+=("$relc")
quiet "helm install with the old CRDs" helm install "$relc" "$tmp/chart-old" -n "$ns_rel" --wait
quiet "CRDs established" kubectl wait --for condition=Established --timeout 30s "crd/workflows.$crd_group"
wf_in_group() { # name state
  printf 'apiVersion: %s/v1\nkind: Workflow\nmetadata: {name: %s}\nspec: {name: %s, state: %s}\n' "$crd_group" "$1" "$1" "$2"
}
wf_in_group existing draft | quiet "a workflow under the old CRD" kubectl apply -n "$ns_rel" -f -
wf_in_group paused-one paused >"$tmp/paused.yaml"
refused "state paused under the old CRD" 'Unsupported value: "paused"' kubectl apply -n "$ns_rel" -f "$tmp/paused.yaml" --dry-run=server
quiet "helm upgrade with the new CRDs" helm upgrade "$relc" "$tmp/chart-new" -n "$ns_rel" --wait
refused "state paused after helm upgrade" 'Unsupported value: "paused"' kubectl apply -n "$ns_rel" -f "$tmp/paused.yaml" --dry-run=server
log "helm upgrade left the CRDs as they were (as Helm does with crds/)"
refused "kubectl apply --server-side without --force-conflicts" 'conflict with "helm"' \
  kubectl apply --server-side -f "$tmp/chart-new/crds/"
quiet "kubectl apply --server-side --force-conflicts -f crds/" \
  kubectl apply --server-side --force-conflicts -f "$tmp/chart-new/crds/"
quiet "CRDs established after the upgrade" kubectl wait --for condition=Established --timeout 30s \
  "crd/workflows.$crd_group" "crd/runs.$crd_group" "crd/webhooks.$crd_group"
eventually "state paused accepted after the CRD upgrade" 30 kubectl apply -n "$ns_rel" -f "$tmp/paused.yaml"
quiet "the workflow from before the upgrade is still there" kubectl get -n "$ns_rel" "workflows.$crd_group/existing"
log "kubectl apply --server-side conflicts with Helm's fields; with --force-conflicts it upgraded the CRDs, existing objects kept"
quiet "helm uninstall $relc" helm uninstall "$relc" -n "$ns_rel" --wait
quiet "CRDs survive helm uninstall" kubectl get crd "workflows.$crd_group"
log "helm uninstall left the CRDs in place (deleted now by the test)"
