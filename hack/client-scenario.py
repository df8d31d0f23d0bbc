"""A whole session through the client openapi-python-client generated from
/v1/openapi.json (hack/client-test.sh): every call goes through the generated
functions and models, so a document that misdescribes a request or a response
fails here. Usage: client-scenario.py <base URL> <admin API key>."""

import sys
import time

from flowline_client import AuthenticatedClient
from flowline_client.api.api_keys import api_keys_create, api_keys_delete, api_keys_list
from flowline_client.api.runs import runs_create, runs_get, runs_list, runs_retry
from flowline_client.api.webhooks import (
    webhooks_create,
    webhooks_delete,
    webhooks_deliveries_list,
    webhooks_get,
)
from flowline_client.api.workflows import (
    workflows_create,
    workflows_delete,
    workflows_get,
    workflows_list,
    workflows_update,
)
from flowline_client.models import (
    Action,
    ApiKeyCreate,
    Error,
    EventKind,
    RetryCreate,
    RetryStart,
    RunCreate,
    RunCreatePayloadType0,
    RunPhase,
    Scope,
    StepInput,
    StepInputWithType0,
    TriggerInput,
    TriggerType,
    WebhookCreate,
    WorkflowCreate,
    WorkflowPatch,
    WorkflowState,
)

base, key = sys.argv[1], sys.argv[2]
client = AuthenticatedClient(base_url=base, token=key, raise_on_unexpected_status=True)


def ok(response, status):
    """The parsed body of a response that must have `status`."""
    assert response.status_code == status, (response.status_code, response.content)
    assert response.headers.get("x-ratelimit-remaining") is not None, response.headers
    return response.parsed


def error(response, status, code):
    """A documented error: `status`, parsed as the Error model, with `code`."""
    assert response.status_code == status, (response.status_code, response.content)
    assert isinstance(response.parsed, Error), response.parsed
    assert response.parsed.error.code.value == code, response.parsed
    return response.parsed.error


# A workflow: created as a draft, given steps that pass data along, activated.
wf = ok(workflows_create.sync_detailed(client=client, body=WorkflowCreate(
    name="Client scenario", trigger=TriggerInput(type_=TriggerType.MANUAL))), 201)
assert wf.state == WorkflowState.DRAFT
with_value = StepInputWithType0.from_dict({"value": {"doubled": "{{ trigger.payload.n }}"}})
with_delay = StepInputWithType0.from_dict({"ms": 1})
wf = ok(workflows_update.sync_detailed(wf.id, client=client, body=WorkflowPatch(
    state=WorkflowState.ACTIVE,
    steps=[StepInput(id="shape", action=Action.TRANSFORM, with_=with_value),
           StepInput(id="pause", action=Action.DELAY, with_=with_delay)])), 200)
assert wf.state == WorkflowState.ACTIVE and len(wf.steps) == 2
listed = ok(workflows_list.sync_detailed(client=client, state=WorkflowState.ACTIVE), 200)
assert [w.id for w in listed.data] == [wf.id], listed
assert ok(workflows_get.sync_detailed(wf.id, client=client), 200).name == "Client scenario"

# A run, polled to success; its step output is the rendered template.
payload = RunCreatePayloadType0.from_dict({"n": 21})
run = ok(runs_create.sync_detailed(wf.id, client=client, body=RunCreate(payload=payload),
                                   idempotency_key="client-scenario-1"), 201)
deadline = time.monotonic() + 20
while run.status in (RunPhase.RUNNING, RunPhase.QUEUED):
    assert time.monotonic() < deadline, f"run {run.id} still {run.status}"
    time.sleep(0.1)
    run = ok(runs_get.sync_detailed(run.id, client=client), 200)
assert run.status == RunPhase.SUCCEEDED, run
assert run.steps[0].output == {"doubled": 21}, run.steps[0]
assert run.duration_ms is not None and run.finished_at is not None
again = ok(runs_create.sync_detailed(wf.id, client=client, body=RunCreate(payload=payload),
                                     idempotency_key="client-scenario-1"), 200)
assert again.id == run.id, "the Idempotency-Key replays the first run"
retried = ok(runs_retry.sync_detailed(run.id, client=client,
                                      body=RetryCreate(from_=RetryStart.START)), 201)
assert retried.retry_of == run.id
runs = ok(runs_list.sync_detailed(wf.id, client=client, limit=1), 200)
assert len(runs.data) == 1 and runs.next_cursor, runs
older = ok(runs_list.sync_detailed(wf.id, client=client, limit=1, cursor=runs.next_cursor), 200)
assert {runs.data[0].id, older.data[0].id} == {run.id, retried.id}

# A webhook: created (its secret shown once), read, its deliveries listed, deleted.
hook = ok(webhooks_create.sync_detailed(client=client, body=WebhookCreate(
    url="https://receiver.invalid/flowline", events=[EventKind.WORKFLOW_PAUSED],
    workflow_id=wf.id)), 201)
assert hook.secret.startswith("whsec_")
assert ok(webhooks_get.sync_detailed(hook.id, client=client), 200).workflow_id == wf.id
assert ok(webhooks_deliveries_list.sync_detailed(hook.id, client=client), 200).data == []
ok(webhooks_delete.sync_detailed(hook.id, client=client), 204)

# An API key: created with its value, listed without it, used, revoked.
created = ok(api_keys_create.sync_detailed(client=client, body=ApiKeyCreate(
    name="reader", scopes=[Scope.READ])), 201)
assert created.key.startswith("flk_")
keys = ok(api_keys_list.sync_detailed(client=client), 200)
assert created.id in [k.id for k in keys.data]
assert "key" not in keys.to_dict()["data"][0]
reader = AuthenticatedClient(base_url=base, token=created.key)
# The key is usable once the API's key index has seen it: wait for that positive signal.
deadline = time.monotonic() + 10
while (r := workflows_get.sync_detailed(wf.id, client=reader)).status_code == 401:
    assert time.monotonic() < deadline, "the new key never authenticated"
    time.sleep(0.1)
ok(r, 200)
error(workflows_delete.sync_detailed(wf.id, client=reader), 403, "insufficient_scope")
ok(api_keys_delete.sync_detailed(created.id, client=client), 204)

# Error paths, parsed as the documented Error body.
error(workflows_get.sync_detailed("wf-missing", client=client), 404, "workflow_not_found")
error(workflows_delete.sync_detailed(wf.id, client=client), 409, "workflow_active")
ok(workflows_update.sync_detailed(wf.id, client=client,
                                  body=WorkflowPatch(state=WorkflowState.PAUSED)), 200)
# The body is optional: `null` (what the client sends for None) is no body.
error(runs_create.sync_detailed(wf.id, client=client, body=None), 409, "workflow_paused")
# A field the document does not list is refused as it says (additionalProperties: false).
raw = client.get_httpx_client().post("/v1/workflows", json={"name": "x", "colour": "red"})
assert raw.status_code == 400, raw.text
body = Error.from_dict(raw.json()).error
assert body.code.value == "validation_error" and "unknown field `colour`" in body.message, body
assert body.details[0].field == "colour", body
ok(workflows_delete.sync_detailed(wf.id, client=client), 204)
print("client scenario: 16 operations through the generated client, every answer as documented")
