// A session through the TypeScript client that openapi-typescript (types) and
// openapi-fetch (requests) make from /v1/openapi.json (hack/client-test.sh). It is
// compiled with `strict` and no casts: a request or response the document misdescribes
// fails to compile here, or fails an assertion at run time. hack/client-go/main.go
// takes the same steps.
// Usage: node scenario.js <base URL> <admin API key>.
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import createClient from "openapi-fetch";
import type { components, paths } from "./flowline.js";

type RunView = components["schemas"]["RunView"];
type RunListItem = components["schemas"]["RunListItem"];
type RunsQuery = NonNullable<paths["/v1/runs"]["get"]["parameters"]["query"]>;
type StepRecordView = components["schemas"]["StepRecordView"];

const [base, key] = process.argv.slice(2);
assert(base && key, "usage: scenario.js <base URL> <admin API key>");
const client = createClient<paths>({ baseUrl: base, headers: { Authorization: `Bearer ${key}` } });
// Callback URLs take no API key (the token is the credential): called without one.
const anonymous = createClient<paths>({ baseUrl: base });

/** The body of a response that must have `status` (and the rate-limit headers). */
function ok<T>(result: { data?: T; error?: unknown; response: Response }, status: number): T {
  const { data, error, response } = result;
  if (response.status !== status || data === undefined) {
    throw new Error(`${response.url}: wanted ${status}, got ${response.status} ${JSON.stringify(error)}`);
  }
  assert.notEqual(response.headers.get("x-ratelimit-remaining"), null, "no X-RateLimit-Remaining");
  return data;
}

/** A response without a body: `status` and nothing else. */
function done(result: { error?: unknown; response: Response }, status: number): void {
  const { error, response } = result;
  assert.equal(response.status, status, `${response.url}: ${JSON.stringify(error)}`);
}

/** The typed error body of a response that must have `status` and `code`. */
function failed<E extends { error: { code: string; message: string } }>(
  result: { error?: E; response: Response },
  status: number,
  code: E["error"]["code"],
): E["error"] {
  const { error, response } = result;
  assert.equal(response.status, status, `${response.url}: ${JSON.stringify(error)}`);
  assert(error, `${response.url}: ${status} without an error body`);
  assert.equal(error.error.code, code, JSON.stringify(error));
  // The message is for people: its text may change, but it is never empty.
  assert.match(error.error.message, /\S/, JSON.stringify(error));
  return error.error;
}

/** Calls `get` every 100 ms until `done` holds of its answer (at most 20 s). */
async function until<T>(what: string, get: () => Promise<T>, done: (value: T) => boolean): Promise<T> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const value = await get();
    if (done(value)) return value;
    assert(Date.now() < deadline, `${what}: ${JSON.stringify(value)}`);
    await sleep(100);
  }
}

async function getRun(id: string): Promise<RunView> {
  return ok(await client.GET("/v1/runs/{id}", { params: { path: { id } } }), 200);
}

const finished = (run: RunView) => run.status !== "queued" && run.status !== "running";

/** Run `id`, polled until it has finished. */
async function finishedRun(id: string): Promise<RunView> {
  return until(`run ${id} never finished`, () => getRun(id), finished);
}

/** Starts a run of `workflow` with `payload` and polls it until it has finished. */
async function startAndFinish(workflow: string, payload: { [key: string]: unknown }): Promise<RunView> {
  const run = ok(await client.POST("/v1/workflows/{id}/runs", {
    params: { path: { id: workflow } },
    body: { payload },
  }), 201);
  return finishedRun(run.id);
}

/** The runs `GET /v1/runs` lists under `query`: one page of up to 100, the last. */
async function listRuns(query: RunsQuery): Promise<RunListItem[]> {
  const page = ok(await client.GET("/v1/runs", { params: { query: { ...query, limit: 100 } } }), 200);
  assert.equal(page.next_cursor, null, `more than a page of runs for ${JSON.stringify(query)}`);
  return page.data;
}

/** The ids of `runs`, as a set: the checks are about which runs a filter keeps. */
const idsOf = (runs: { id: string }[]) => new Set(runs.map((r) => r.id));

/** The record of step `stepId` in `run`. */
function stepOf(run: RunView, stepId: string): StepRecordView {
  const record = run.steps.find((s) => s.step_id === stepId);
  assert(record, `run ${run.id} has no record of step ${stepId}: ${JSON.stringify(run.steps)}`);
  return record;
}

// A workflow: created as a draft, given steps that pass data along and an output,
// activated.
let wf = ok(await client.POST("/v1/workflows", {
  body: { name: "TypeScript client scenario", trigger: { type: "manual" } },
}), 201);
assert.equal(wf.state, "draft");
const id = wf.id;
wf = ok(await client.PATCH("/v1/workflows/{id}", {
  params: { path: { id } },
  body: {
    state: "active",
    steps: [
      { id: "shape", action: "transform", with: { value: { doubled: "{{ trigger.payload.n }}" } } },
      { id: "pause", action: "delay", with: { ms: 1 } },
    ],
    output: { answer: "{{ steps.shape.output.doubled }}" },
  },
}), 200);
assert.equal(wf.state, "active");
assert.deepEqual(wf.steps.map((s) => s.id), ["shape", "pause"]);

// A run, polled to success: its output and its first step's output are the rendered
// templates.
const run = await startAndFinish(id, { n: 21 });
assert.equal(run.status, "succeeded", JSON.stringify(run));
assert.deepEqual(run.output, { answer: 21 });
assert.deepEqual(stepOf(run, "shape").output, { doubled: 21 });
assert(run.duration_ms !== undefined && run.duration_ms !== null && run.finished_at, "no duration or end");

// Two runs, listed one per page: the first page's next_cursor leads to the other.
const second = await startAndFinish(id, { n: 2 });
assert.equal(second.status, "succeeded");
const first = ok(await client.GET("/v1/workflows/{id}/runs", {
  params: { path: { id }, query: { limit: 1 } },
}), 200);
assert.equal(first.data.length, 1);
const cursor = first.next_cursor;
assert(cursor, "a first page of one run out of two has a next_cursor");
const rest = ok(await client.GET("/v1/workflows/{id}/runs", {
  params: { path: { id }, query: { limit: 1, cursor } },
}), 200);
assert.deepEqual(new Set([...first.data, ...rest.data].map((r) => r.id)), new Set([run.id, second.id]));

// Sub-workflows: a parent whose `workflow` step calls the first workflow (after the
// paging above, which counts that workflow's runs) and waits for the child.
const parentWf = ok(await client.POST("/v1/workflows", {
  body: { name: "TypeScript client scenario: parent", trigger: { type: "manual" } },
}), 201);
ok(await client.PATCH("/v1/workflows/{id}", {
  params: { path: { id: parentWf.id } },
  body: { steps: [{ id: "call", action: "workflow", with: { workflow: id, payload: { n: 4 } } }] },
}), 200);
// A draft takes manual runs: the parent needs no activation (and deletes without a pause).
const parent = await startAndFinish(parentWf.id, {});
assert.equal(parent.status, "succeeded", JSON.stringify(parent));
const call = stepOf(parent, "call");
assert(call.child_run_id, `step call names no child run: ${JSON.stringify(call)}`);
// The child links back to its parent, ran the called workflow with the step's payload,
// and the step's output carries its output.
const child = await getRun(call.child_run_id);
assert.equal(child.trigger, "workflow");
assert.equal(child.workflow_id, id);
assert.equal(child.parent_run_id, parent.id);
assert.equal(child.parent_step_id, "call");
assert.deepEqual(child.payload, { n: 4 });
assert.equal(child.status, "succeeded");
assert.deepEqual(child.output, { answer: 4 });
assert.deepEqual(call.output, { run_id: child.id, status: "succeeded", output: child.output });

// Events: an active workflow subscribed to an event name, with a filter on the payload.
const eventName = "ts.order.created";
const eventWf = ok(await client.POST("/v1/workflows", {
  body: {
    name: "TypeScript client scenario: events",
    trigger: { type: "event", event: eventName, filter: "event.payload.n > 0" },
  },
}), 201);
assert.equal(eventWf.trigger.event, eventName);
assert.equal(eventWf.trigger.filter, "event.payload.n > 0");
ok(await client.PATCH("/v1/workflows/{id}", {
  params: { path: { id: eventWf.id } },
  body: {
    state: "active",
    steps: [{ id: "echo", action: "transform", with: { value: "{{ trigger.payload }}" } }],
    output: { order: "{{ trigger.payload.order }}", event: "{{ trigger.event.id }}" },
  },
}), 200);
// One event the filter refuses, then one it passes, posted with a client id.
const refusedEvent = ok(await client.POST("/v1/events", { body: { name: eventName, payload: { n: 0 } } }), 202);
const payload = { n: 7, order: "A-1" };
const event = ok(await client.POST("/v1/events", {
  body: { name: eventName, payload, id: "ts-order-1" },
}), 202);
assert.match(event.id, /^evt_/);
// The same client id again answers the first event (200, an EventView), starting nothing.
const replay = ok(await client.POST("/v1/events", {
  body: { name: eventName, payload: { n: 8 }, id: "ts-order-1" },
}), 200);
assert("payload" in replay, `a repeated post answers the event itself: ${JSON.stringify(replay)}`);
assert.equal(replay.id, event.id);
assert.deepEqual(replay.payload, payload);
// The operator fans the event out shortly after: poll until it lists its run.
const fanned = await until(`event ${event.id} started no run`,
  async () => ok(await client.GET("/v1/events/{id}", { params: { path: { id: event.id } } }), 200),
  (e) => e.runs.length > 0);
assert.equal(fanned.name, eventName);
assert.deepEqual(fanned.payload, payload);
assert.equal(fanned.runs.length, 1, JSON.stringify(fanned));
const [eventRunId] = fanned.runs;
assert(eventRunId);
const eventRun = await finishedRun(eventRunId);
assert.equal(eventRun.status, "succeeded", JSON.stringify(eventRun));
assert.equal(eventRun.workflow_id, eventWf.id);
assert.equal(eventRun.trigger, "event");
assert.equal(eventRun.event_id, event.id);
assert.deepEqual(eventRun.payload, payload);
assert.deepEqual(stepOf(eventRun, "echo").output, payload);
assert.deepEqual(eventRun.output, { order: "A-1", event: event.id });
// The refused event (posted first, so most likely fanned out by now) started nothing: the
// workflow's only run is the other event's.
const eventRuns = ok(await client.GET("/v1/workflows/{id}/runs", { params: { path: { id: eventWf.id } } }), 200);
assert.deepEqual(eventRuns.data.map((r) => r.id), [eventRunId]);
// Both events of the name, one per page; the last page has no next_cursor.
const eventsFirst = ok(await client.GET("/v1/events", { params: { query: { name: eventName, limit: 1 } } }), 200);
assert.equal(eventsFirst.data.length, 1);
const eventsCursor = eventsFirst.next_cursor;
assert(eventsCursor, "a first page of one event out of two has a next_cursor");
const eventsRest = ok(await client.GET("/v1/events", {
  params: { query: { name: eventName, limit: 1, cursor: eventsCursor } },
}), 200);
assert.equal(eventsRest.next_cursor, null);
const listed = [...eventsFirst.data, ...eventsRest.data];
assert.deepEqual(new Set(listed.map((e) => e.id)), new Set([refusedEvent.id, event.id]));
assert.deepEqual(listed.find((e) => e.id === event.id)?.runs, [eventRunId]);

// Callbacks: a step renders the URL of the callback step after it (GET /v1/runs shows
// no URL; only templates do), the run parks on the callback, a POST completes it.
const callbackWf = ok(await client.POST("/v1/workflows", {
  body: { name: "TypeScript client scenario: callback", trigger: { type: "manual" } },
}), 201);
ok(await client.PATCH("/v1/workflows/{id}", {
  params: { path: { id: callbackWf.id } },
  body: {
    steps: [
      { id: "hand-out", action: "transform", with: { value: "{{ callbacks.paid.url }}" } },
      { id: "paid", action: "callback", with: { timeout_ms: 60_000 } },
    ],
  },
}), 200);
const started = ok(await client.POST("/v1/workflows/{id}/runs", {
  params: { path: { id: callbackWf.id } },
  body: { payload: {} },
}), 201);
const parked = await until(`run ${started.id} never waited for its callback`, () => getRun(started.id),
  (r) => finished(r) || r.steps.some((s) => s.step_id === "paid" && s.status === "waiting"));
assert.equal(parked.status, "running", JSON.stringify(parked));
const url = stepOf(parked, "hand-out").output;
assert(typeof url === "string", `hand-out rendered no URL: ${JSON.stringify(url)}`);
const token = new URL(url).pathname.match(/^\/v1\/callbacks\/([^/]+)$/)?.[1];
assert(token, `not a callback URL: ${url}`);
const body = { payment_id: "pay_1", amount: 120 };
const accepted = ok(await anonymous.POST("/v1/callbacks/{token}", {
  params: { path: { token: decodeURIComponent(token) } },
  body,
}), 200);
assert.deepEqual(accepted, { run_id: started.id, step_id: "paid" });
const called = await finishedRun(started.id);
assert.equal(called.status, "succeeded", JSON.stringify(called));
assert.deepEqual(stepOf(called, "paid").output, body);
// A URL accepts one call: the second is refused, as the typed Error body says.
failed(await anonymous.POST("/v1/callbacks/{token}", {
  params: { path: { token: decodeURIComponent(token) } },
  body: { payment_id: "pay_2" },
}), 409, "callback_used");
failed(await anonymous.POST("/v1/callbacks/{token}", {
  params: { path: { token: "made-up" } },
  body: {},
}), 404, "callback_not_found");

// Run operations: tagged runs of a workflow whose only step is an approval (so they stay
// `running` until cancelled), found across workflows by the list's filters, then
// cancelled and retried in bulk. Every client's session shares the account: the batch
// tag is this session's own, and every filter below includes it or this workflow.
const batch = `ts-${Date.now().toString(36)}`;
const tags = { batch, kind: "x" };
const otherTags = { batch: `${batch}-other`, kind: "x" };
const gateWf = ok(await client.POST("/v1/workflows", {
  body: { name: "TypeScript client scenario: run operations", trigger: { type: "manual" } },
}), 201);
ok(await client.PATCH("/v1/workflows/{id}", {
  params: { path: { id: gateWf.id } },
  body: { state: "active", steps: [{ id: "gate", action: "approval" }] },
}), 200);
async function startTagged(runTags: { [key: string]: string }): Promise<RunView> {
  const started = ok(await client.POST("/v1/workflows/{id}/runs", {
    params: { path: { id: gateWf.id } },
    body: { tags: runTags },
  }), 201);
  assert.deepEqual(started.tags, runTags, JSON.stringify(started));
  return started;
}
const olderTagged = await startTagged(tags);
const newerTagged = await startTagged(tags);
const tagged = [olderTagged, newerTagged];
const other = await startTagged(otherTags);
// Tags are part of the run JSON for good, not only of the answer that created it.
assert.deepEqual((await getRun(olderTagged.id)).tags, tags);

// GET /v1/runs: every filter given must hold. The batch tag picks this session's two
// runs (not the other batch's), whose list items carry their tags.
const batchTag = `batch:${batch}`;
const byBatch = await listRuns({ tag: [batchTag] });
assert.deepEqual(idsOf(byBatch), idsOf(tagged));
for (const item of byBatch) assert.deepEqual(item.tags, tags, JSON.stringify(item));
assert.deepEqual(
  idsOf(await listRuns({ tag: [batchTag, "kind:x"], status: "running", workflow_id: gateWf.id })),
  idsOf(tagged),
);
assert.deepEqual(idsOf(await listRuns({ workflow_id: gateWf.id })), idsOf([...tagged, other]));
// Each filter can also leave them out: a repeated tag they lack, another status, another
// workflow (the first one, still there).
assert.deepEqual(await listRuns({ tag: [batchTag, "kind:y"] }), []);
assert.deepEqual(await listRuns({ tag: [batchTag], status: "succeeded" }), []);
assert.deepEqual(await listRuns({ tag: [batchTag], workflow_id: id }), []);
// created_after is inclusive: from the newer run's creation (its started_at, as it was
// never queued) it keeps that run and not the one created before.
assert.deepEqual(idsOf(await listRuns({ tag: [batchTag], created_after: newerTagged.started_at })),
  idsOf([newerTagged]));
// One run per page, the filters sent again with the cursor; the last page has no cursor.
const pageQuery: RunsQuery = { tag: [batchTag], status: "running", limit: 1 };
const runsFirst = ok(await client.GET("/v1/runs", { params: { query: pageQuery } }), 200);
assert.equal(runsFirst.data.length, 1);
const runsCursor = runsFirst.next_cursor;
assert(runsCursor, "a first page of one run out of two has a next_cursor");
const runsRest = ok(await client.GET("/v1/runs", { params: { query: { ...pageQuery, cursor: runsCursor } } }), 200);
assert.equal(runsRest.data.length, 1);
assert.equal(runsRest.next_cursor, null);
assert.deepEqual(idsOf([...runsFirst.data, ...runsRest.data]), idsOf(tagged));

// Bulk cancel by filter acts on this batch's two running runs and on nothing else.
const cancelled = ok(await client.POST("/v1/runs/bulk-cancel", {
  body: { filter: { tag: [batchTag], status: "running" } },
}), 202);
assert.deepEqual(cancelled, { matched: 2, truncated: false });
for (const each of tagged) {
  const run = await finishedRun(each.id);
  assert.equal(run.status, "cancelled", JSON.stringify(run));
}
const untouched = await getRun(other.id);
assert.equal(untouched.status, "running", JSON.stringify(untouched));
assert.equal(untouched.cancel_requested, false);

// Bulk retry by id, on the workflow as it is now: one new run per original, which keeps
// its tags (so the batch's running runs are now exactly the retries) and names it.
const originals = tagged.map((r) => r.id);
const retried = ok(await client.POST("/v1/runs/bulk-retry", { body: { ids: originals, version: "current" } }), 202);
assert.deepEqual(retried, { matched: originals.length, truncated: false });
const retries = await listRuns({ tag: [batchTag], status: "running" });
assert.equal(retries.length, originals.length, JSON.stringify(retries));
const retriedFrom = new Set<string>();
for (const item of retries) {
  assert.deepEqual(item.tags, tags, JSON.stringify(item));
  const retry = await getRun(item.id);
  assert(retry.retry_of && originals.includes(retry.retry_of), `not a retry of the batch: ${JSON.stringify(retry)}`);
  retriedFrom.add(retry.retry_of);
}
assert.deepEqual(retriedFrom, new Set(originals));

// `ids` and `filter` together are refused, as the typed Error body says, naming `ids`.
const both = failed(await client.POST("/v1/runs/bulk-cancel", {
  body: { ids: originals, filter: { tag: [batchTag] } },
}), 400, "validation_error");
assert.deepEqual(both.details?.map((d) => d.field), ["ids"], JSON.stringify(both));

// Cleanup: cancel what is left running (the retries and the other batch's run) by
// filter, then pause and delete the workflow.
const leftover = ok(await client.POST("/v1/runs/bulk-cancel", {
  body: { filter: { workflow_id: gateWf.id, status: "running" } },
}), 202);
assert.deepEqual(leftover, { matched: retries.length + 1, truncated: false });
await until(`runs of ${gateWf.id} still running`, () => listRuns({ workflow_id: gateWf.id, status: "running" }),
  (running) => running.length === 0);
ok(await client.PATCH("/v1/workflows/{id}", { params: { path: { id: gateWf.id } }, body: { state: "paused" } }), 200);
done(await client.DELETE("/v1/workflows/{id}", { params: { path: { id: gateWf.id } } }), 204);

// Container step logs (runs.logs, text/plain): a step on the cluster's real node prints
// two lines, read back whole once the run has succeeded.
const toolbox = process.env["FLOWLINE_TOOLBOX_IMAGE"];
if (toolbox) {
  const logWf = ok(await client.POST("/v1/workflows", {
    body: { name: "TypeScript client scenario: logs", trigger: { type: "manual" } },
  }), 201);
  ok(await client.PATCH("/v1/workflows/{id}", {
    params: { path: { id: logWf.id } },
    body: { steps: [{ id: "talk", action: "container",
      with: { image: toolbox, command: ["sh", "-c", "echo hello from the pod; echo done"] } }] },
  }), 200);
  const talked = await startAndFinish(logWf.id, {});
  assert.equal(talked.status, "succeeded", JSON.stringify(talked));
  const log = await client.GET("/v1/runs/{id}/steps/{step_id}/logs", {
    params: { path: { id: talked.id, step_id: "talk" } },
    parseAs: "text",
  });
  assert.equal(log.response.status, 200);
  assert.equal(log.data, "hello from the pod\ndone\n");
  done(await client.DELETE("/v1/workflows/{id}", { params: { path: { id: logWf.id } } }), 204);
} else {
  console.log("no real node (FLOWLINE_TOOLBOX_IMAGE unset): step logs left out");
}

// Error bodies, read through the typed Error: an unknown event, and an event name the
// pattern refuses, with the field it names.
failed(await client.GET("/v1/events/{id}", { params: { path: { id: "evt_missing" } } }), 404, "event_not_found");
const invalid = failed(await client.POST("/v1/events", { body: { name: "Not An Event" } }), 400, "validation_error");
assert.deepEqual(invalid.details?.map((d) => d.field), ["name"], JSON.stringify(invalid));

// Cleanup: an active workflow cannot be deleted; paused, it can, and is then gone.
failed(await client.DELETE("/v1/workflows/{id}", { params: { path: { id } } }), 409, "workflow_active");
for (const active of [id, eventWf.id]) {
  ok(await client.PATCH("/v1/workflows/{id}", { params: { path: { id: active } }, body: { state: "paused" } }), 200);
}
for (const each of [id, parentWf.id, eventWf.id, callbackWf.id]) {
  done(await client.DELETE("/v1/workflows/{id}", { params: { path: { id: each } } }), 204);
}
failed(await client.GET("/v1/workflows/{id}", { params: { path: { id } } }), 404, "workflow_not_found");
console.log("TypeScript client scenario: 15 operations through the generated client, every answer as documented");
