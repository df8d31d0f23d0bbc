// Runs of one workflow: status filter (queued included), paging, and starting a run
// with a JSON payload editor (execute scope).

import { get, post, session } from '../api.js';
import { h, fill, link, time, badge, duration, pageTitle, errorText, toast } from '../dom.js';
import { navigate } from '../app.js';

const STATUSES = ['', 'queued', 'running', 'succeeded', 'failed', 'cancelled'];

export async function render(main, params) {
  const id = params.workflowId;
  const status = STATUSES.includes(params.status) ? params.status : '';
  const wf = await get(`/workflows/${encodeURIComponent(id)}`);
  const filter = h('select', {
    id: 'status-filter',
    onchange: () => navigate(`/workflows/${id}/runs${filter.value ? `?status=${filter.value}` : ''}`),
  }, STATUSES.map((s) => h('option', { value: s, selected: s === status }, s || 'all statuses')));
  const list = h('div', {}, h('p.muted', {}, 'Loading…'));
  fill(main,
    pageTitle(`Runs of ${wf.name}`, h('div.row', {}, badge(wf.state), link(`/workflows/${id}`, 'Builder'))),
    session.can('execute') ? startForm(wf) : h('p.notice', {}, 'Starting runs needs the execute scope.'),
    h('div.toolbar', {}, h('label', { for: 'status-filter' }, 'Status'), filter),
    list);
  try {
    const page = await get(`/workflows/${encodeURIComponent(id)}/runs`, { status, cursor: params.cursor, limit: 20 });
    if (!page.data.length) return void fill(list, h('p.empty', {}, status ? `No ${status} runs.` : 'No runs yet.'));
    const query = new URLSearchParams();
    if (status) query.set('status', status);
    const first = `/workflows/${id}/runs${query.toString() ? `?${query}` : ''}`;
    if (page.next_cursor) query.set('cursor', page.next_cursor);
    fill(list,
      h('table.list', { id: 'runs' },
        h('caption.sr-only', {}, 'Runs, newest first'),
        h('thead', {}, h('tr', {}, ['Run', 'Status', 'Started', 'Duration'].map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', {}, page.data.map((r) => h('tr', { dataset: { id: r.id } },
          h('td.mono', { 'data-label': 'Run' }, link(`/runs/${encodeURIComponent(r.id)}`, r.id)),
          h('td', { 'data-label': 'Status' }, badge(r.status)),
          h('td', { 'data-label': 'Started' }, time(r.started_at)),
          h('td', { 'data-label': 'Duration' }, duration(r.duration_ms)))))),
      h('nav.pager', { 'aria-label': 'Pages' },
        params.cursor ? link(first, 'First page') : null,
        page.next_cursor ? link(`/workflows/${id}/runs?${query}`, 'Next page') : null));
  } catch (e) {
    fill(list, h('p.error', { role: 'alert' }, errorText(e)));
  }
}

function startForm(wf) {
  const sample = sessionStorage.getItem(`flowline.sample.${wf.id}`);
  const editor = h('textarea.mono', { id: 'payload', rows: 5, spellcheck: 'false', 'aria-describedby': 'payload-status' });
  editor.value = sample && sample.trim() ? sample : '{}';
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
      button.disabled = true;
      try {
        const run = await post(`/workflows/${wf.id}/runs`, { payload });
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
  h('div.row', {}, button,
    h('button.secondary', { type: 'button', onclick: () => { try { editor.value = JSON.stringify(JSON.parse(editor.value), null, 2); } catch { check(); } } }, 'Format')));
}
