#!/usr/bin/env bash
# The Python tools the tests use, in .flowline/venv: schemathesis (make fuzz-api), the
# Standard Webhooks verifier (tests/cluster/delivery.rs), openapi-spec-validator and
# openapi-python-client (make client-test), selenium (make console-test, driving
# Debian's chromium through its chromedriver). Idempotent.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
venv="$repo/.flowline/venv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
need=()
"$venv/bin/python" -c 'import schemathesis' 2>/dev/null || need+=('schemathesis>=4,<5')
"$venv/bin/python" -c 'import standardwebhooks' 2>/dev/null || need+=('standardwebhooks>=1.0.0,<2')
"$venv/bin/python" -c 'import openapi_spec_validator' 2>/dev/null || need+=('openapi-spec-validator>=0.7,<0.8')
[ -x "$venv/bin/openapi-python-client" ] || need+=('openapi-python-client>=0.24,<1')
# What the client openapi-python-client generates imports (httpx and attrs come with it).
"$venv/bin/python" -c 'import dateutil' 2>/dev/null || need+=('python-dateutil>=2.8,<3')
"$venv/bin/python" -c 'import selenium' 2>/dev/null || need+=('selenium>=4.20,<5')
if [ ${#need[@]} -gt 0 ]; then
  echo "[python] installing ${need[*]} into $venv" >&2
  "$venv/bin/pip" install -q "${need[@]}"
fi
