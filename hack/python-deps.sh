#!/usr/bin/env bash
# The Python tools the tests use, in .flowline/venv: schemathesis (make fuzz-api), the
# Standard Webhooks verifier (tests/cluster/delivery.rs) and selenium (make console-test,
# driving Debian's chromium through its chromedriver). Idempotent.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
venv="$repo/.flowline/venv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
need=()
"$venv/bin/python" -c 'import schemathesis' 2>/dev/null || need+=('schemathesis>=4,<5')
"$venv/bin/python" -c 'import standardwebhooks' 2>/dev/null || need+=('standardwebhooks>=1.0.0,<2')
"$venv/bin/python" -c 'import selenium' 2>/dev/null || need+=('selenium>=4.20,<5')
if [ ${#need[@]} -gt 0 ]; then
  echo "[python] installing ${need[*]} into $venv" >&2
  "$venv/bin/pip" install -q "${need[@]}"
fi
