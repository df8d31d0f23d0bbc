// The visual builder of one workflow (or a new one): name, trigger (with a preview of
// a schedule's next fire times), settings, step cards, save with the API's validation
// errors shown on their fields, activate / pause / delete, and the YAML manifest.

import { get, post, patch, del, session } from '../api.js';
import { h, fill, link, toast, badge, pageTitle, errorText, secretOnce, copy, download } from '../dom.js';
import { navigate, guardLeaving } from '../app.js';
import { nextTimes, describe } from '../cron.js';
import { manifest, toYaml } from '../yaml.js';
import { renderSteps, newStep, toApiSteps, DEFAULT_WITH } from './steps.js';
import { capabilities } from '../schema.js';

const SAMPLE_KEY = (id) => `flowline.sample.${id || 'new'}`;

export async function render(main, params) {
  const id = params.workflowId;
  const saved = id ? await get(`/workflows/${encodeURIComponent(id)}`) : null;
  const model = saved
    ? { ...saved, steps: saved.steps.map((s) => newStep({ ...s, with: s.with || {}, when: s.when || '' })) }
    : { name: '', description: '', state: 'draft', trigger: { type: 'manual' }, executor: null, timeout_ms: null, cancel_on: [], steps: [] };
  model.cancel_on = (model.cancel_on || []).map((c) => ({ event: c.event, match: c.match || '' }));
  const canWrite = session.can('write');
  const view = { model, saved, canWrite, accepts: await capabilities() };
  draw(main, view);
  if (view.accepts.actions.includes('workflow')) suggestWorkflows(id);
  // Ctrl+S (Cmd+S) saves, as in an editor.
  const saveKey = (e) => {
    if ((e.ctrlKey || e.metaKey) && e.key.toLowerCase() === 's') {
      e.preventDefault();
      const button = document.getElementById('save');
      if (button && !button.disabled) button.click();
    }
  };
  document.addEventListener('keydown', saveKey);
  return () => document.removeEventListener('keydown', saveKey);
}

/** The account's other workflows, suggested by a `workflow` step's id field. */
async function suggestWorkflows(self) {
  let page = { data: [] };
  try { page = await get('/workflows?limit=100'); } catch { /* suggestions only */ }
  document.getElementById('workflow-ids')?.remove();
  document.body.append(h('datalist', { id: 'workflow-ids' },
    page.data.filter((w) => w.id !== self).map((w) => h('option', { value: w.id }, w.name))));
}

function draw(main, view) {
  const { model, canWrite, accepts } = view;
  const id = view.saved?.id;
  const announcer = h('p.sr-only', { 'aria-live': 'polite' });
  const formError = h('div.error', { id: 'form-error', role: 'alert', tabindex: '-1' });
  // A secret shown once stays while the page is redrawn (saving, activating): it is
  // gone only when the user leaves the page.
  const once = h('div', { id: 'once' }, view.once || null);

  const input = (name, label, value, onInput, attrs = {}) => {
    const el = h(attrs.rows ? 'textarea' : 'input', { id: `wf-${name.replace(/\W/g, '-')}`, 'data-field': name, oninput: (e) => { onInput(e.target.value); changed(); }, ...attrs });
    el.value = value ?? '';
    return h('div.field', {}, h('label', { for: el.id }, label), el);
  };

  // Trigger
  const preview = h('div.preview', { id: 'schedule-preview', 'aria-live': 'polite' });
  const triggerExtra = h('div');
  const drawTrigger = () => {
    const t = model.trigger;
    if (t.type === 'schedule') {
      fill(triggerExtra,
        h('div.grid', {},
          input('trigger.cron', 'Cron expression (minute hour day month weekday)', t.cron, (v) => { t.cron = v; drawPreview(); }, { placeholder: '*/5 * * * *', spellcheck: 'false', class: 'mono' }),
          input('trigger.timezone', 'Timezone (IANA)', t.timezone || 'UTC', (v) => { t.timezone = v; drawPreview(); }, { list: 'timezones', spellcheck: 'false' })),
        h('datalist', { id: 'timezones' }, (Intl.supportedValuesOf ? Intl.supportedValuesOf('timeZone') : ['UTC']).map((z) => h('option', { value: z }))),
        preview,
        h('div.grid', {},
          h('div.field', {}, h('label', { for: 'trigger-overlap' }, 'While an earlier run is unfinished'),
            h('select', { id: 'trigger-overlap', 'data-field': 'trigger.overlap', onchange: (e) => { t.overlap = e.target.value; changed(); } },
              [['allow', 'start anyway'], ['skip', 'skip the tick'], ['queue', 'queue the run until it ends'], ['cancel_previous', 'cancel it and start']]
                .map(([v, l]) => h('option', { value: v, selected: (t.overlap || 'allow') === v }, l)))),
          input('trigger.catchup_window_ms', 'Catch-up window after downtime (ms, 0: the latest missed tick only)', t.catchup_window_ms ?? 0,
            (v) => { t.catchup_window_ms = /^\d+$/.test(v.trim()) ? Number(v) : v.trim(); }, { inputmode: 'numeric' })),
        id && session.can('execute') ? backfillForm(id) : null);
      drawPreview();
    } else if (t.type === 'webhook') {
      const url = id ? `${location.origin}/v1/hooks/${id}` : 'saved workflows get a hook URL';
      fill(triggerExtra,
        h('p', {}, 'Runs start when a signed request reaches ', h('code', { id: 'hook-url' }, url),
          ' (Standard Webhooks signature with the workflow\'s inbound secret, shown once when the trigger is saved). The workflow must be active.'),
        id && canWrite ? h('button.secondary', { type: 'button', onclick: rotateHookSecret }, 'Rotate inbound secret') : null);
    } else if (t.type === 'event') {
      fill(triggerExtra,
        h('div.grid', {},
          input('trigger.event', 'Event name', t.event, (v) => { t.event = v; }, { placeholder: 'order.created', spellcheck: 'false', class: 'mono' }),
          input('trigger.filter', 'Filter (optional, over event.payload, event.name, event.id)', t.filter, (v) => { t.filter = v || null; }, { placeholder: 'event.payload.total > 100', spellcheck: 'false', class: 'mono' })),
        h('p.muted', {}, 'Runs start on each event of this name posted to POST /v1/events whose filter holds, while the workflow is active.'));
    } else {
      fill(triggerExtra, h('p.muted', {}, 'Runs start only when someone starts one (console, API or CLI).'));
    }
  };
  const drawPreview = () => {
    const t = model.trigger;
    const zone = t.timezone || 'UTC';
    if (!t.cron) { fill(preview, h('p.muted', {}, 'Type a cron expression to see when it fires.')); return; }
    try {
      const times = nextTimes(t.cron, zone, 5);
      fill(preview,
        h('p', {}, describe(t.cron) || 'Fires at these times', ` (${zone}). Next:`),
        h('ol.times', {}, times.map((s) => h('li', {}, s))));
    } catch (e) {
      fill(preview, h('p.error', {}, `Not a schedule yet: ${e.message}`));
    }
  };
  const rotateHookSecret = async () => {
    try {
      const r = await post(`/workflows/${id}/hook-secret/rotate`, {});
      view.once = secretOnce('Inbound hook secret', r.hook_secret, 'Shown only this once; the previous secret stopped verifying.');
      fill(once, view.once);
    } catch (e) { toast(errorText(e), 'error'); }
  };
  const triggerType = h('select', {
    id: 'wf-trigger-type', 'data-field': 'trigger.type',
    onchange: (e) => {
      model.trigger = { type: e.target.value };
      if (e.target.value === 'schedule') model.trigger = { type: 'schedule', cron: '0 9 * * 1-5', timezone: 'UTC' };
      drawTrigger(); changed();
    },
  }, accepts.triggers.map((t) => h('option', { value: t, selected: model.trigger.type === t }, t)));

  // Cancel on events: rows of an event name and an optional match.
  const cancelRows = h('div', { id: 'cancel-on', 'data-field': 'cancel_on' });
  const drawCancelOn = () => {
    fill(cancelRows, model.cancel_on.map((entry, i) => h('div.grid.cancel-on-row', {},
      input(`cancel_on[${i}].event`, `Event name (entry ${i + 1})`, entry.event, (v) => { entry.event = v; }, { placeholder: 'order.cancelled', spellcheck: 'false', class: 'mono' }),
      input(`cancel_on[${i}].match`, `Match (optional, over event.* and trigger.*)`, entry.match, (v) => { entry.match = v; }, { placeholder: 'event.payload.order == trigger.payload.order', spellcheck: 'false', class: 'mono' }),
      canWrite ? h('button.secondary', { type: 'button', id: `cancel-on-remove-${i}`, onclick: () => { model.cancel_on.splice(i, 1); drawCancelOn(); changed(); } }, `Remove entry ${i + 1}`) : null)),
    canWrite && model.cancel_on.length < 10
      ? h('button.secondary', { type: 'button', id: 'cancel-on-add', onclick: () => { model.cancel_on.push({ event: '', match: '' }); drawCancelOn(); changed(); cancelRows.querySelector('.cancel-on-row:last-of-type input')?.focus(); } }, 'Add a cancelling event')
      : null);
  };
  const cancelOn = () => (model.cancel_on.length
    ? model.cancel_on.map((c) => ({ event: c.event, ...(c.match.trim() ? { match: c.match } : {}) }))
    : null);

  // Sample payload for the template helpers
  const sampleInput = h('textarea.mono', { id: 'sample-payload', rows: 3, placeholder: '{"order_id": "A-1", "customer": {"email": "a@example.com"}}' });
  sampleInput.value = sessionStorage.getItem(SAMPLE_KEY(id)) || '';
  const sample = () => {
    sessionStorage.setItem(SAMPLE_KEY(id), sampleInput.value);
    try { return JSON.parse(sampleInput.value || 'null'); } catch { return null; }
  };

  // Steps
  const stepList = h('ol.steps', { id: 'steps', 'aria-label': 'Steps, in order' });
  const stepCtx = {
    steps: model.steps, sample, disabled: !canWrite, changed: () => changed(),
    announce: (text) => { announcer.textContent = text; },
    actions: accepts.actions, stepFields: accepts.stepFields,
  };
  const newAction = h('select', { id: 'new-step-action', 'aria-label': 'Action of the new step' },
    accepts.actions.map((a) => h('option', { value: a }, a)));
  const addStep = () => {
    const action = newAction.value;
    const taken = new Set(model.steps.map((s) => s.id));
    let n = model.steps.length + 1;
    while (taken.has(`step-${n}`)) n += 1;
    model.steps.push(newStep({ id: `step-${n}`, action, with: structuredClone(DEFAULT_WITH[action] || {}) }));
    renderSteps(stepList, stepCtx);
    changed();
    const added = stepList.lastElementChild.querySelector('input');
    added?.focus();
    announcer.textContent = `Step ${n} added`;
  };

  // YAML view
  const yamlText = h('pre.yaml', { id: 'yaml', tabindex: '0' });
  const request = () => ({
    name: model.name, description: model.description || null, trigger: model.trigger,
    executor: model.executor || null, timeout_ms: model.timeout_ms || null, priority: model.priority || null,
    cancel_on: cancelOn(), steps: toApiSteps(model.steps),
  });
  const yaml = () => toYaml(manifest({ ...view.saved, ...request(), id: id || 'wf-new', concurrency: view.saved?.concurrency,
    rate_limit: view.saved?.rate_limit, debounce: view.saved?.debounce }));
  const changed = () => { if (!yamlPanel.hidden) yamlText.textContent = yaml(); };

  const builderPanel = h('form.builder', {
    id: 'builder', role: 'tabpanel', 'aria-labelledby': 'tab-builder', onsubmit: (e) => { e.preventDefault(); save(); }, novalidate: true,
  },
  h('fieldset', { disabled: !canWrite },
    h('legend', {}, 'Workflow'),
    h('div.grid', {},
      input('name', 'Name', model.name, (v) => { model.name = v; }, { required: true }),
      input('description', 'Description', model.description, (v) => { model.description = v; }))),
  h('fieldset', { disabled: !canWrite },
    h('legend', {}, 'Trigger'),
    h('div.field', {}, h('label', { for: 'wf-trigger-type' }, 'Starts on'), triggerType),
    triggerExtra),
  h('fieldset', {},
    h('legend', {}, 'Sample trigger payload'),
    h('label', { for: 'sample-payload' }, 'JSON the trigger might carry: its paths are offered when you insert values into step fields (kept in this tab only)'),
    sampleInput),
  h('fieldset', { disabled: !canWrite },
    h('legend', {}, 'Settings'),
    h('div.grid', {},
      h('div.field', {}, h('label', { for: 'wf-executor' }, 'Executor'),
        h('select', { id: 'wf-executor', 'data-field': 'executor', onchange: (e) => { model.executor = e.target.value || null; changed(); } },
          [['', 'operator default'], ['inline', 'inline (inside the operator)'], ['job', 'job (a Kubernetes Job per attempt)']]
            .map(([v, l]) => h('option', { value: v, selected: (model.executor || '') === v }, l)))),
      input('timeout_ms', 'Run timeout (ms, empty: none)', model.timeout_ms, (v) => { model.timeout_ms = /^\d+$/.test(v.trim()) ? Number(v) : (v.trim() || null); }, { inputmode: 'numeric' }),
      h('div.field', {}, h('label', { for: 'wf-priority' }, 'Priority of its runs (1 first … 5 last)'),
        h('select', { id: 'wf-priority', 'data-field': 'priority', onchange: (e) => { model.priority = e.target.value ? Number(e.target.value) : null; changed(); } },
          [['', 'default (3)'], ['1', '1'], ['2', '2'], ['3', '3'], ['4', '4'], ['5', '5']]
            .map(([v, l]) => h('option', { value: v, selected: String(model.priority || '') === v }, l)))))),
  h('fieldset', { disabled: !canWrite },
    h('legend', {}, 'Cancel on events'),
    h('p.help', {}, 'An event of one of these names posted to POST /v1/events cancels the unfinished runs of this workflow for which its match holds (no match: all of them).'),
    cancelRows),
  h('section.steps-section', { 'aria-labelledby': 'steps-title' },
    h('h2', { id: 'steps-title' }, 'Steps'),
    h('p.help', {}, 'Steps run in order. Drag a card by its handle, or focus the handle and press Arrow Up / Arrow Down.'),
    stepList,
    canWrite ? h('div.row', {}, newAction, h('button.secondary', { type: 'button', id: 'add-step', onclick: addStep }, 'Add step')) : null),
  canWrite ? h('div.row.sticky', {}, h('button.primary', { type: 'submit', id: 'save' }, id ? 'Save changes' : 'Create workflow')) : null);

  const yamlPanel = h('section', { id: 'yaml-panel', hidden: true, role: 'tabpanel', 'aria-labelledby': 'tab-yaml' },
    h('p.help', {}, 'The same workflow as a Kubernetes manifest: ', h('code', {}, 'kubectl apply -f'), ' it, or commit it for GitOps. It reflects the builder, saved or not.'),
    h('div.row', {},
      h('button.secondary', { type: 'button', id: 'copy-yaml', onclick: () => copy(yaml()) }, 'Copy'),
      h('button.secondary', { type: 'button', id: 'download-yaml', onclick: () => download(`${id || 'workflow'}.yaml`, yaml()) }, 'Download')),
    yamlText);

  const tab = (name, label, panel, other, otherTab) => h('button', {
    type: 'button', role: 'tab', id: `tab-${name}`, 'aria-selected': name === 'builder' ? 'true' : 'false',
    'aria-controls': name === 'builder' ? 'builder' : 'yaml-panel',
    onclick: (e) => {
      panel().hidden = false; other().hidden = true;
      e.target.setAttribute('aria-selected', 'true');
      document.getElementById(`tab-${otherTab}`).setAttribute('aria-selected', 'false');
      changed();
    },
  }, label);

  // Header: state and lifecycle
  const header = [];
  if (id) {
    header.push(badge(model.state));
    header.push(link(`/workflows/${id}/runs`, 'Runs'));
  }
  const lifecycle = h('div.lifecycle', { id: 'lifecycle' });
  if (id && canWrite) drawLifecycle(lifecycle, view, main);

  fill(main,
    pageTitle(id ? model.name : 'New workflow', h('div.row', {}, header)),
    id ? h('p.mono.muted', {}, id) : null,
    lifecycle,
    canWrite ? null : h('p.notice', { id: 'read-only' }, 'This key can read only: editing, activating and deleting need the write scope.'),
    once,
    formError,
    h('div.tabs', { role: 'tablist' },
      tab('builder', 'Builder', () => builderPanel, () => yamlPanel, 'yaml'),
      tab('yaml', 'YAML', () => yamlPanel, () => builderPanel, 'builder')),
    builderPanel,
    yamlPanel,
    announcer);
  drawTrigger();
  drawCancelOn();
  renderSteps(stepList, stepCtx);
  // Leaving with edits not saved asks first (links, back, reload, closing the tab).
  const baseline = JSON.stringify(request());
  guardLeaving(() => (canWrite && JSON.stringify(request()) !== baseline
    ? 'This workflow has changes that are not saved. Leave and lose them?' : null));

  async function save() {
    clearErrors(main);
    formError.textContent = '';
    const button = document.getElementById('save');
    button.disabled = true;
    try {
      let current = id;
      let secret = null;
      if (!current) {
        const created = await post('/workflows', { name: model.name, description: model.description || null, trigger: model.trigger });
        current = created.id;
        secret = created.hook_secret;
        sessionStorage.setItem(SAMPLE_KEY(current), sampleInput.value);
        view.saved = created;
      }
      const updated = await patch(`/workflows/${current}`, request());
      // Its own address once it is saved whole.
      if (!id) history.replaceState(null, '', `/workflows/${current}`);
      secret = secret || updated.hook_secret;
      view.saved = updated;
      Object.assign(model, { ...updated, steps: model.steps });
      toast(id ? 'Saved' : 'Workflow created');
      draw(main, view);
      if (secret) {
        view.once = secretOnce('Inbound hook secret', secret, 'Sign requests to the hook URL with it. Shown only this once.');
        fill(document.getElementById('once'), view.once);
      }
      main.querySelector('h1').focus();
    } catch (e) {
      button.disabled = false;
      if (view.saved && !id) {
        // Created, but the rest was refused: the new draft goes again (nothing is left
        // half-saved) and the form stays a new workflow, its errors on its fields.
        try {
          await del(`/workflows/${encodeURIComponent(view.saved.id)}`);
          view.saved = null;
        } catch {
          // Could not take the draft back: continue as an edit of it.
          history.replaceState(null, '', `/workflows/${view.saved.id}`);
          draw(main, view);
          showErrors(main, document.getElementById('form-error'), e);
          return;
        }
      }
      showErrors(main, formError, e);
    }
  }
}

function drawLifecycle(box, view, main) {
  const { model } = view;
  const id = view.saved.id;
  const setState = async (state) => {
    try {
      view.saved = await patch(`/workflows/${id}`, { state });
      model.state = view.saved.state;
      toast(`Workflow ${state === 'active' ? 'activated' : 'paused'}`);
      draw(main, view);
    } catch (e) { toast(errorText(e), 'error'); }
  };
  const remove = async () => {
    if (!confirm(`Delete "${model.name}" and all its run history? This cannot be undone.`)) return;
    try {
      await del(`/workflows/${id}`);
      toast('Workflow deleted');
      navigate('/workflows');
    } catch (e) { toast(errorText(e), 'error'); }
  };
  const active = model.state === 'active';
  fill(box,
    active
      ? h('button.secondary', { type: 'button', id: 'pause', onclick: () => setState('paused') }, 'Pause')
      : h('button.primary', { type: 'button', id: 'activate', onclick: () => setState('active') }, 'Activate'),
    h('button.danger', { type: 'button', id: 'delete', disabled: active, 'aria-describedby': active ? 'delete-why' : null, onclick: remove }, 'Delete'),
    active ? h('p.help', { id: 'delete-why' },
      'An active workflow cannot be deleted: pause it first. Deleting removes its whole run history, so the API refuses it (409 workflow_active) while runs may still start.') : null,
    model.state === 'paused' ? h('p.help', {}, 'Paused: no schedule or hook starts runs, and manual runs are refused until it is activated again.') : null);
}

function clearErrors(root) {
  root.querySelectorAll('.field-error').forEach((e) => e.remove());
  root.querySelectorAll('[aria-invalid]').forEach((e) => e.removeAttribute('aria-invalid'));
}

/** The element a detail's field names: exact, else its nearest named parent. */
function fieldElement(root, field) {
  let name = field;
  while (name) {
    const el = root.querySelector(`[data-field="${CSS.escape(name)}"]`);
    if (el) return el;
    const cut = Math.max(name.lastIndexOf('.'), name.lastIndexOf('['));
    name = cut > 0 ? name.slice(0, cut) : '';
  }
  return null;
}

function showErrors(root, box, e) {
  const unplaced = [];
  let first = null;
  for (const d of e.details || []) {
    const el = fieldElement(root, d.field);
    if (!el) { unplaced.push(`${d.field}: ${d.message}`); continue; }
    // Under its own field the message says enough; on a parent field, the part of the
    // API's path below it says where.
    const placedOn = el.getAttribute('data-field') || '';
    const below = d.field.startsWith(placedOn) ? d.field.slice(placedOn.length).replace(/^\./, '') : d.field;
    const msg = h('p.field-error', { id: `err-${Math.random().toString(36).slice(2)}` }, below ? `${below}: ${d.message}` : d.message);
    if (el.matches('input, select, textarea')) {
      el.setAttribute('aria-invalid', 'true');
      el.setAttribute('aria-describedby', msg.id);
      el.after(msg);
    } else el.prepend(msg);
    first = first || el;
    el.closest('details')?.setAttribute('open', '');
  }
  fill(box, e.details?.length
    ? h('p', {}, `The API refused the workflow: ${e.details.length} problem${e.details.length > 1 ? 's' : ''}, shown on the fields.`)
    : h('p', {}, errorText(e)),
  unplaced.length ? h('ul', {}, unplaced.map((u) => h('li', {}, u))) : null);
  (first?.matches('input, select, textarea') ? first : first?.querySelector('input, select, textarea') || box)?.focus?.();
}

/** Runs for a saved schedule's past ticks between two times (POST …/backfill). */
function backfillForm(id) {
  const local = (d) => new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 16);
  const now = new Date();
  const from = h('input', { id: 'backfill-from', type: 'datetime-local', value: local(new Date(now.getTime() - 86400000)) });
  const to = h('input', { id: 'backfill-to', type: 'datetime-local', value: local(now) });
  const said = h('p.help', { id: 'backfill-status', 'aria-live': 'polite' });
  const button = h('button.secondary', {
    type: 'button', id: 'backfill',
    onclick: async () => {
      button.disabled = true;
      try {
        const answer = await post(`/workflows/${encodeURIComponent(id)}/backfill`, {
          from: new Date(from.value).toISOString(), to: new Date(to.value).toISOString(),
        });
        said.textContent = `${answer.runs} run${answer.runs === 1 ? '' : 's'} started (ticks that already had a run are left out).`;
        said.className = 'help';
      } catch (err) {
        said.textContent = errorText(err);
        said.className = 'help error';
      } finally {
        button.disabled = false;
      }
    },
  }, 'Backfill');
  return h('div.backfill', { role: 'group', 'aria-labelledby': 'backfill-title' },
    h('h3', { id: 'backfill-title' }, 'Backfill past ticks'),
    h('div.row', {},
      h('label', { for: 'backfill-from' }, 'From'), from,
      h('label', { for: 'backfill-to' }, 'To'), to, button),
    said);
}
