// Runs of one workflow (/workflows/{id}/runs, with the form that starts one) or of the
// whole account (/runs, with a workflow filter). The filters (status, tag, workflow)
// live in the URL; with the execute scope, runs can be selected and cancelled or
// retried together (the bulk endpoints). Approvals waiting for a decision come first.

import { get, post, session } from '../api.js';
import { h, fill, link, time, badge, duration, pageTitle, errorText, toast } from '../dom.js';
import { navigate } from '../app.js';

const STATUSES = ['', 'queued', 'running', 'succeeded', 'failed', 'cancelled'];
const FILTERS = ['workflow_id', 'status', 'tag'];

export async function render(main, params) {
  const workflowId = params.workflowId;
  const base = workflowId ? `/workflows/${encodeURIComponent(workflowId)}/runs` : '/runs';
  const filters = {
    workflow_id: workflowId ? '' : params.workflow_id || '',
    status: STATUSES.includes(params.status) ? params.status : '',
    tag: params.tag || '',
  };
  const urlOf = (changes, cursor) => {
    const next = { ...filters, ...changes };
    const query = new URLSearchParams();
    for (const k of FILTERS) if (next[k]) query.set(k, next[k]);
    if (cursor) query.set('cursor', cursor);
    return `${base}${query.toString() ? `?${query}` : ''}`;
  };
  const wf = workflowId ? await get(`/workflows/${encodeURIComponent(workflowId)}`) : null;
  const list = h('div', {}, h('p.muted', {}, 'Loading…'));
  const decisions = h('div', { id: 'waiting-decisions' });
  fill(main,
    wf
      ? pageTitle(`Runs of ${wf.name}`, h('div.row', {}, badge(wf.state), link(`/workflows/${wf.id}`, 'Builder')))
      : pageTitle('Runs'),
    wf && (session.can('execute') ? startForm(wf) : h('p.notice', {}, 'Starting runs needs the execute scope.')),
    decisions,
    await filterBar(filters, Boolean(wf), (changes) => navigate(urlOf(changes))),
    list);
  // Drawn with the list, so that neither moves the other once it is shown.
  const decided = waitingForDecision(decisions, base, filters.workflow_id);
  try {
    const page = await get(base, { ...filters, cursor: params.cursor, limit: 20 });
    await decided;
    if (!page.data.length) {
      const filtered = FILTERS.some((k) => filters[k]);
      return void fill(list, h('p.empty', {}, filters.status && !filters.tag ? `No ${filters.status} runs.`
        : filtered ? 'No runs match these filters.' : 'No runs yet.'));
    }
    fill(list,
      session.can('execute') ? bulkBar(list, () => navigate(urlOf({}, params.cursor), { replace: true })) : null,
      table(page.data, !wf),
      h('nav.pager', { 'aria-label': 'Pages' },
        params.cursor ? link(urlOf({}), 'First page') : null,
        page.next_cursor ? link(urlOf({}, page.next_cursor), 'Next page') : null));
  } catch (e) {
    fill(list, h('p.error', { role: 'alert' }, errorText(e)));
  }
}

const SHOWN = 50;

/** Runs whose approval step waits for a decision (`awaiting_decision`), with Approve and Reject. */
async function waitingForDecision(box, base, workflowId) {
  let page;
  try { page = await get(base, { awaiting_decision: 'true', workflow_id: workflowId, limit: SHOWN }); } catch { return; }
  const waiting = page.data.flatMap((run) => run.awaiting_decision.map((step) => ({ run, step: { step_id: step } })));
  if (!box.isConnected) return;
  if (!waiting.length) return void fill(box);
  const execute = session.can('execute');
  const row = ({ run, step }) => {
    const key = `${run.id}-${step.step_id}`;
    const comment = h('input', { type: 'text', id: `comment-${key}`, maxlength: 1000, 'aria-label': `Comment on step ${step.step_id} of run ${run.id} (optional)`, placeholder: 'Comment (optional)' });
    const decide = (verb, done) => async () => {
      if (verb === 'reject' && !confirm(`Reject step ${step.step_id} of run ${run.id}? The run fails.`)) return;
      try {
        await post(`/runs/${encodeURIComponent(run.id)}/steps/${encodeURIComponent(step.step_id)}/${verb}`,
          { comment: comment.value.trim() || `${done} in the console` });
        toast(`${done}: step ${step.step_id} of run ${run.id}`);
        // Decided: off the list at once (the run itself moves on moments later).
        tr.remove();
        const left = box.querySelectorAll('#waiting tbody tr').length;
        if (left) title.textContent = `Waiting for a decision (${left})`;
        else fill(box);
      } catch (err) { toast(errorText(err), 'error'); }
    };
    const tr = h('tr', { dataset: { run: run.id, step: step.step_id } },
      h('td.mono', { 'data-label': 'Run' }, link(`/runs/${encodeURIComponent(run.id)}`, run.id)),
      h('td', { 'data-label': 'Workflow' }, run.workflow_id),
      h('td', { 'data-label': 'Step' }, step.step_id),
      h('td', { 'data-label': 'Run started' }, time(run.started_at)),
      execute ? h('td', { 'data-label': 'Decision' }, h('div.row', {}, comment,
        h('button.primary', { type: 'button', id: `approve-${key}`, onclick: decide('approve', 'Approved') }, 'Approve'),
        h('button.danger', { type: 'button', id: `reject-${key}`, onclick: decide('reject', 'Rejected') }, 'Reject'))) : null);
    return tr;
  };
  const title = h('h2', { id: 'waiting-title' }, `Waiting for a decision (${waiting.length})`);
  fill(box, h('section.card.decisions', { 'aria-labelledby': 'waiting-title' },
    title,
    h('table.list', { id: 'waiting' },
      h('caption.sr-only', {}, 'Approval steps waiting for a decision'),
      h('thead', {}, h('tr', {}, ['Run', 'Workflow', 'Step', 'Run started', execute ? 'Decision' : null]
        .filter(Boolean).map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, waiting.map(row))),
    page.next_cursor ? h('p.help', {}, `The ${SHOWN} newest; more wait.`) : null));
}

/** Status, tag and (account-wide) workflow filters; `apply` navigates to the new ones. */
async function filterBar(filters, ofWorkflow, apply) {
  const status = h('select', { id: 'status-filter', onchange: () => apply({ status: status.value }) },
    STATUSES.map((s) => h('option', { value: s, selected: s === filters.status }, s || 'all statuses')));
  const tag = h('input.mono', {
    id: 'tag-filter', name: 'tag', value: filters.tag, placeholder: 'customer:acme', size: 18,
    'aria-describedby': 'tag-filter-help',
  });
  const parts = [h('label', { for: 'status-filter' }, 'Status'), status];
  if (!ofWorkflow) {
    const workflows = await get('/workflows', { limit: 100 }).then((p) => p.data, () => []);
    const known = workflows.some((w) => w.id === filters.workflow_id);
    const select = h('select', { id: 'workflow-filter', onchange: () => apply({ workflow_id: select.value }) },
      h('option', { value: '' }, 'all workflows'),
      known || !filters.workflow_id ? null : h('option', { value: filters.workflow_id, selected: true }, filters.workflow_id),
      workflows.map((w) => h('option', { value: w.id, selected: w.id === filters.workflow_id }, w.name)));
    parts.push(h('label', { for: 'workflow-filter' }, 'Workflow'), select);
  }
  parts.push(h('form.row', {
    role: 'search',
    'aria-label': 'Filter by tag',
    onsubmit: (e) => { e.preventDefault(); apply({ tag: tag.value.trim() }); },
  }, h('label', { for: 'tag-filter' }, 'Tag'), tag,
  h('button.secondary', { type: 'submit', id: 'apply-tag' }, 'Filter'),
  h('span.help.sr-only', { id: 'tag-filter-help' }, 'key:value, as the run was tagged')));
  return h('div.toolbar', {}, parts);
}

function tags(run) {
  const pairs = Object.entries(run.tags || {});
  if (!pairs.length) return h('span.muted', {}, '—');
  return h('ul.tags', {}, pairs.map(([k, v]) => h('li.tag.mono', {}, `${k}:${v}`)));
}

function table(runs, accountWide) {
  const execute = session.can('execute');
  const columns = ['Run', accountWide ? 'Workflow' : null, 'Status', 'Tags', 'Started', 'Duration'].filter(Boolean);
  const all = execute ? h('input', {
    type: 'checkbox', id: 'select-all', 'aria-label': 'Select every run of this page',
    onchange: (e) => {
      for (const box of document.querySelectorAll('#runs input[name=run]')) box.checked = e.target.checked;
      document.getElementById('runs').dispatchEvent(new Event('change', { bubbles: true }));
    },
  }) : null;
  return h('table.list', { id: 'runs' },
    h('caption.sr-only', {}, 'Runs, newest first'),
    h('thead', {}, h('tr', {}, execute ? h('th', { scope: 'col' }, all) : null,
      columns.map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', {}, runs.map((r) => h('tr', { dataset: { id: r.id } },
      execute ? h('td', {}, h('input', { type: 'checkbox', name: 'run', value: r.id, 'aria-label': `Select run ${r.id}` })) : null,
      h('td.mono', { 'data-label': 'Run' }, link(`/runs/${encodeURIComponent(r.id)}`, r.id)),
      accountWide ? h('td', { 'data-label': 'Workflow' }, link(`/workflows/${encodeURIComponent(r.workflow_id)}/runs`, r.workflow_id)) : null,
      h('td', { 'data-label': 'Status' }, badge(r.status)),
      h('td', { 'data-label': 'Tags' }, tags(r)),
      h('td', { 'data-label': 'Started' }, time(r.started_at)),
      h('td', { 'data-label': 'Duration' }, duration(r.duration_ms))))));
}

/** Cancel or retry the selected runs of `list`'s table; `done` redraws the page. */
function bulkBar(list, done) {
  const count = h('span', { id: 'selected-count', 'aria-live': 'polite' }, 'No runs selected');
  const current = h('input', { type: 'checkbox', id: 'retry-current' });
  const cancel = h('button.danger', { type: 'button', id: 'bulk-cancel', disabled: true }, 'Cancel selected');
  const retry = h('button.secondary', { type: 'button', id: 'bulk-retry', disabled: true }, 'Retry selected');
  const selected = () => [...list.querySelectorAll('input[name=run]:checked')].map((b) => b.value);
  list.addEventListener('change', () => {
    const n = selected().length;
    count.textContent = n ? `${n} selected` : 'No runs selected';
    cancel.disabled = retry.disabled = n === 0;
  });
  const act = (path, body, said) => async () => {
    const ids = selected();
    cancel.disabled = retry.disabled = true;
    try {
      const answer = await post(path, { ids, ...body });
      toast(said(answer.matched));
      done();
    } catch (err) {
      toast(errorText(err), 'error');
      cancel.disabled = retry.disabled = false;
    }
  };
  const doCancel = act('/runs/bulk-cancel', {}, (n) => `Cancel requested for ${n} run${n === 1 ? '' : 's'} (finished ones are left as they are)`);
  cancel.addEventListener('click', () => {
    const n = selected().length;
    if (confirm(`Cancel ${n} run${n === 1 ? '' : 's'}? Their running steps are stopped and they end cancelled.`)) doCancel();
  });
  retry.addEventListener('click', () => act('/runs/bulk-retry', { version: current.checked ? 'current' : 'pinned' },
    (n) => `${n} retr${n === 1 ? 'y' : 'ies'} started (unfinished runs are left as they are)`)());
  return h('div.toolbar.bulk', { role: 'group', 'aria-label': 'Selected runs' }, count, cancel, retry,
    h('label.check', { for: 'retry-current' }, current, 'retry on the workflow as it is now'));
}

function startForm(wf) {
  const sample = sessionStorage.getItem(`flowline.sample.${wf.id}`);
  const editor = h('textarea.mono', { id: 'payload', rows: 5, spellcheck: 'false', 'aria-describedby': 'payload-status' });
  editor.value = sample && sample.trim() ? sample : '{}';
  const priority = h('select', { id: 'run-priority', 'aria-describedby': 'run-priority-help' },
    h('option', { value: '' }, `the workflow's (${wf.priority || 3})`),
    [1, 2, 3, 4, 5].map((p) => h('option', { value: String(p) }, String(p))));
  const tagsInput = h('input.mono', { id: 'run-tags', name: 'tags', placeholder: 'customer:acme, batch:7', 'aria-describedby': 'run-tags-help' });
  const status = h('p.help', { id: 'payload-status', 'aria-live': 'polite' });
  const button = h('button.primary', { type: 'submit', id: 'start-run' }, 'Start run');
  const check = () => {
    try {
      const value = JSON.parse(editor.value || '{}');
      if (!value || typeof value !== 'object' || Array.isArray(value)) throw new Error('the payload must be a JSON object');
      status.textContent = 'Valid JSON object.';
      status.className = 'help';
      editor.removeAttribute('aria-invalid');
      button.disabled = false;
      return value;
    } catch (e) {
      status.textContent = `Not valid: ${e.message}`;
      status.className = 'help error';
      editor.setAttribute('aria-invalid', 'true');
      button.disabled = true;
      return null;
    }
  };
  editor.addEventListener('input', check);
  const paused = wf.state === 'paused';
  return h('form.card', {
    id: 'start-form',
    onsubmit: async (e) => {
      e.preventDefault();
      const payload = check();
      if (!payload) return;
      const tags = parseTags(tagsInput.value);
      button.disabled = true;
      try {
        const body = { payload };
        if (Object.keys(tags).length) body.tags = tags;
        if (priority.value) body.priority = Number(priority.value);
        const run = await post(`/workflows/${wf.id}/runs`, body);
        toast('Run started');
        navigate(`/runs/${run.id}`);
      } catch (err) {
        button.disabled = false;
        status.textContent = errorText(err);
        status.className = 'help error';
      }
    },
  },
  h('h2', {}, 'Start a run'),
  paused ? h('p.notice', {}, 'This workflow is paused: the API refuses new runs (409 workflow_paused) until it is activated.') : null,
  h('label', { for: 'payload' }, 'Payload (JSON object, available to steps as trigger.payload)'),
  editor, status,
  h('label', { for: 'run-tags' }, 'Tags (optional)'), tagsInput,
  h('p.help', { id: 'run-tags-help' }, 'key:value pairs separated by commas, at most 10; the run lists filter by them.'),
  h('label', { for: 'run-priority' }, 'Priority'), priority,
  h('p.help', { id: 'run-priority-help' }, '1 first … 5 last: the order in which runs waiting for a slot start.'),
  h('div.row', {}, button,
    h('button.secondary', { type: 'button', onclick: () => { try { editor.value = JSON.stringify(JSON.parse(editor.value), null, 2); } catch { check(); } } }, 'Format')));
}

/** `a:b, c:d` as `{a: "b", c: "d"}`; the API judges keys and values. */
export function parseTags(text) {
  const tags = {};
  for (const part of text.split(',').map((p) => p.trim()).filter(Boolean)) {
    const at = part.indexOf(':');
    if (at < 0) tags[part] = '';
    else tags[part.slice(0, at).trim()] = part.slice(at + 1).trim();
  }
  return tags;
}
