// The visual builder of one workflow (or a new one, maybe from a starter template):
// name, trigger (with a preview of a schedule's next fire times), settings, the graph of
// the steps beside their cards (above them on a narrow screen), undo and redo, save with
// the API's validation errors shown on their fields, activate / pause / delete, the YAML
// manifest (shown, or edited and applied whole) and the versions of a saved workflow
// (the kept ones, any two compared).

import { get, post, patch, del, session } from '../api.js';
import { h, fill, link, toast, badge, pageTitle, errorText, secretOnce, copy, download, time } from '../dom.js';
import { navigate, guardLeaving } from '../app.js';
import { nextTimes, describe } from '../cron.js';
import { manifest, toYaml, parseYaml, fromManifest } from '../yaml.js';
import { renderSteps, newStep, toApiSteps, DEFAULT_WITH } from './steps.js';
import { capabilities } from '../schema.js';
import { graphView, dependencies, waitsFor } from '../graph.js';
import { STARTERS } from '../starters.js';
import { diffLines, diffView, versionYaml } from '../diff.js';

const SAMPLE_KEY = (id) => `flowline.sample.${id || 'new'}`;
// From this width the graph sits beside the cards (console.css says the same), its
// layers top to bottom.
const WIDE = '(min-width: 1100px)';

export async function render(main, params) {
  const id = params.workflowId;
  const saved = id ? await get(`/workflows/${encodeURIComponent(id)}`) : null;
  const starter = !saved && STARTERS.find((t) => t.key === params.template);
  const model = modelOf(saved || (starter && structuredClone(starter.workflow)));
  const canWrite = session.can('write');
  const view = { model, saved, canWrite, accepts: await capabilities(), wide: matchMedia(WIDE) };
  // Undo and redo: snapshots of the draft, typing in one field kept as one step.
  view.history = { states: [snapshot(model)], at: 0, source: null, time: 0 };
  draw(main, view);
  if (view.accepts.actions.includes('workflow')) suggestWorkflows(id);
  // Ctrl+S (Cmd+S) saves, as in an editor; Ctrl+Z undoes, Ctrl+Shift+Z or Ctrl+Y
  // redoes (not in the YAML editor or the sample payload, which keep their own).
  const saveKey = (e) => {
    if (!(e.ctrlKey || e.metaKey)) return;
    const key = e.key.toLowerCase();
    const press = (id) => {
      e.preventDefault();
      const button = document.getElementById(id);
      if (button && !button.disabled) button.click();
    };
    if (key === 's') press('save');
    else if ((key === 'z' || key === 'y') && !e.target.closest?.('#yaml-panel, #sample-payload')) {
      press(key === 'y' || e.shiftKey ? 'redo' : 'undo');
    }
  };
  document.addEventListener('keydown', saveKey);
  // Across the width: the graph moves beside the cards or above them, redrawn to fit.
  const turn = () => view.redrawGraph?.();
  view.wide.addEventListener('change', turn);
  return () => {
    document.removeEventListener('keydown', saveKey);
    view.wide.removeEventListener('change', turn);
  };
}

/** The builder's model of a workflow view (or of a new one). */
function modelOf(wf) {
  const model = wf
    ? { ...wf, description: wf.description || '', steps: (wf.steps || []).map((s) => newStep({ ...s, with: s.with || {}, when: s.when || '' })) }
    : { name: '', description: '', state: 'draft', trigger: { type: 'manual' }, executor: null, timeout_ms: null, cancel_on: [], steps: [] };
  model.cancel_on = (model.cancel_on || []).map((c) => ({ event: c.event, match: c.match || '' }));
  return model;
}

/** An API error's field as words: `steps[2].with.url` → step 3 (fetch), with.url. */
function inWords(field, steps) {
  const m = field.match(/^steps\[(\d+)\](?:\.(.+))?$/);
  if (!m) return field.replace(/_/g, ' ');
  const step = steps[Number(m[1])];
  return `step ${Number(m[1]) + 1}${step?.id ? ` (${step.id})` : ''}${m[2] ? `, ${m[2].replace(/_/g, ' ')}` : ''}`;
}

/** The draft's editable state, as undo keeps it. */
function snapshot(model) {
  const { name, description, trigger, executor, timeout_ms: timeout, priority, cancel_on: cancelOn, steps } = model;
  return JSON.stringify({ name, description, trigger, executor, timeout_ms: timeout, priority, cancel_on: cancelOn, steps });
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
  const announcer = h('p.sr-only', { id: 'builder-announcer', 'aria-live': 'polite' });
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

  // Steps, and the graph they form
  const stepList = h('ol.steps', { id: 'steps', 'aria-label': 'Steps' });
  const stepsHelp = h('p.help', { id: 'steps-help' });
  // A region of its own: beside the cards on a wide screen, where it stays in view.
  const graphBox = h('section.graph', { id: 'builder-graph', 'aria-label': 'Graph of the steps' });
  const select = (i) => {
    const card = stepList.children[i];
    if (!card) return;
    stepList.querySelectorAll('.selected').forEach((c) => c.classList.remove('selected'));
    card.classList.add('selected');
    card.scrollIntoView({ block: 'center' });
    (card.querySelector('input:not([disabled])') || card.querySelector('.step-title'))?.focus({ preventScroll: true });
  };
  const connect = (i, j) => {
    const from = model.steps[i];
    const to = model.steps[j];
    const needs = to.needs || [];
    if (!from.id) {
      announcer.textContent = 'Give that step an id first';
    } else if (needs.includes(from.id)) {
      to.needs = needs.filter((n) => n !== from.id);
      if (!to.needs.length) to.needs = null;
      announcer.textContent = `${to.id} no longer needs ${from.id}`;
    } else if (waitsFor(model.steps, i, j)) {
      toast(`Not connected: ${from.id} already waits for ${to.id}, so this would be a cycle`);
    } else {
      const was = dependencies(model.steps).graph;
      to.needs = [...needs, from.id];
      announcer.textContent = `${to.id} now needs ${from.id}${was ? '' : '. The steps form a graph: steps without needs start at once'}`;
    }
    renderSteps(stepList, stepCtx);
    changed();
  };
  const graph = graphView(graphBox, {
    label: 'Graph of the steps', onSelect: select, onConnect: canWrite ? connect : null,
    announce: (text) => { announcer.textContent = text; },
    vertical: () => view.wide.matches,
  });
  view.redrawGraph = () => graph.update(model.steps);
  // The node of the card being edited is marked in the graph.
  stepList.addEventListener('focusin', (e) => {
    const card = e.target.closest('.step-card');
    if (card) graph.mark([...stepList.children].indexOf(card));
  });
  const drawGraph = () => {
    graph.update(model.steps);
    stepsHelp.textContent = dependencies(model.steps).graph
      ? 'The steps form a graph: a step starts once every step it needs has succeeded or been skipped, steps without needs start at once, and steps whose needs are met run in parallel. The order of the cards changes none of that.'
      : 'Steps run in order, one after the other, until a step sets needs (then they form a graph). Drag a card by its handle, or focus the handle and press Arrow Up / Arrow Down.';
    stepList.querySelectorAll('.step-card').forEach((c) => { if (c.drawDeps && !c.querySelector('.deps')?.contains(document.activeElement)) c.drawDeps(); });
  };
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
  const changed = () => {
    if (!yamlPanel.hidden) yamlText.textContent = yaml();
    drawGraph();
    record();
  };
  const record = () => {
    const hist = view.history;
    const state = snapshot(model);
    if (state === hist.states[hist.at]) return;
    const source = document.activeElement?.id || null;
    const now = Date.now();
    if (hist.at > 0 && hist.at === hist.states.length - 1 && source && source === hist.source && now - hist.time < 1500) {
      hist.states[hist.at] = state;
    } else {
      hist.states.splice(hist.at + 1);
      hist.states.push(state);
      if (hist.states.length > 200) hist.states.shift();
      hist.at = hist.states.length - 1;
    }
    hist.source = source;
    hist.time = now;
    drawUndo();
  };
  const travel = (by) => {
    const hist = view.history;
    const to = hist.at + by;
    if (to < 0 || to >= hist.states.length) return;
    const focused = document.activeElement?.id;
    hist.at = to;
    hist.source = null;
    Object.assign(model, JSON.parse(hist.states[to]));
    draw(main, view);
    const back = (focused && document.getElementById(focused)) || document.getElementById(by < 0 ? 'undo' : 'redo');
    (back && !back.disabled ? back : document.getElementById('save'))?.focus();
    main.querySelector('#builder-announcer').textContent = by < 0 ? 'Undone' : 'Redone';
  };
  const undoButton = h('button.secondary', { type: 'button', id: 'undo', 'aria-keyshortcuts': 'Control+Z', title: 'Undo (Ctrl+Z)', onclick: () => travel(-1) }, 'Undo');
  const redoButton = h('button.secondary', { type: 'button', id: 'redo', 'aria-keyshortcuts': 'Control+Shift+Z Control+Y', title: 'Redo (Ctrl+Shift+Z or Ctrl+Y)', onclick: () => travel(1) }, 'Redo');
  const drawUndo = () => {
    undoButton.disabled = view.history.at === 0;
    redoButton.disabled = view.history.at >= view.history.states.length - 1;
  };

  // The tab panel wraps the form (a form may not take the tabpanel role).
  const builderForm = h('form.builder', {
    id: 'builder', onsubmit: (e) => { e.preventDefault(); save(); }, novalidate: true,
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
    stepsHelp,
    // The graph comes first (also for the keyboard): it is the map of the cards.
    h('div.steps-layout', {},
      graphBox,
      h('div.steps-cards', {},
        stepList,
        canWrite ? h('div.row', {}, newAction, h('button.secondary', { type: 'button', id: 'add-step', onclick: addStep }, 'Add step')) : null))),
  canWrite ? h('div.row.sticky', {}, h('button.primary', { type: 'submit', id: 'save' }, id ? 'Save changes' : 'Create workflow'), undoButton, redoButton) : null);
  const builderPanel = h('div', { id: 'builder-panel', role: 'tabpanel', 'aria-labelledby': 'tab-builder' }, builderForm);

  // Editing a manifest: pasted, imported from a file, or the builder's own; the server
  // judges it whole (a refused one changes nothing).
  const importText = h('textarea.mono', { id: 'yaml-import', rows: 14, spellcheck: 'false', 'aria-describedby': 'yaml-import-help yaml-error' });
  const yamlError = h('div.error', { id: 'yaml-error', role: 'alert', tabindex: '-1' });
  const importFile = h('input', {
    type: 'file', id: 'yaml-file', accept: '.yaml,.yml,.json,application/yaml,text/yaml',
    onchange: async () => { if (importFile.files[0]) importText.value = await importFile.files[0].text(); },
  });
  const applyYaml = async (button) => {
    fill(yamlError);
    importText.removeAttribute('aria-invalid');
    let body;
    try {
      body = fromManifest(parseYaml(importText.value));
    } catch (e) {
      importText.setAttribute('aria-invalid', 'true');
      fill(yamlError, h('p', {}, `Not a manifest the console can read: ${e.message}.`));
      importText.focus();
      return;
    }
    // As kubectl apply replaces the spec: what the manifest leaves out is removed.
    for (const k of ['description', 'executor', 'timeout_ms', 'concurrency', 'rate_limit', 'debounce', 'parallelism', 'priority', 'output', 'cancel_on']) {
      if (!(k in body)) body[k] = null;
    }
    if (guardQuestion() && !confirm('Applying the manifest replaces the changes not saved in the builder. Go on?')) return;
    button.disabled = true;
    let created = null;
    try {
      if (!id) created = await post('/workflows', { name: body.name, description: body.description, trigger: body.trigger });
      let updated;
      try {
        updated = await patch(`/workflows/${encodeURIComponent(id || created.id)}`, body);
      } catch (e) {
        // A new workflow the server refused goes again: nothing is left half made.
        if (created) await del(`/workflows/${encodeURIComponent(created.id)}`).catch(() => {});
        throw e;
      }
      toast(id ? 'Manifest applied' : 'Workflow created from the manifest');
      adopt(updated, created?.hook_secret || updated.hook_secret, modelOf(updated));
    } catch (e) {
      button.disabled = false;
      const steps = Array.isArray(body.steps) ? body.steps : [];
      fill(yamlError, h('p', {}, e.details?.length
        ? `The server refused the manifest (nothing was changed): ${e.details.length} problem${e.details.length > 1 ? 's' : ''}.`
        : `The server refused the manifest (nothing was changed): ${errorText(e)}`),
      e.details?.length ? h('ul', {}, e.details.map((d) => h('li', {}, `${inWords(d.field, steps)}: ${d.message}`))) : null);
      yamlError.focus();
    }
  };
  const yamlPanel = h('section', { id: 'yaml-panel', hidden: true, role: 'tabpanel', 'aria-labelledby': 'tab-yaml' },
    h('p.help', {}, 'The same workflow as a Kubernetes manifest: ', h('code', {}, 'kubectl apply -f'), ' it, or commit it for GitOps. It reflects the builder, saved or not.'),
    h('div.row', {},
      h('button.secondary', { type: 'button', id: 'copy-yaml', onclick: () => copy(yaml()) }, 'Copy'),
      h('button.secondary', { type: 'button', id: 'download-yaml', onclick: () => download(`${id || 'workflow'}.yaml`, yaml()) }, 'Download')),
    yamlText,
    canWrite ? h('section.card', { 'aria-labelledby': 'yaml-import-title' },
      h('h2', { id: 'yaml-import-title' }, id ? 'Edit or import a manifest' : 'Create from a manifest'),
      h('p.help', { id: 'yaml-import-help' }, 'Paste a Workflow manifest, import a file, or start from the one above; "Check and apply" sends it to the server, which checks it whole: when it refuses, nothing changes and its reasons show here. ',
        'What the manifest leaves out (a timeout, an output…) is removed; its metadata is not read (it applies to this workflow).'),
      h('div.row', {},
        h('button.secondary', { type: 'button', id: 'yaml-edit', onclick: () => { importText.value = yaml(); importText.focus(); } }, 'Edit the manifest above'),
        h('label', { for: 'yaml-file' }, 'Import a file'), importFile),
      h('label', { for: 'yaml-import' }, 'Manifest (YAML)'),
      importText,
      yamlError,
      h('div.row', {}, h('button.primary', { type: 'button', id: 'yaml-apply', onclick: (e) => applyYaml(e.currentTarget) }, id ? 'Check and apply' : 'Check and create'))) : null);

  // A saved workflow's versions: loaded each time their tab opens.
  const versionsPanel = id ? h('section', { id: 'versions-panel', hidden: true, role: 'tabpanel', 'aria-labelledby': 'tab-versions' },
    h('p.help', {}, 'The versions this server keeps: the workflow now, and each earlier version that a kept run executed. '
      + 'Choose two to see what changed between them.'),
    h('div', { id: 'versions' })) : null;
  const panels = [['builder', 'Builder', builderPanel], ['yaml', 'YAML', yamlPanel], ['versions', 'Versions', versionsPanel]]
    .filter(([, , panel]) => panel);
  const show = (name) => {
    for (const [n, , panel] of panels) {
      panel.hidden = n !== name;
      document.getElementById(`tab-${n}`).setAttribute('aria-selected', String(n === name));
    }
    if (name === 'versions') drawVersions(document.getElementById('versions'), id);
    else changed();
  };
  const tabs = panels.map(([name, label, panel], i) => h('button', {
    type: 'button', role: 'tab', id: `tab-${name}`, 'aria-selected': String(name === 'builder'), 'aria-controls': panel.id,
    onclick: () => show(name),
    // Arrow Left / Arrow Right go to the previous or next tab, as in a tab list.
    onkeydown: (e) => {
      const by = { ArrowLeft: -1, ArrowRight: 1 }[e.key];
      if (!by) return;
      e.preventDefault();
      const next = tabs[(i + by + tabs.length) % tabs.length];
      next.focus();
      next.click();
    },
  }, label));

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
    h('div.tabs', { role: 'tablist', 'aria-label': 'Views of the workflow' }, tabs),
    builderPanel,
    yamlPanel,
    versionsPanel,
    announcer);
  drawTrigger();
  drawCancelOn();
  renderSteps(stepList, stepCtx);
  drawGraph();
  drawUndo();
  // Leaving with edits not saved asks first (links, back, reload, closing the tab).
  if (view.baseline === undefined) view.baseline = JSON.stringify(request());
  const baseline = view.baseline;
  const guardQuestion = () => (canWrite && JSON.stringify(request()) !== baseline
    ? 'This workflow has changes that are not saved. Leave and lose them?' : null);
  guardLeaving(guardQuestion);

  /** The server's answer after a save: the page shows it (with a secret shown once). */
  function adopt(updated, secret, next) {
    if (!id) history.replaceState(null, '', `/workflows/${updated.id}`);
    view.saved = updated;
    Object.assign(model, next || { ...updated, steps: model.steps });
    model.cancel_on = (model.cancel_on || []).map((c) => ({ event: c.event, match: c.match || '' }));
    view.baseline = undefined;
    draw(main, view);
    if (secret) {
      view.once = secretOnce('Inbound hook secret', secret, 'Sign requests to the hook URL with it. Shown only this once.');
      fill(document.getElementById('once'), view.once);
    }
    main.querySelector('h1').focus();
  }

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
      toast(id ? 'Saved' : 'Workflow created');
      // Its own address once it is saved whole.
      adopt(updated, secret || updated.hook_secret);
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
          showErrors(main, document.getElementById('form-error'), e, model.steps);
          return;
        }
      }
      showErrors(main, formError, e, model.steps);
    }
  }
}

/**
 * The versions of a workflow (GET /v1/workflows/{id}/versions, newest first): each
 * with the kept runs that executed it and a link to the last one, and a diff of the
 * YAML of any two. A server without the endpoint answers 404: said in a line.
 */
async function drawVersions(box, id) {
  fill(box, h('p.muted', {}, 'Loading…'));
  let answer;
  try {
    answer = await get(`/workflows/${encodeURIComponent(id)}/versions`);
  } catch (e) {
    fill(box, e.status === 404 && e.code !== 'workflow_not_found'
      ? h('p.notice', { id: 'versions-unavailable' }, 'Version history is not available on this server.')
      : h('p.error', { role: 'alert' }, errorText(e)));
    return;
  }
  const versions = answer.data || [];
  const name = (v) => `version ${v.generation}${v.current ? ' (current)' : ''}`;
  const rows = versions.map((v) => h('tr', { dataset: { generation: String(v.generation) } },
    h('td', { 'data-label': 'Version' }, String(v.generation), v.current ? [' ', h('span.badge.s-active', {}, 'current')] : null),
    h('td', { 'data-label': 'Name' }, v.version?.name || ''),
    h('td', { 'data-label': 'Kept runs' }, String(v.runs)),
    h('td', { 'data-label': 'Last run' }, v.last_run_id ? [link(`/runs/${encodeURIComponent(v.last_run_id)}`, v.last_run_id), ' ', time(v.last_run_at)] : h('span.muted', {}, 'none kept'))));
  const picker = (which, label, at) => {
    const select = h('select', { id: `versions-${which}`, onchange: () => compare() },
      versions.map((v, i) => h('option', { value: String(v.generation), selected: i === at }, name(v))));
    return [h('label', { for: select.id }, label), select];
  };
  const diff = h('div', { id: 'versions-diff' });
  const compare = () => {
    const pick = (which) => versions.find((v) => String(v.generation) === document.getElementById(`versions-${which}`).value);
    const from = pick('from');
    const to = pick('to');
    // A version whose run went meanwhile (or that predates pinned versions) has no content.
    const gone = [from, to].find((v) => !v.version);
    fill(diff, from === to
      ? h('p', { id: 'diff-summary' }, 'The same version on both sides: choose two different ones.')
      : gone ? h('p', { id: 'diff-summary' }, `The content of version ${gone.generation} could not be read (its run is gone): choose another.`)
        : diffView(diffLines(versionYaml(from.version, id), versionYaml(to.version, id)), `version ${from.generation}`, `version ${to.generation}`));
  };
  fill(box,
    h('table.list', { id: 'versions-list' },
      h('caption.sr-only', {}, 'Versions of the workflow, newest first'),
      h('thead', {}, h('tr', {}, ['Version', 'Name', 'Kept runs', 'Last run'].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, rows)),
    answer.truncated ? h('p.help', { id: 'versions-truncated' }, 'Only the newest versions are listed.') : null,
    versions.length > 1
      ? h('section.card', { 'aria-labelledby': 'versions-compare-title' },
        h('h2', { id: 'versions-compare-title' }, 'Compare two versions'),
        h('div.row', {}, picker('from', 'From', 1), picker('to', 'to', 0)),
        diff)
      : h('p.muted', {}, 'Only one version is kept: there is nothing to compare yet.'));
  if (versions.length > 1) compare();
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

function showErrors(root, box, e, steps) {
  const unplaced = [];
  let first = null;
  for (const d of e.details || []) {
    const el = fieldElement(root, d.field);
    if (!el) { unplaced.push(`${inWords(d.field, steps)}: ${d.message}`); continue; }
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
