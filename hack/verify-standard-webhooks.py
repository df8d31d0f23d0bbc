"""Verifies deliveries with the off-the-shelf Standard Webhooks library (PyPI
`standardwebhooks`), as a receiver would. Reads a JSON list of
{"secret", "headers", "body"} on stdin and prints one line per item:
"ok" or "invalid: <reason>". Used by tests/cluster/delivery.rs."""

import json
import sys

from standardwebhooks.webhooks import Webhook

for item in json.load(sys.stdin):
    try:
        Webhook(item["secret"]).verify(item["body"], item["headers"])
        print("ok")
    except Exception as e:  # the library raises its own WebhookVerificationError
        print(f"invalid: {e}")
