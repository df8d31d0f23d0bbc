"""Signs requests with the off-the-shelf Standard Webhooks library (PyPI
`standardwebhooks`), as a sender would. Reads a JSON list of
{"secret", "id", "timestamp" (Unix seconds), "body"} on stdin and prints one JSON
object per line: the headers to send. Used by tests/cluster/hooks.rs."""

import json
import sys
from datetime import datetime, timezone

from standardwebhooks.webhooks import Webhook

for item in json.load(sys.stdin):
    when = datetime.fromtimestamp(item["timestamp"], tz=timezone.utc)
    signature = Webhook(item["secret"]).sign(item["id"], when, item["body"])
    print(
        json.dumps(
            {
                "webhook-id": item["id"],
                "webhook-timestamp": str(item["timestamp"]),
                "webhook-signature": signature,
            }
        )
    )
