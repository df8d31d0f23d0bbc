// One run: the graph of its steps with their status and a live timeline (a bar per
// step spanning its attempts), redrawn while the run is unfinished, without reloading;
// each step's input (as rendered when the run recorded it, else the template of the
// version the run executes), output, error and attempts;
// a diff of that version against the workflow now; decisions, cancel and retry.

import { get, post, session } from '../api.js';
import { h, fill, link, time, badge, duration, json, scrollStop, pageTitle, errorText, toast } from '../dom.js';
import { navigate } from '../app.js';
import { hasLog, logViewer } from './logs.js';
import { graphView } from '../graph.js';
import { diffLines, diffView, versionYaml } from '../diff.js';

/**
 * How long to wait before the next poll: every second while the run is young, then
 * less often, so a long run watched on the free plan (60 requests a minute) leaves the
 * account's budget to everything else.
 */
function pollDelay(run) {
  const age = Date.now() - Date.parse(run.started_at);
  if (age < 15000) return 1000;
  if (age < 120000) return 3000;
  return 10000;
}
const unfinished = (status) => status === 'running' || status === 'queued';

export async function render(main, params) {
  const id = params.runId;
  let run = await get(`/runs/${encodeURIComponent(id)}`);
  let workflow = null;
  try { workflow = await get(`/workflows/${encodeURIComponent(run.workflow_id)}`); } catch { workflow = null; }
  // The version the run executes (pinned when it was created); an older server, or a
  // run not pinned yet, falls back to the workflow as it is now.
  const pinned = () => run.workflow_version;
  const declaredSteps = () => pinned()?.steps || workflow?.steps || run.steps.map((r) => ({ id: r.step_id, name: r.name, action: r.action }));
  const declared = () => Object.fromEntries(declaredSteps().map((s) => [s.id, s]));

  const head = h('div.row');
  const banner = h('div', { id: 'decision-banner' });
  const rerun = h('div', { id: 'rerun', hidden: true });
  const summary = h('dl.summary');
  const timeline = h('div.timeline', { id: 'timeline', role: 'img' });
  const graphBox = h('div.graph', { id: 'run-graph' });
  const compare = h('div', { id: 'version-diff' });
  const graph = graphView(graphBox, {
    label: 'Graph of the run\'s steps',
    status: (step) => run.steps.find((r) => r.step_id === step.id) || null,
    onSelect: (i) => {
      const box = stepBoxes.get(declaredSteps()[i]?.id);
      if (!box) return;
      box.open = true;
      box.scrollIntoView({ block: 'start' });
      box.querySelector('summary').focus({ preventScroll: true });
    },
  });
  const steps = h('div.step-records', { id: 'step-records' });
  const live = h('p.sr-only', { 'aria-live': 'polite' });
  fill(main,
    pageTitle(`Run ${id}`, head),
    banner,
    rerun,
    h('p', {}, 'Workflow ', link(`/workflows/${run.workflow_id}/runs`, workflow?.name || run.workflow_id)),
    summary,
    h('div.row', {}, h('button.secondary', { type: 'button', id: 'compare-version', 'aria-expanded': 'false', onclick: (e) => toggleCompare(e.currentTarget) }, 'Compare with the current workflow')),
    compare,
    h('h2', {}, 'Graph'),
    graphBox,
    h('h2', {}, 'Timeline'),
    timeline,
    h('h2', {}, 'Steps'),
    steps,
    live);

  const stepBoxes = new Map();
  const logs = new Map();
  // The comment box of each approval step that waits.
  const comments = new Map();
  const commentBox = (step) => {
    if (!comments.has(step.step_id)) {
      comments.set(step.step_id, h('textarea', { id: `comment-${step.step_id}`, rows: 2, maxlength: 1000 }));
    }
    return comments.get(step.step_id);
  };
  /** Approve or reject `step` with its comment box's text (reject after a confirmation). */
  const decide = (step, verb, done) => async () => {
    if (verb === 'reject' && !confirm(`Reject step ${step.step_id}? The run fails.`)) return;
    const text = commentBox(step).value.trim() || `${done} in the console`;
    try { run = await post(`/runs/${encodeURIComponent(run.id)}/steps/${encodeURIComponent(step.step_id)}/${verb}`, { comment: text }); draw(); } catch (err) { toast(errorText(err), 'error'); }
  };
  /** The first approval that waits, at the top of the page. */
  const drawBanner = (r) => {
    const waiting = session.can('execute') && r.steps.find((s) => s.status === 'waiting' && s.action === 'approval');
    if (!waiting) return void fill(banner);
    fill(banner, h('section.notice.decision', { 'aria-labelledby': 'decision-title' },
      h('h2', { id: 'decision-title' }, `Step ${waiting.name || waiting.step_id} waits for a decision`),
      h('p.help', {}, 'The comment, if any, is the one in the step\'s panel below.'),
      h('div.row', {},
        h('button.primary', { type: 'button', id: 'banner-approve', onclick: decide(waiting, 'approve', 'Approved') }, 'Approve'),
        h('button.danger', { type: 'button', id: 'banner-reject', onclick: decide(waiting, 'reject', 'Rejected') }, 'Reject'))));
  };
  /** A new run of the same workflow with this run's payload, edited first. */
  const drawRerun = (r) => {
    const editor = h('textarea.mono', { id: 'rerun-payload', rows: 6, spellcheck: 'false', 'aria-describedby': 'rerun-status' });
    editor.value = JSON.stringify(r.payload ?? {}, null, 2);
    const said = h('p.help', { id: 'rerun-status', 'aria-live': 'polite' });
    const start = async () => {
      let payload;
      try {
        payload = JSON.parse(editor.value);
        if (!payload || typeof payload !== 'object' || Array.isArray(payload)) throw new Error('the payload must be a JSON object');
      } catch (e) {
        said.textContent = `Not valid: ${e.message}`;
        said.className = 'help error';
        editor.setAttribute('aria-invalid', 'true');
        return;
      }
      const body = { payload, priority: r.priority };
      if (Object.keys(r.tags || {}).length) body.tags = r.tags;
      try {
        const next = await post(`/workflows/${encodeURIComponent(r.workflow_id)}/runs`, body);
        toast('Run started');
        navigate(`/runs/${next.id}`);
      } catch (err) {
        said.textContent = errorText(err);
        said.className = 'help error';
      }
    };
    fill(rerun, h('section.card', { 'aria-labelledby': 'rerun-title' },
      h('h2', { id: 'rerun-title' }, 'Run again with an edited payload'),
      h('label', { for: 'rerun-payload' }, 'Payload (JSON object); the new run has this run\'s tags and priority, and the workflow as it is now'),
      editor, said,
      h('div.row', {}, h('button.primary', { type: 'button', id: 'rerun-start', onclick: start }, 'Start the run'))));
    rerun.hidden = false;
    editor.focus();
  };
  const draw = () => {
    fill(head, badge(run.status), actions(run));
    drawBanner(run);
    fill(summary,
      h('dt', {}, 'Status'), h('dd', { id: 'run-status' }, run.status),
      h('dt', {}, 'Trigger'), h('dd', {}, run.trigger),
      h('dt', {}, 'Started'), h('dd', {}, time(run.started_at)),
      h('dt', {}, 'Finished'), h('dd', {}, time(run.finished_at)),
      h('dt', {}, 'Duration'), h('dd', {}, duration(run.duration_ms)),
      h('dt', {}, 'Priority'), h('dd', { id: 'run-priority' }, String(run.priority)),
      Object.keys(run.tags || {}).length ? [h('dt', {}, 'Tags'), h('dd.mono', { id: 'run-tags' },
        Object.entries(run.tags).map(([k, v]) => `${k}:${v}`).join(', '))] : null,
      run.retry_of ? [h('dt', {}, 'Retry of'), h('dd', {}, link(`/runs/${run.retry_of}`, run.retry_of))] : null,
      run.parent_run_id ? [h('dt', {}, 'Started by'), h('dd', { id: 'parent-run' },
        link(`/runs/${run.parent_run_id}`, run.parent_run_id), ` (step ${run.parent_step_id})`)] : null,
      run.event_id ? [h('dt', {}, 'Event'), h('dd', { id: 'run-event' }, link(`/events/${run.event_id}`, run.event_id))] : null,
      run.error ? [h('dt', {}, 'Error'), h('dd.error', { id: 'run-error' }, run.error)] : null,
      h('dt', {}, 'Payload'), h('dd', {}, json(run.payload)));
    drawTimeline(timeline, run);
    graph.update(declaredSteps());
    for (const step of run.steps) {
      let box = stepBoxes.get(step.step_id);
      if (!box) {
        box = h('details.step-record', { id: `step-${step.step_id}`, dataset: { step: step.step_id } });
        stepBoxes.set(step.step_id, box);
        steps.append(box);
      }
      drawStep(box, step, declared()[step.step_id], run);
    }
  };

  function actions(r) {
    if (!session.can('execute')) return h('span.muted', {}, 'Cancel and retry need the execute scope.');
    if (unfinished(r.status)) {
      return h('button.danger', {
        type: 'button', id: 'cancel', disabled: r.cancel_requested,
        onclick: async (e) => {
          if (!confirm('Cancel this run? Its running steps are stopped and it ends cancelled.')) return;
          e.target.disabled = true;
          try { run = await post(`/runs/${id}/cancel`); toast('Cancel requested'); draw(); } catch (err) { toast(errorText(err), 'error'); e.target.disabled = false; }
        },
      }, r.cancel_requested ? 'Cancelling…' : 'Cancel run');
    }
    const retry = (from, version = 'pinned') => async () => {
      try {
        const next = await post(`/runs/${id}/retry`, { from, version });
        toast('Retry started');
        navigate(`/runs/${next.id}`);
      } catch (err) { toast(errorText(err), 'error'); }
    };
    return [
      r.status === 'succeeded' ? null : h('button.secondary', { type: 'button', id: 'retry-failed', onclick: retry('failed') }, 'Retry from the failed step'),
      h('button.secondary', { type: 'button', id: 'retry-start', onclick: retry('start') }, 'Run again from the start'),
      r.status === 'succeeded' ? null : h('button.secondary', {
        type: 'button', id: 'retry-current-version', onclick: retry('failed', 'current'),
        title: 'Runs the workflow as it is now; steps whose definition is unchanged keep their results',
      }, 'Retry on the current version'),
      h('button.secondary', { type: 'button', id: 'rerun-edit', onclick: () => drawRerun(r) }, 'Run again with an edited payload…'),
    ];
  }

  function drawStep(box, step, decl, r) {
    const open = box.open;
    const focused = document.activeElement;
    const body = [
      h('summary', {},
        h('strong', {}, step.name || step.step_id), ' ', badge(step.status),
        h('span.muted', {}, ` ${step.action || ''} · ${duration(step.duration_ms)} · ${step.attempts} attempt${step.attempts === 1 ? '' : 's'}`)),
      h('dl.summary', {},
        h('dt', {}, 'Attempts'), h('dd', {}, String(step.attempts)),
        h('dt', {}, 'Started'), h('dd', {}, time(step.started_at)),
        h('dt', {}, 'Finished'), h('dd', {}, time(step.finished_at)),
        step.reused ? [h('dt', {}, 'Output'), h('dd', {}, 'kept from the run this one retries')] : null),
      stepInput(step, decl, box),
      h('h3', {}, 'Output'),
      step.output === null || step.output === undefined ? h('p.muted', {}, 'None yet.') : json(step.output),
      step.output_truncated ? h('p.notice', {}, 'Stored truncated: the output was over 64 KiB.') : null,
      step.error ? [h('h3', {}, 'Error'), h('pre.error', {}, step.error)] : null,
      childRuns(step),
    ];
    if (hasLog(step, workflow)) {
      let viewer = logs.get(step.step_id);
      if (!viewer) {
        viewer = logViewer(r.id, step.step_id);
        logs.set(step.step_id, viewer);
      }
      viewer.update(step);
      body.push(h('h3', {}, 'Log'), viewer.element);
    }
    // Only an approval takes a decision (a waiting `wait` ends at its time).
    if (step.status === 'waiting' && step.action === 'approval' && session.can('execute')) {
      // Kept across redraws (every poll redraws the step), so a comment being typed
      // survives them.
      const comment = commentBox(step);
      body.push(h('div.field', {}, h('label', { for: comment.id }, 'Comment (optional, kept with the decision)'), comment),
        h('div.row', {}, h('button.primary', { type: 'button', id: `approve-${step.step_id}`, onclick: decide(step, 'approve', 'Approved') }, 'Approve'),
          h('button.danger', { type: 'button', id: `reject-${step.step_id}`, onclick: decide(step, 'reject', 'Rejected') }, 'Reject')));
    }
    fill(box, ...body);
    box.open = open;
    // The comment box is the same element again: give it its focus back.
    if (focused?.isConnected && focused !== document.activeElement) focused.focus();
  }

  /**
   * What the step was given: its input as rendered when the step started, when the run
   * recorded it (secrets shown as "[redacted]"), else the template it declares.
   */
  function stepInput(step, decl, box) {
    const template = decl ? json(decl.with || {}) : h('p.muted', {}, 'The step is no longer in the workflow.');
    const from = pinned()
      ? `the version this run executed (version ${pinned().generation})` : 'the workflow now';
    if (step.input === null || step.input === undefined) {
      return [h('h3', {}, 'Input (template)'), template,
        decl ? h('p.help', {}, `As declared in ${from}, templates unrendered: this run did not record the input it rendered`
          + `${step.input_truncated ? ' (it was dropped to keep the run within its size limit)' : ''}.`) : null];
    }
    return [
      h('h3', {}, 'Input (as run)'),
      // A truncated input is a string: the start of its JSON text, shown as it is.
      h('div.step-input', {}, step.input_truncated ? scrollStop(h('pre.json', {}, String(step.input))) : json(step.input)),
      step.input_truncated ? h('p.notice', {}, 'Truncated: the input was too large to keep whole; this is the start of its JSON.') : null,
      h('p.help', {}, 'As rendered when the step started, templates filled in; secret values show as [redacted].'),
      // Kept open across the redraws of a poll.
      decl ? h('details.template', { open: box.querySelector('details.template')?.open }, h('summary', {}, 'The template it was rendered from'), template,
        h('p.help', {}, `As declared in ${from}.`)) : null,
    ];
  }

  /** The run's version against the workflow now: a line diff of their YAML. */
  async function toggleCompare(button) {
    if (button.getAttribute('aria-expanded') === 'true') {
      button.setAttribute('aria-expanded', 'false');
      fill(compare);
      return;
    }
    button.setAttribute('aria-expanded', 'true');
    // The workflow as it is at this moment, not when the page was opened.
    try { workflow = await get(`/workflows/${encodeURIComponent(run.workflow_id)}`); } catch { /* as read before */ }
    const version = pinned();
    if (!version || !workflow) {
      fill(compare, h('p.notice', {}, version ? 'The workflow no longer exists.' : 'This run shows no pinned version to compare.'));
      return;
    }
    const lines = diffLines(versionYaml(version, run.workflow_id), versionYaml(workflow, run.workflow_id));
    fill(compare, h('section.card', { 'aria-labelledby': 'diff-title' },
      h('h2', { id: 'diff-title' }, `Version ${version.generation} (this run) against the workflow now`),
      diffView(lines, 'this run\'s version', 'the workflow now')));
  }

  draw();
  let timer = null;
  let stopped = false;
  const poll = async () => {
    if (stopped) return;
    let delay = pollDelay(run);
    try {
      const next = await get(`/runs/${encodeURIComponent(id)}`);
      if (stopped) return;
      if (next.status !== run.status) live.textContent = `Run ${next.status}`;
      run = next;
      draw();
    } catch (e) {
      // Rate limited or briefly unavailable: wait as told, then go on.
      delay = Math.max(delay, (e.retryAfter || 2) * 1000);
    }
    if (unfinished(run.status) && !stopped) timer = setTimeout(poll, delay);
  };
  if (unfinished(run.status)) timer = setTimeout(poll, pollDelay(run));
  // Between polls, running bars grow with the clock (drawn locally, no request).
  const clock = setInterval(() => { if (unfinished(run.status)) drawTimeline(timeline, run); }, 250);
  return () => {
    stopped = true;
    clearTimeout(timer);
    clearInterval(clock);
    for (const viewer of logs.values()) viewer.stop();
  };
}

/** The child runs a `workflow` step started: its own, or one per iteration. */
function childRuns(step) {
  const children = step.child_run_id
    ? [{ id: step.child_run_id, label: step.child_run_id, status: step.status }]
    : (step.iterations || []).filter((i) => i.child_run_id)
      .map((i) => ({ id: i.child_run_id, label: `${i.child_run_id} (item ${i.index})`, status: i.status }));
  if (!children.length) return null;
  return [h('h3', {}, children.length === 1 ? 'Child run' : 'Child runs'),
    h('ul.child-runs', {}, children.map((c) => h('li', {}, link(`/runs/${c.id}`, c.label), ' ', badge(c.status))))];
}

/** A step's duration, or for one still running the time since it started. */
function elapsed(step, now) {
  if (step.duration_ms !== null && step.duration_ms !== undefined) return step.duration_ms;
  return step.status === 'running' && step.started_at ? Math.max(0, now - Date.parse(step.started_at)) : null;
}

/** One row a step: a bar from its first attempt's start to its last attempt's end. */
function drawTimeline(box, run) {
  const t0 = Date.parse(run.started_at);
  const now = Date.now();
  const end = run.finished_at ? Date.parse(run.finished_at) : now;
  const span = Math.max(end - t0, 1);
  box.setAttribute('aria-label', `Timeline of ${run.steps.length} steps over ${duration(span)}`);
  fill(box,
    run.steps.map((step) => {
      const bar = h(`div.bar.s-${step.status}`, { title: `${step.step_id}: ${step.status}` });
      if (step.started_at) {
        const from = Date.parse(step.started_at) - t0;
        const to = (step.finished_at ? Date.parse(step.finished_at) : end) - t0;
        bar.style.left = `${Math.min(100, (from / span) * 100)}%`;
        bar.style.width = `${Math.max(0.5, ((to - from) / span) * 100)}%`;
        // Attempts after the first split the bar with ticks (the API keeps the first
        // start and the last finish of a step, not each attempt's).
        for (let i = 1; i < step.attempts; i += 1) {
          const tick = h('span.tick');
          tick.style.left = `${(i / step.attempts) * 100}%`;
          bar.append(tick);
        }
      } else bar.classList.add('not-started');
      return h('div.lane', { dataset: { step: step.step_id, status: step.status } },
        h('span.lane-label', {}, step.name || step.step_id),
        h('div.track', {}, bar),
        h('span.lane-meta', {}, `${step.status} · ${duration(elapsed(step, end))}${step.attempts > 1 ? ` · ${step.attempts} attempts` : ''}`));
    }),
    h('div.axis', {}, h('span', {}, '0'), h('span', {}, duration(span))));
}
