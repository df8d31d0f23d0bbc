//! The reference's examples: a complete workflow, the context its templates and
//! expressions are shown against, and the template and expression examples. Each is
//! evaluated by the real engines when the reference is written, and the tests check
//! that each works (or fails) as it says.

use serde_json::{Value, json};

/// A complete workflow using most fields.
pub const WORKFLOW: &str = r#"apiVersion: flowline.io/v1
kind: Workflow
metadata:
  name: order-fulfilment
  namespace: shop
spec:
  name: Order fulfilment
  description: Reserves the stock of a paid order, asks for approval above 1000, then ships it.
  state: active
  # Runs start on each signed POST /v1/hooks/order-fulfilment, and by hand.
  trigger:
    type: webhook
  executor: inline
  # Two days at most, the approval included.
  timeoutMs: 172800000
  # One run at a time per customer; the others wait their turn.
  concurrency:
    limit: 1
    key: "{{ trigger.payload.customer_id }}"
    policy: queue
  history:
    succeeded: 50
    failed: 200
  # `needs` makes the steps a graph: `reserve` and `approve` run side by side.
  parallelism: 4
  steps:
  - id: fetch-order
    name: Fetch the order
    action: http.request
    timeoutMs: 10000
    retry:
      maxAttempts: 3
      backoffMs: 500
      backoffFactor: 2
    with:
      url: "https://shop.example.com/api/orders/{{ trigger.payload.order_id }}"
      headers:
        Authorization: "Bearer {{ secrets.shop-api.token }}"
      expect_status: 200
  - id: reserve
    name: Reserve each line
    action: http.request
    needs: [fetch-order]
    # One request per order line, at most 5 at once.
    forEach: "{{ steps.fetch-order.output.body.lines }}"
    forEachConcurrency: 5
    with:
      method: POST
      url: https://stock.example.com/reservations
      body:
        order: "{{ trigger.payload.order_id }}"
        sku: "{{ item.sku }}"
        quantity: "{{ item.quantity }}"
        line: "{{ index }}"
  - id: approve
    action: approval
    needs: [fetch-order]
    # Skipped (and so no approval asked) for orders of 1000 or less.
    when: "steps.fetch-order.output.body.total > 1000"
    with:
      timeout_ms: 86400000
  - id: ship
    action: http.request
    needs: [reserve, approve]
    with:
      method: POST
      url: https://shipping.example.com/shipments
      body:
        order: "{{ trigger.payload.order_id }}"
        reservations: "{{ steps.reserve.output }}"
        run: "{{ run.id }}"
  - id: confirm
    action: transform
    needs: [ship]
    with:
      value:
        message: "Order {{ trigger.payload.order_id }} shipped by {{ workflow.name }}"
        tracking: "{{ steps.ship.output.body.tracking }}"
  # The run's result once every step has ended well: the Run's status.output, and
  # `output` in GET /v1/runs/{id}.
  output:
    order: "{{ trigger.payload.order_id }}"
    tracking: "{{ steps.ship.output.body.tracking }}"
    confirmation: "{{ steps.confirm.output.message }}"
"#;

/// The context the examples are evaluated against: what step `confirm` of [`WORKFLOW`]
/// sees in one run, with `item` and `index` as the second iteration of `reserve` has
/// them, and the Secrets the examples read.
pub fn context() -> Value {
    json!({
        "trigger": {
            "payload": {
                "order_id": "A-1001",
                "customer_id": 42,
                "priority": "express",
                "notes": "",
                "ship_after": "2026-03-02T08:00:00Z"
            },
            "headers": {
                "content-type": "application/json",
                "user-agent": "shop/2.3",
                "webhook-id": "msg_2mVq",
                "webhook-timestamp": "1772366400"
            },
            "event": {"id": "evt_3k9x2m7q1d", "name": "order.created"},
            "scheduled_at": "2026-03-02T08:00:00Z"
        },
        "run": {"id": "order-fulfilment-x7k2p"},
        "workflow": {"id": "order-fulfilment", "name": "Order fulfilment"},
        "steps": {
            "fetch-order": {
                "status": "succeeded",
                "output_truncated": false,
                "output": {
                    "status": 200,
                    "headers": {"content-type": "application/json"},
                    "body": {
                        "id": "A-1001",
                        "total": 640,
                        "gift": false,
                        "lines": [
                            {"sku": "X-1", "quantity": 2},
                            {"sku": "Y-7", "quantity": 1}
                        ]
                    }
                }
            },
            "reserve": {
                "status": "succeeded",
                "output_truncated": false,
                "output": [
                    {"status": 201, "headers": {}, "body": {"reservation": "r-1"}},
                    {"status": 201, "headers": {}, "body": {"reservation": "r-2"}}
                ]
            },
            "approve": {"status": "skipped", "output_truncated": false, "output": null},
            "ship": {
                "status": "succeeded",
                "output_truncated": false,
                "output": {"status": 201, "headers": {}, "body": {"tracking": "1Z999AA1"}}
            }
        },
        "secrets": {
            "shop-api": {"token": "tok_live_123"},
            "chat": {"token": "xoxb-123"}
        },
        "callbacks": {
            "fetch-order": {"url": "https://flowline.example.com/v1/callbacks/shop~order-fulfilment-x7k2p~q3z7yk2mlw4vx5tbn6rdcj8hfa"}
        },
        "item": {"sku": "Y-7", "quantity": 1},
        "index": 1
    })
}

/// The context of a `concurrency.key`: the trigger alone, with its type.
#[cfg(test)]
pub fn key_context() -> Value {
    let ctx = context();
    json!({"trigger": {"type": "webhook", "payload": ctx["trigger"]["payload"]}})
}

/// The time the `wait` and `approval` examples start waiting at.
#[cfg(test)]
pub const NOW: &str = "2026-03-01T12:00:00Z";

/// A template or an expression, what it shows, and whether it fails.
pub struct Example {
    pub text: &'static str,
    pub note: &'static str,
    /// Whether it fails: the tests hold the engines to it.
    #[cfg_attr(not(test), expect(dead_code, reason = "read by the tests"))]
    pub fails: bool,
}

const fn works(text: &'static str, note: &'static str) -> Example {
    Example {
        text,
        note,
        fails: false,
    }
}

const fn fails(text: &'static str, note: &'static str) -> Example {
    Example {
        text,
        note,
        fails: true,
    }
}

/// Template strings, rendered against [`context`].
pub const TEMPLATES: &[Example] = &[
    works(
        "{{ trigger.payload.order_id }}",
        "exactly one template: the value itself",
    ),
    works(
        "{{ trigger.payload.customer_id }}",
        "keeps its JSON type: a number",
    ),
    works(
        "{{ steps.fetch-order.output.body.lines }}",
        "an array (or an object) as a whole",
    ),
    works(
        "{{ steps.fetch-order.output.body.lines.0.sku }}",
        "array elements by position, from 0",
    ),
    works(
        "Order {{ trigger.payload.order_id }} for customer {{trigger.payload.customer_id}}",
        "text around templates: a string; spaces inside the braces are optional",
    ),
    works(
        "lines={{ steps.fetch-order.output.body.lines }}",
        "a value that is not a string, inside a string: its compact JSON",
    ),
    works(
        "{{ item.sku }} x {{ item.quantity }}",
        "in a `forEach` step",
    ),
    works("{{ index }}", "in a `forEach` step: from 0"),
    works("Bearer {{ secrets.shop-api.token }}", "a Secret's key"),
    works(
        "{{ trigger.headers.user-agent }}",
        "a run started by an inbound webhook",
    ),
    works(
        "{{ steps.approve.status }}",
        "a step whose `when` was false",
    ),
    fails(
        "{{ trigger.payload.coupon }}",
        "a missing path fails the step",
    ),
    fails("{{ payload.order_id }}", "every path starts at a root"),
    fails("{{ trigger.payload.order_id", "unterminated"),
];

/// `when` expressions, evaluated against [`context`].
pub const EXPRESSIONS: &[Example] = &[
    works(
        "steps.fetch-order.output.body.total > 1000",
        "compare a number",
    ),
    works("trigger.payload.priority == 'express'", "compare a string"),
    works(
        "steps.fetch-order.output.status == 200 && !steps.fetch-order.output.body.gift",
        "combine",
    ),
    works(
        "(trigger.payload.priority == 'express' || steps.fetch-order.output.body.total >= 500) && trigger.payload.customer_id != null",
        "group with parentheses",
    ),
    works(
        "{{ trigger.payload.priority }} != \"standard\"",
        "a path may be written as a template; strings in either quotes",
    ),
    works(
        "steps.fetch-order.output.body.lines",
        "a bare value: its truthiness (a non-empty array)",
    ),
    works("trigger.payload.notes", "an empty string is falsy"),
    works("steps.approve.status == 'skipped'", "a skipped step"),
    works(
        "trigger.payload.customer_id == '42'",
        "values of different types are never equal",
    ),
    works(
        "'Zebra' < 'apple'",
        "strings compare character by character",
    ),
    works(
        "false && trigger.payload.coupon == 'X'",
        "the right side is not evaluated: no error for the missing path",
    ),
    fails(
        "trigger.payload.coupon == 'X'",
        "a missing path fails the step",
    ),
    fails(
        "trigger.payload.customer_id < 'x'",
        "ordering different types fails",
    ),
    fails("1 < 2 < 3", "comparisons do not chain"),
    fails("item.sku == 'X-1'", "`when` cannot read `item`"),
    fails(
        "trigger.payload.priority == express",
        "strings must be quoted",
    ),
];
