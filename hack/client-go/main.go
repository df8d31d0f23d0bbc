// A session through the Go client oapi-codegen makes from /v1/openapi.json
// (hack/client-test.sh generates it next to this file, as flowline.gen.go in package
// main): the same steps as hack/client-ts/scenario.ts. A request or response the
// document misdescribes fails to compile here, or fails a check at run time.
// Usage: session <base URL> <admin API key>.
package main

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() {
	if len(os.Args) != 3 {
		failf("usage: session <base URL> <admin API key>")
	}
	base, key := os.Args[1], os.Args[2]
	auth := WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
		req.Header.Set("Authorization", "Bearer "+key)
		return nil
	})
	c, err := NewClientWithResponses(base, auth, WithHTTPClient(rateLimited{http.DefaultClient}))
	if err != nil {
		failf("client: %v", err)
	}
	// Callback URLs take no API key (the token is the credential): called without one.
	anonymous, err := NewClientWithResponses(base, WithHTTPClient(rateLimited{http.DefaultClient}))
	if err != nil {
		failf("client: %v", err)
	}
	ctx := context.Background()

	// A workflow: created as a draft, given steps that pass data along and an output,
	// activated.
	created := expect(c.WorkflowsCreateWithResponse(ctx, WorkflowCreate{
		Name: "Go client scenario", Trigger: &TriggerInput{Type: TriggerTypeManual},
	}))(201).JSON201
	check(created.State == Draft, "a new workflow is a draft, not %s", created.State)
	id := created.Id
	steps := []StepInput{
		{Id: "shape", Action: ActionTransform,
			With: &map[string]any{"value": map[string]any{"doubled": "{{ trigger.payload.n }}"}}},
		{Id: "pause", Action: ActionDelay, With: &map[string]any{"ms": 1}},
	}
	wf := expect(c.WorkflowsUpdateWithResponse(ctx, id, WorkflowPatch{
		State: new(Active), Steps: &steps, Output: map[string]any{"answer": "{{ steps.shape.output.doubled }}"},
	}))(200).JSON200
	check(wf.State == Active && len(wf.Steps) == 2, "activated with 2 steps: %+v", wf)

	// A run, polled to success: its output and its first step's output are the rendered
	// templates (JSON numbers decode as float64).
	run := startAndFinish(ctx, c, id, map[string]any{"n": 21})
	check(run.Status == RunPhaseSucceeded, "run %s %s: steps %+v", run.Id, run.Status, run.Steps)
	check(reflect.DeepEqual(run.Output, map[string]any{"answer": 21.0}), "run output %#v", run.Output)
	shape := stepOf(run, "shape")
	check(reflect.DeepEqual(shape.Output, map[string]any{"doubled": 21.0}),
		"step output %#v", shape.Output)
	check(run.DurationMs != nil && run.FinishedAt != nil, "a finished run has a duration and an end")

	// Two runs, listed one per page: the first page's next_cursor leads to the other.
	second := startAndFinish(ctx, c, id, map[string]any{"n": 2})
	check(second.Status == RunPhaseSucceeded, "second run %s", second.Status)
	first := expect(c.RunsListWithResponse(ctx, id, &RunsListParams{Limit: new(int32(1))}))(200).JSON200
	check(len(first.Data) == 1 && first.NextCursor != nil, "first page of one: %+v", first)
	next := RunsListParams{Limit: new(int32(1)), Cursor: first.NextCursor}
	rest := expect(c.RunsListWithResponse(ctx, id, &next))(200).JSON200
	check(len(rest.Data) == 1, "second page of one: %+v", rest)
	listed := map[string]bool{first.Data[0].Id: true, rest.Data[0].Id: true}
	check(maps.Equal(listed, map[string]bool{run.Id: true, second.Id: true}), "pages %v", listed)

	// Sub-workflows: a parent whose `workflow` step calls the first workflow (after the
	// paging above, which counts that workflow's runs) and waits for the child.
	parentWf := expect(c.WorkflowsCreateWithResponse(ctx, WorkflowCreate{
		Name: "Go client scenario: parent", Trigger: &TriggerInput{Type: TriggerTypeManual},
	}))(201).JSON201
	expect(c.WorkflowsUpdateWithResponse(ctx, parentWf.Id, WorkflowPatch{Steps: &[]StepInput{
		{Id: "call", Action: ActionWorkflow,
			With: &map[string]any{"workflow": id, "payload": map[string]any{"n": 4}}},
	}}))(200)
	// A draft takes manual runs: the parent needs no activation (and deletes without a pause).
	parent := startAndFinish(ctx, c, parentWf.Id, map[string]any{})
	check(parent.Status == RunPhaseSucceeded, "parent run %s %s: steps %+v",
		parent.Id, parent.Status, parent.Steps)
	call := stepOf(parent, "call")
	check(call.ChildRunId != nil, "step call names no child run: %+v", call)
	// The child links back to its parent, ran the called workflow with the step's payload,
	// and the step's output carries its output.
	child := getRun(ctx, c, *call.ChildRunId)
	check(child.Trigger == RunTriggerWorkflow && child.WorkflowId == id, "child %s of %s started by %s",
		child.Id, child.WorkflowId, child.Trigger)
	check(child.ParentRunId != nil && *child.ParentRunId == parent.Id, "child's parent_run_id %s, not %s",
		deref(child.ParentRunId), parent.Id)
	check(child.ParentStepId != nil && *child.ParentStepId == "call", "child's parent_step_id %s",
		deref(child.ParentStepId))
	check(reflect.DeepEqual(child.Payload, map[string]any{"n": 4.0}), "child payload %#v", child.Payload)
	check(child.Status == RunPhaseSucceeded, "child %s", child.Status)
	check(reflect.DeepEqual(child.Output, map[string]any{"answer": 4.0}), "child output %#v", child.Output)
	carried := map[string]any{"run_id": child.Id, "status": "succeeded", "output": child.Output}
	check(reflect.DeepEqual(call.Output, carried), "step call's output %#v", call.Output)

	// Events: an active workflow subscribed to an event name, with a filter on the payload.
	eventName := "go.order.created"
	eventWf := expect(c.WorkflowsCreateWithResponse(ctx, WorkflowCreate{
		Name: "Go client scenario: events",
		Trigger: &TriggerInput{
			Type: TriggerTypeEvent, Event: new(eventName), Filter: new("event.payload.n > 0"),
		},
	}))(201).JSON201
	check(eventWf.Trigger.Event != nil && *eventWf.Trigger.Event == eventName &&
		eventWf.Trigger.Filter != nil && *eventWf.Trigger.Filter == "event.payload.n > 0",
		"event trigger %+v", eventWf.Trigger)
	expect(c.WorkflowsUpdateWithResponse(ctx, eventWf.Id, WorkflowPatch{
		State: new(Active),
		Steps: &[]StepInput{
			{Id: "echo", Action: ActionTransform, With: &map[string]any{"value": "{{ trigger.payload }}"}},
		},
		Output: map[string]any{"order": "{{ trigger.payload.order }}", "event": "{{ trigger.event.id }}"},
	}))(200)
	// One event the filter refuses, then one it passes, posted with a client id.
	refusedEvent := expect(c.EventsCreateWithResponse(ctx, EventCreate{
		Name: eventName, Payload: &map[string]any{"n": 0},
	}))(202).JSON202
	payload := map[string]any{"n": 7.0, "order": "A-1"}
	event := expect(c.EventsCreateWithResponse(ctx, EventCreate{
		Name: eventName, Payload: &payload, Id: new("go-order-1"),
	}))(202).JSON202
	check(strings.HasPrefix(event.Id, "evt_"), "event id %q", event.Id)
	// The same client id again answers the first event (200, an EventView), starting nothing.
	replay := expect(c.EventsCreateWithResponse(ctx, EventCreate{
		Name: eventName, Payload: &map[string]any{"n": 8}, Id: new("go-order-1"),
	}))(200).JSON200
	check(replay.Id == event.Id && reflect.DeepEqual(replay.Payload, payload), "replay %+v", replay)
	// The operator fans the event out shortly after: poll until it lists its run.
	fanned := until("event "+event.Id+" started no run",
		func() *EventView { return expect(c.EventsGetWithResponse(ctx, event.Id))(200).JSON200 },
		func(e *EventView) bool { return len(e.Runs) > 0 })
	check(fanned.Name == eventName && reflect.DeepEqual(fanned.Payload, payload), "event %+v", fanned)
	check(len(fanned.Runs) == 1, "event started %v", fanned.Runs)
	eventRunID := fanned.Runs[0]
	eventRun := finishedRun(ctx, c, eventRunID)
	check(eventRun.Status == RunPhaseSucceeded, "event run %s %s: steps %+v",
		eventRun.Id, eventRun.Status, eventRun.Steps)
	check(eventRun.WorkflowId == eventWf.Id && eventRun.Trigger == RunTriggerEvent,
		"event run of %s started by %s", eventRun.WorkflowId, eventRun.Trigger)
	check(eventRun.EventId != nil && *eventRun.EventId == event.Id, "event run's event_id %s",
		deref(eventRun.EventId))
	check(reflect.DeepEqual(eventRun.Payload, payload), "event run payload %#v", eventRun.Payload)
	echo := stepOf(eventRun, "echo")
	check(reflect.DeepEqual(echo.Output, payload), "step echo's output %#v", echo.Output)
	check(reflect.DeepEqual(eventRun.Output, map[string]any{"order": "A-1", "event": event.Id}),
		"event run output %#v", eventRun.Output)
	// The refused event (posted first, so most likely fanned out by now) started nothing: the
	// workflow's only run is the other event's.
	eventRuns := expect(c.RunsListWithResponse(ctx, eventWf.Id, nil))(200).JSON200
	check(len(eventRuns.Data) == 1 && eventRuns.Data[0].Id == eventRunID,
		"event workflow's runs %+v", eventRuns.Data)
	// Both events of the name, one per page; the last page has no next_cursor.
	eventsFirst := expect(c.EventsListWithResponse(ctx, &EventsListParams{
		Name: new(eventName), Limit: new(int32(1)),
	}))(200).JSON200
	check(len(eventsFirst.Data) == 1 && eventsFirst.NextCursor != nil,
		"first page of one event: %+v", eventsFirst)
	eventsRest := expect(c.EventsListWithResponse(ctx, &EventsListParams{
		Name: new(eventName), Limit: new(int32(1)), Cursor: eventsFirst.NextCursor,
	}))(200).JSON200
	check(len(eventsRest.Data) == 1 && eventsRest.NextCursor == nil,
		"last page of one event: %+v", eventsRest)
	events := map[string][]string{}
	for _, e := range append(eventsFirst.Data, eventsRest.Data...) {
		events[e.Id] = e.Runs
	}
	_, hasRefused := events[refusedEvent.Id]
	check(len(events) == 2 && hasRefused && slices.Equal(events[event.Id], []string{eventRunID}),
		"listed events %v", events)

	// Callbacks: a step renders the URL of the callback step after it (GET /v1/runs shows
	// no URL; only templates do), the run parks on the callback, a POST completes it.
	callbackWf := expect(c.WorkflowsCreateWithResponse(ctx, WorkflowCreate{
		Name: "Go client scenario: callback", Trigger: &TriggerInput{Type: TriggerTypeManual},
	}))(201).JSON201
	expect(c.WorkflowsUpdateWithResponse(ctx, callbackWf.Id, WorkflowPatch{Steps: &[]StepInput{
		{Id: "hand-out", Action: ActionTransform,
			With: &map[string]any{"value": "{{ callbacks.paid.url }}"}},
		{Id: "paid", Action: ActionCallback, With: &map[string]any{"timeout_ms": 60_000}},
	}}))(200)
	started := expect(c.RunsCreateWithResponse(ctx, callbackWf.Id, nil,
		RunCreate{Payload: &map[string]any{}}))(201).JSON201
	parked := until("run "+started.Id+" never waited for its callback",
		func() *RunView { return getRun(ctx, c, started.Id) },
		func(r *RunView) bool {
			return finished(r) || slices.ContainsFunc(r.Steps, func(s StepRecordView) bool {
				return s.StepId == "paid" && s.Status == StepPhaseWaiting
			})
		})
	check(parked.Status == RunPhaseRunning, "run %s %s: steps %+v", parked.Id, parked.Status, parked.Steps)
	handOut := stepOf(parked, "hand-out").Output
	callbackURL, isString := handOut.(string)
	check(isString, "hand-out rendered no URL: %#v", handOut)
	parsed, err := url.Parse(callbackURL)
	check(err == nil, "callback URL %q: %v", callbackURL, err)
	match := regexp.MustCompile(`^/v1/callbacks/([^/]+)$`).FindStringSubmatch(parsed.Path)
	check(match != nil, "not a callback URL: %s", callbackURL)
	token := match[1]
	body := map[string]any{"payment_id": "pay_1", "amount": 120.0}
	accepted := expect(anonymous.CallbacksReceiveWithResponse(ctx, token, body))(200).JSON200
	check(*accepted == CallbackAccepted{RunId: started.Id, StepId: "paid"}, "callback answered %+v", accepted)
	called := finishedRun(ctx, c, started.Id)
	check(called.Status == RunPhaseSucceeded, "run %s %s: steps %+v", called.Id, called.Status, called.Steps)
	paid := stepOf(called, "paid")
	check(reflect.DeepEqual(paid.Output, body), "step paid's output %#v", paid.Output)
	// A URL accepts one call: the second is refused, as the typed Error body says.
	again := map[string]any{"payment_id": "pay_2"}
	failed(expect(anonymous.CallbacksReceiveWithResponse(ctx, token, again))(409).JSON409,
		ErrorObjectCodeCallbackUsed)
	failed(expect(anonymous.CallbacksReceiveWithResponse(ctx, "made-up", map[string]any{}))(404).JSON404,
		ErrorObjectCodeCallbackNotFound)

	// Run operations: tagged runs of a workflow whose only step is an approval (so they
	// stay `running` until cancelled), found across workflows by the list's filters, then
	// cancelled and retried in bulk. Every client's session shares the account: the batch
	// tag is this session's own, and every filter below includes it or this workflow.
	batch := "go-" + strconv.FormatInt(time.Now().UnixMilli(), 36)
	tags := map[string]string{"batch": batch, "kind": "x"}
	otherTags := map[string]string{"batch": batch + "-other", "kind": "x"}
	gateWf := expect(c.WorkflowsCreateWithResponse(ctx, WorkflowCreate{
		Name: "Go client scenario: run operations", Trigger: &TriggerInput{Type: TriggerTypeManual},
	}))(201).JSON201
	expect(c.WorkflowsUpdateWithResponse(ctx, gateWf.Id, WorkflowPatch{
		State: new(Active), Steps: &[]StepInput{{Id: "gate", Action: ActionApproval}},
	}))(200)
	startTagged := func(runTags map[string]string) *RunView {
		started := expect(c.RunsCreateWithResponse(ctx, gateWf.Id, nil, RunCreate{Tags: &runTags}))(201).JSON201
		check(maps.Equal(started.Tags, runTags), "run %s has tags %v, not %v", started.Id, started.Tags, runTags)
		return started
	}
	olderTagged := startTagged(tags)
	newerTagged := startTagged(tags)
	tagged := set(olderTagged.Id, newerTagged.Id)
	other := startTagged(otherTags)
	// Tags are part of the run JSON for good, not only of the answer that created it.
	kept := getRun(ctx, c, olderTagged.Id)
	check(maps.Equal(kept.Tags, tags), "run %s read back with tags %v", kept.Id, kept.Tags)

	// GET /v1/runs: every filter given must hold. The batch tag picks this session's two
	// runs (not the other batch's), whose list items carry their tags.
	batchTag := "batch:" + batch
	byBatch := listRuns(ctx, c, RunsListAllParams{Tag: &[]string{batchTag}})
	check(maps.Equal(idsOf(byBatch), tagged), "runs tagged %s: %+v", batchTag, byBatch)
	for _, item := range byBatch {
		check(maps.Equal(item.Tags, tags), "list item %s has tags %v", item.Id, item.Tags)
	}
	allFilters := listRuns(ctx, c, RunsListAllParams{
		Tag: &[]string{batchTag, "kind:x"}, Status: new(RunPhaseRunning), WorkflowId: &gateWf.Id,
	})
	check(maps.Equal(idsOf(allFilters), tagged), "running runs of %s tagged %s and kind:x: %+v",
		gateWf.Id, batchTag, allFilters)
	ofWorkflow := listRuns(ctx, c, RunsListAllParams{WorkflowId: &gateWf.Id})
	check(maps.Equal(idsOf(ofWorkflow), set(olderTagged.Id, newerTagged.Id, other.Id)),
		"runs of %s: %+v", gateWf.Id, ofWorkflow)
	// Each filter can also leave them out: a repeated tag they lack, another status,
	// another workflow (the first one, still there).
	for what, none := range map[string]RunsListAllParams{
		"kind:y":             {Tag: &[]string{batchTag, "kind:y"}},
		"status succeeded":   {Tag: &[]string{batchTag}, Status: new(RunPhaseSucceeded)},
		"the first workflow": {Tag: &[]string{batchTag}, WorkflowId: &id},
	} {
		found := listRuns(ctx, c, none)
		check(len(found) == 0, "runs tagged %s listed for %s: %+v", batchTag, what, found)
	}
	// created_after is inclusive: from the newer run's creation (its started_at, as it was
	// never queued) it keeps that run and not the one created before.
	since := listRuns(ctx, c, RunsListAllParams{Tag: &[]string{batchTag}, CreatedAfter: &newerTagged.StartedAt})
	check(maps.Equal(idsOf(since), set(newerTagged.Id)), "runs created from %s: %+v", newerTagged.StartedAt, since)
	// One run per page, the filters sent again with the cursor; the last page has no cursor.
	pageParams := RunsListAllParams{Tag: &[]string{batchTag}, Status: new(RunPhaseRunning), Limit: new(int32(1))}
	runsFirst := expect(c.RunsListAllWithResponse(ctx, &pageParams))(200).JSON200
	check(len(runsFirst.Data) == 1 && runsFirst.NextCursor != nil, "first page of one run: %+v", runsFirst)
	pageParams.Cursor = runsFirst.NextCursor
	runsRest := expect(c.RunsListAllWithResponse(ctx, &pageParams))(200).JSON200
	check(len(runsRest.Data) == 1 && runsRest.NextCursor == nil, "last page of one run: %+v", runsRest)
	paged := idsOf(append(runsFirst.Data, runsRest.Data...))
	check(maps.Equal(paged, tagged), "pages %v", paged)

	// Bulk cancel by filter acts on this batch's two running runs and on nothing else.
	cancelled := expect(c.RunsBulkCancelWithResponse(ctx, BulkCancel{
		Filter: &RunFilterInput{Tag: &[]string{batchTag}, Status: new(RunPhaseRunning)},
	}))(202).JSON202
	check(*cancelled == BulkAccepted{Matched: 2, Truncated: false}, "bulk cancel answered %+v", cancelled)
	for _, each := range []string{olderTagged.Id, newerTagged.Id} {
		run := finishedRun(ctx, c, each)
		check(run.Status == RunPhaseCancelled, "run %s %s after a bulk cancel", run.Id, run.Status)
	}
	untouched := getRun(ctx, c, other.Id)
	check(untouched.Status == RunPhaseRunning && !untouched.CancelRequested,
		"the other batch's run %s: %s, cancel requested %v", untouched.Id, untouched.Status, untouched.CancelRequested)

	// Bulk retry by id, on the workflow as it is now: one new run per original, which
	// keeps its tags (so the batch's running runs are now exactly the retries) and names it.
	originals := []string{olderTagged.Id, newerTagged.Id}
	retried := expect(c.RunsBulkRetryWithResponse(ctx, BulkRetry{Ids: &originals, Version: new(Current)}))(202).JSON202
	check(*retried == BulkAccepted{Matched: len(originals), Truncated: false}, "bulk retry answered %+v", retried)
	retries := listRuns(ctx, c, RunsListAllParams{Tag: &[]string{batchTag}, Status: new(RunPhaseRunning)})
	check(len(retries) == len(originals), "running runs tagged %s after the retry: %+v", batchTag, retries)
	retriedFrom := map[string]bool{}
	for _, item := range retries {
		check(maps.Equal(item.Tags, tags), "retry %s has tags %v", item.Id, item.Tags)
		retry := getRun(ctx, c, item.Id)
		check(retry.RetryOf != nil && slices.Contains(originals, *retry.RetryOf),
			"run %s retries %s, not one of %v", retry.Id, deref(retry.RetryOf), originals)
		retriedFrom[*retry.RetryOf] = true
	}
	check(maps.Equal(retriedFrom, set(originals...)), "retried %v, not %v", retriedFrom, originals)

	// `ids` and `filter` together are refused, as the typed Error body says, naming `ids`.
	both := failed(expect(c.RunsBulkCancelWithResponse(ctx, BulkCancel{
		Ids: &originals, Filter: &RunFilterInput{Tag: &[]string{batchTag}},
	}))(400).JSON400, ErrorObjectCodeValidationError)
	check(both.Details != nil && len(*both.Details) == 1 && (*both.Details)[0].Field == "ids",
		"validation details %+v", both.Details)

	// Cleanup: cancel what is left running (the retries and the other batch's run) by
	// filter, then pause and delete the workflow.
	leftover := expect(c.RunsBulkCancelWithResponse(ctx, BulkCancel{
		Filter: &RunFilterInput{WorkflowId: &gateWf.Id, Status: new(RunPhaseRunning)},
	}))(202).JSON202
	check(*leftover == BulkAccepted{Matched: len(retries) + 1, Truncated: false}, "bulk cancel answered %+v", leftover)
	until("runs of "+gateWf.Id+" still running",
		func() []RunListItem {
			return listRuns(ctx, c, RunsListAllParams{WorkflowId: &gateWf.Id, Status: new(RunPhaseRunning)})
		},
		func(running []RunListItem) bool { return len(running) == 0 })
	expect(c.WorkflowsUpdateWithResponse(ctx, gateWf.Id, WorkflowPatch{State: new(Paused)}))(200)
	expect(c.WorkflowsDeleteWithResponse(ctx, gateWf.Id))(204)

	// Container step logs (runs.logs, text/plain): a step on the cluster's real node
	// prints two lines, read back whole once the run has succeeded.
	if toolbox := os.Getenv("FLOWLINE_TOOLBOX_IMAGE"); toolbox != "" {
		logWf := expect(c.WorkflowsCreateWithResponse(ctx, WorkflowCreate{
			Name: "Go client scenario: logs", Trigger: &TriggerInput{Type: TriggerTypeManual},
		}))(201).JSON201
		expect(c.WorkflowsUpdateWithResponse(ctx, logWf.Id, WorkflowPatch{Steps: &[]StepInput{
			{Id: "talk", Action: ActionContainer, With: &map[string]any{
				"image": toolbox, "command": []string{"sh", "-c", "echo hello from the pod; echo done"}}},
		}}))(200)
		talked := startAndFinish(ctx, c, logWf.Id, map[string]any{})
		check(talked.Status == RunPhaseSucceeded, "log run %s %s: steps %+v", talked.Id, talked.Status, talked.Steps)
		log := expect(c.RunsLogsWithResponse(ctx, talked.Id, "talk", &RunsLogsParams{}))(200)
		check(string(log.Body) == "hello from the pod\ndone\n", "the step's log: %q", log.Body)
		expect(c.WorkflowsDeleteWithResponse(ctx, logWf.Id))(204)
	} else {
		fmt.Println("no real node (FLOWLINE_TOOLBOX_IMAGE unset): step logs left out")
	}

	// Error bodies, read through the typed Error: an unknown event, and an event name the
	// pattern refuses, with the field it names.
	failed(expect(c.EventsGetWithResponse(ctx, "evt_missing"))(404).JSON404, ErrorObjectCodeEventNotFound)
	invalid := failed(expect(c.EventsCreateWithResponse(ctx, EventCreate{Name: "Not An Event"}))(400).JSON400,
		ErrorObjectCodeValidationError)
	check(invalid.Details != nil && len(*invalid.Details) == 1 && (*invalid.Details)[0].Field == "name",
		"validation details %+v", invalid.Details)

	// Cleanup: an active workflow cannot be deleted; paused, it can, and is then gone.
	failed(expect(c.WorkflowsDeleteWithResponse(ctx, id))(409).JSON409, ErrorObjectCodeWorkflowActive)
	for _, active := range []string{id, eventWf.Id} {
		expect(c.WorkflowsUpdateWithResponse(ctx, active, WorkflowPatch{State: new(Paused)}))(200)
	}
	for _, each := range []string{id, parentWf.Id, eventWf.Id, callbackWf.Id} {
		expect(c.WorkflowsDeleteWithResponse(ctx, each))(204)
	}
	failed(expect(c.WorkflowsGetWithResponse(ctx, id))(404).JSON404, ErrorObjectCodeWorkflowNotFound)
	fmt.Println("Go client scenario: 15 operations through the generated client, every answer as documented")
}

// getRun reads run id.
func getRun(ctx context.Context, c *ClientWithResponses, id string) *RunView {
	return expect(c.RunsGetWithResponse(ctx, id))(200).JSON200
}

func finished(run *RunView) bool {
	return run.Status != RunPhaseQueued && run.Status != RunPhaseRunning
}

// finishedRun polls run id until it has finished.
func finishedRun(ctx context.Context, c *ClientWithResponses, id string) *RunView {
	return until("run "+id+" never finished", func() *RunView { return getRun(ctx, c, id) }, finished)
}

// startAndFinish starts a run of workflow with payload and polls it until it has finished.
func startAndFinish(ctx context.Context, c *ClientWithResponses, workflow string, payload map[string]any) *RunView {
	run := expect(c.RunsCreateWithResponse(ctx, workflow, nil, RunCreate{Payload: &payload}))(201).JSON201
	return finishedRun(ctx, c, run.Id)
}

// until calls get every 100 ms until done holds of its answer (at most 20 s).
func until[T any](what string, get func() T, done func(T) bool) T {
	deadline := time.Now().Add(20 * time.Second)
	for {
		value := get()
		if done(value) {
			return value
		}
		check(time.Now().Before(deadline), "%s: %+v", what, value)
		time.Sleep(100 * time.Millisecond)
	}
}

// listRuns is what GET /v1/runs lists under params: one page of up to 100, the last.
func listRuns(ctx context.Context, c *ClientWithResponses, params RunsListAllParams) []RunListItem {
	params.Limit = new(int32(100))
	page := expect(c.RunsListAllWithResponse(ctx, &params))(200).JSON200
	check(page.NextCursor == nil, "more than a page of runs: %d and a next_cursor", len(page.Data))
	return page.Data
}

// idsOf is the set of the ids of runs: the checks are about which runs a filter keeps.
func idsOf(runs []RunListItem) map[string]bool {
	ids := map[string]bool{}
	for _, r := range runs {
		ids[r.Id] = true
	}
	return ids
}

// set is the set of ids.
func set(ids ...string) map[string]bool {
	s := map[string]bool{}
	for _, id := range ids {
		s[id] = true
	}
	return s
}

// stepOf is the record of step stepID in run.
func stepOf(run *RunView, stepID string) StepRecordView {
	at := slices.IndexFunc(run.Steps, func(s StepRecordView) bool { return s.StepId == stepID })
	check(at >= 0, "run %s has no record of step %s: %+v", run.Id, stepID, run.Steps)
	return run.Steps[at]
}

// deref is the text of an optional string, for messages.
func deref(s *string) string {
	if s == nil {
		return "null"
	}
	return *s
}

// failed checks a typed error body: present, with code and a message (for people: its
// text may change, but it is never empty).
func failed(body *Error, code ErrorObjectCode) ErrorObject {
	check(body != nil, "no error body (wanted %s)", code)
	check(body.Error.Code == code, "error %+v, wanted %s", body.Error, code)
	check(strings.TrimSpace(body.Error.Message) != "", "error %s without a message", code)
	return body.Error
}

// expect takes what a generated call returns and then the status it must have: the
// response, whose JSON<status> field the client has parsed.
func expect[R interface {
	StatusCode() int
	GetBody() []byte
}](r R, err error) func(status int) R {
	return func(status int) R {
		if err != nil {
			failf("%T: %v", r, err)
		}
		check(r.StatusCode() == status, "%T: wanted %d, got %d: %s", r, status, r.StatusCode(), r.GetBody())
		return r
	}
}

// rateLimited checks what the document promises of every response: the rate-limit headers.
type rateLimited struct{ doer HttpRequestDoer }

func (d rateLimited) Do(req *http.Request) (*http.Response, error) {
	resp, err := d.doer.Do(req)
	if err == nil {
		check(resp.Header.Get("X-RateLimit-Remaining") != "", "%s %s: no X-RateLimit-Remaining", req.Method, req.URL)
	}
	return resp, err
}

func check(ok bool, format string, args ...any) {
	if !ok {
		failf(format, args...)
	}
}

func failf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "Go client scenario: "+format+"\n", args...)
	os.Exit(1)
}
