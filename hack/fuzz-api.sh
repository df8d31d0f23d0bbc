#!/usr/bin/env bash
# Fuzzes the running API with schemathesis against the OpenAPI document it serves:
# no 5xx, and every response must match the document (status, headers, body). Then sends
# what a schema-driven fuzzer does not: bodies nested far deeper than the API's limit and
# strings up to the body size limit, to every operation that takes a body.
# Needs a cluster (KUBECONFIG) with the CRDs installed, and a built target/debug/flowline.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
examples=${FUZZ_EXAMPLES:-25}
venv="$repo/.flowline/venv"

"$repo/hack/python-deps.sh"

# shellcheck source=lib/serve-flowline.sh
. "$repo/hack/lib/serve-flowline.sh"
# The stateful phase may revoke the very key it was given (it lists the account's keys
# and deletes what it finds): from then on its requests spend the address budget, which
# is raised here so they get their 401s rather than 429s.
serve_flowline fuzz-api api --unauthenticated-requests-per-minute 100000000
port=${FLOWLINE_URL##*:}
key=$FLOWLINE_KEY

# positive_data_acceptance is left out on purpose: a schema cannot say which cursor
# strings or time-zone names exist, so valid-looking values are rightly refused.
# Unauthenticated probes are left out too: they are rate limited per address, and a
# 429 there is the contract, not a failure.
cd "$repo/.flowline"
"$venv/bin/schemathesis" run "http://127.0.0.1:$port/v1/openapi.json" \
  -H "Authorization: Bearer $key" --max-examples "$examples" \
  --checks not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance \
  --max-failures 20

# Hostile bodies: deep nesting must be a 400 validation_error naming the limit, and no
# body, however deep or large, may get a 5xx. A key of their own: schemathesis may have
# revoked the first.
key=$("$repo/target/debug/flowline" api-key create --namespace "$FLOWLINE_NS" --name hostile --scopes admin 2>/dev/null)
for _ in $(seq 100); do  # until the API's key cache has seen it
  [ "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $key" "$FLOWLINE_URL/v1/workflows")" = 200 ] && break
  sleep 0.1
done
"$venv/bin/python" - "http://127.0.0.1:$port" "$key" <<'PY'
import json, sys, urllib.error, urllib.request

base, key = sys.argv[1], sys.argv[2]
failures = []

def send(method, path, body):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method, headers={
        "Authorization": "Bearer " + key, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as res:
            return res.status, json.loads(res.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")

def nested(levels):
    return ("{\"a\":" * levels + "1" + "}" * levels).encode()

def check(what, status, body, expect=None):
    error = body.get("error") if isinstance(body, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    if status >= 500:
        failures.append(f"{what}: {status} {body}")
    elif expect and (status, code) != expect:
        failures.append(f"{what}: expected {expect}, got {status} {code}")

status, wf = send("POST", "/v1/workflows", {"name": "hostile"})
assert status == 201, (status, wf)
wf_path = "/v1/workflows/" + wf["id"]
refused = (400, "validation_error")
for levels in (33, 120, 124, 10_000):
    deep = nested(levels)
    for method, path, body in (
        ("POST", "/v1/workflows", deep),
        ("POST", "/v1/workflows", b'{"name":"d","description":' + deep + b"}"),
        ("PATCH", wf_path, b'{"steps":[{"id":"s","action":"transform","with":{"value":' + deep + b"}}]}"),
        ("POST", wf_path + "/runs", b'{"payload":' + deep + b"}"),
        ("POST", "/v1/webhooks", b'{"url":"https://h.test","events":' + deep + b"}"),
        ("POST", "/v1/api-keys", b'{"name":"k","scopes":' + deep + b"}"),
    ):
        status, body = send(method, path, body)
        check(f"{method} {path} nested {levels}", status, body, refused)
        if status == 400 and "nesting deeper than 32" not in json.dumps(body):
            failures.append(f"{method} {path} nested {levels}: limit not named: {body}")

big = "x" * (1024 * 1024 - 200)
keys = {f"k{i:07}": 1 for i in range(60_000)}  # about 900 KB: under the body limit
for what, method, path, body in (
    ("huge name", "POST", "/v1/workflows", {"name": big}),
    ("huge description", "PATCH", wf_path, {"description": big}),
    ("huge with", "PATCH", wf_path, {"steps": [{"id": "s", "action": "transform", "with": {"value": big}}]}),
    ("many keys in with", "PATCH", wf_path, {"steps": [{"id": "s", "action": "transform", "with": {"value": keys}}]}),
    ("huge payload", "POST", wf_path + "/runs", {"payload": {"p": big}}),
    ("many keys in payload", "POST", wf_path + "/runs", {"payload": keys}),
    ("huge webhook url", "POST", "/v1/webhooks", {"url": "https://h.test/" + big, "events": ["run.failed"]}),
    ("huge key name", "POST", "/v1/api-keys", {"name": big, "scopes": ["read"]}),
):
    status, body = send(method, path, body)
    check(what, status, body)

if failures:
    print("hostile bodies:", *failures, sep="\n  ", file=sys.stderr)
    sys.exit(1)
print("hostile bodies: deep nesting refused with 400, no 5xx for deep or large bodies")
PY
