// Step cards of the builder: one card per step, in order, each with what it needs (a
// picker of the other steps), the form of its action (its typed fields with a preview
// of what the step receives once they hold a template), retry and timeout, `when`, and a
// list of the values its fields may reference. Reordered by dragging the handle (pointer events: mouse, pen
// and touch) or with Arrow Up / Arrow Down on the focused handle.

import { h, fill, scrollStop } from '../dom.js';
import { references, quoteAt, preview } from '../templates.js';
import { dependencies, waitsFor } from '../graph.js';

const METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS'];

/**
 * Inputs of each action. kinds: text (a string), int (a number, or a template),
 * json (JSON when it parses, else text), pairs ("key: value" lines → object),
 * lines (one item a line → array), statuses (comma-separated numbers → array).
 */
export const ACTIONS = {
  'http.request': [
    { key: 'method', label: 'Method', kind: 'select', options: METHODS },
    { key: 'url', label: 'URL', kind: 'text', placeholder: 'https://api.example.com/orders/{{ trigger.payload.id }}' },
    { key: 'headers', label: 'Headers (one "Name: value" a line)', kind: 'pairs' },
    { key: 'query', label: 'Query parameters (one "name: value" a line)', kind: 'pairs' },
    { key: 'body', label: 'Body (JSON, or text)', kind: 'json' },
    { key: 'expect_status', label: 'Expected statuses (comma-separated; empty: any 2xx)', kind: 'statuses' },
  ],
  transform: [
    { key: 'value', label: 'Value (JSON with templates; the step output)', kind: 'json', placeholder: '{"total": "{{ steps.fetch.output.body.total }}"}' },
  ],
  delay: [{ key: 'ms', label: 'Milliseconds', kind: 'int', placeholder: '1000' }],
  fail: [{ key: 'message', label: 'Message', kind: 'text' }],
  container: [
    { key: 'image', label: 'Image', kind: 'text', placeholder: 'registry.example.com/tool:1.0' },
    { key: 'command', label: 'Command (one item a line)', kind: 'lines' },
    { key: 'args', label: 'Arguments (one item a line)', kind: 'lines' },
    { key: 'env', label: 'Environment (one "NAME: value" a line)', kind: 'pairs' },
  ],
  // Offered only when the server lists them (schema.js).
  approval: [{ key: 'timeout_ms', label: 'Decide within (ms; empty: no limit)', kind: 'int' }],
  wait: [
    { key: 'ms', label: 'Wait for (ms)', kind: 'int' },
    { key: 'until', label: 'or until (RFC 3339 time)', kind: 'text', placeholder: '2026-12-01T09:00:00Z' },
  ],
  callback: [{ key: 'timeout_ms', label: 'Wait for the call at most (ms; empty: no limit)', kind: 'int' }],
  wait_for_event: [
    { key: 'event', label: 'Event name', kind: 'text', placeholder: 'order.shipped' },
    { key: 'match', label: 'Match (expression over event, trigger and steps; empty: any)', kind: 'text', placeholder: 'event.payload.order_id == trigger.payload.order_id' },
    { key: 'timeout_ms', label: 'Wait at most (ms; empty: no limit)', kind: 'int' },
  ],
  workflow: [
    { key: 'workflow', label: 'Workflow to start (its id)', kind: 'text', placeholder: 'wf-3k9x2m7q1d', list: 'workflow-ids' },
    { key: 'payload', label: 'Payload of the child run (JSON object with templates)', kind: 'json', placeholder: '{"order": "{{ trigger.payload.id }}"}' },
    { key: 'wait', label: 'Wait for the child run to end', kind: 'bool' },
  ],
};

/** Inputs of an action the console has no form for: its whole `with` as JSON. */
const GENERIC = [{ key: null, label: 'Inputs (with, a JSON object)', kind: 'json' }];

export const DEFAULT_WITH = {
  'http.request': { method: 'GET', url: '' },
  transform: { value: {} },
  delay: { ms: 1000 },
  wait: { ms: 60000 },
  fail: { message: 'failed on purpose' },
  container: { image: '' },
  workflow: { workflow: '', wait: true },
  wait_for_event: { event: '' },
};

/** The text an input shows for a `with` value. */
function show(kind, v) {
  if (v === undefined || v === null) return '';
  switch (kind) {
    case 'pairs': return Object.entries(v).map(([k, x]) => `${k}: ${typeof x === 'string' ? x : JSON.stringify(x)}`).join('\n');
    case 'lines': return Array.isArray(v) ? v.join('\n') : String(v);
    case 'statuses': return Array.isArray(v) ? v.join(', ') : String(v);
    case 'json': return typeof v === 'string' ? v : JSON.stringify(v, null, 2);
    default: return v && typeof v === 'object' ? JSON.stringify(v) : String(v);
  }
}

/** The `with` value of an input's text; undefined leaves the key out. */
export function parseInput(kind, text) {
  const t = text.trim();
  if (t === '') return undefined;
  switch (kind) {
    case 'int': return /^\d+$/.test(t) ? Number(t) : t;
    case 'pairs': return Object.fromEntries(t.split('\n').filter((l) => l.trim()).map((l) => {
      const at = l.indexOf(':');
      return at < 0 ? [l.trim(), ''] : [l.slice(0, at).trim(), l.slice(at + 1).trim()];
    }));
    case 'lines': return t.split('\n').map((l) => l.trim()).filter(Boolean);
    case 'statuses': return t.split(/[\s,]+/).filter(Boolean).map((s) => (/^\d+$/.test(s) ? Number(s) : s));
    case 'json':
      if (/^[[{"\d-]|^(true|false|null)$/.test(t)) {
        try { return JSON.parse(t); } catch { return text; }
      }
      return text;
    default: return text;
  }
}

let uid = 0;
/** A step of the builder's model (from the API's step view, or a new one). */
export function newStep(fields) {
  return { key: `step-${++uid}`, id: '', name: '', action: 'transform', with: {}, retry: null, timeout_ms: null, when: '', ...fields };
}

/**
 * Draws the steps into `list` (an <ol>). `ctx`: { steps, sample(), disabled,
 * changed() (any edit), announce(text), actions and stepFields (what the server
 * accepts, schema.js) }.
 */
export function renderSteps(list, ctx) {
  const redraw = (focusKey, focusCss = '.handle') => {
    renderSteps(list, ctx);
    ctx.changed();
    if (focusKey) list.querySelector(`[data-key="${focusKey}"] ${focusCss}`)?.focus();
  };
  const move = (from, to) => {
    if (to < 0 || to >= ctx.steps.length || from === to) return;
    const [step] = ctx.steps.splice(from, 1);
    ctx.steps.splice(to, 0, step);
    ctx.announce(`Step ${step.id || step.action} moved to position ${to + 1} of ${ctx.steps.length}`);
    redraw(step.key);
  };
  const cards = ctx.steps.map((step, index) => card(step, index, ctx, move, redraw));
  fill(list, cards.length ? cards : h('li.empty', {}, 'No steps yet: add one below.'));
}

function card(step, index, ctx, move, redraw) {
  const at = `steps[${index}]`;
  let drawOwnDeps = null;
  const n = ctx.steps.length;
  let lastField = null;
  const field = (label, name, input, help, after) => {
    const id = `${step.key}-${name.replace(/[^a-z0-9]/gi, '-')}`;
    input.id = id;
    input.dataset.field = `${at}.${name}`;
    if (ctx.disabled) input.disabled = true;
    input.addEventListener('focus', () => { lastField = input; });
    return h('div.field', {}, h('label', { for: id }, label), input, help ? h('p.help', {}, help) : null, after);
  };
  const text = (value, onInput, attrs = {}) => h('input', { type: 'text', value: value ?? '', oninput: (e) => onInput(e.target.value), ...attrs });
  const num = (value, onInput) => h('input', { type: 'text', inputmode: 'numeric', value: value ?? '', oninput: (e) => onInput(e.target.value) });
  const toNumber = (s) => (s.trim() === '' ? null : (/^\d+(\.\d+)?$/.test(s.trim()) ? Number(s) : s));
  const edited = () => ctx.changed();

  const actionSelect = h('select', {
    onchange: (e) => {
      step.action = e.target.value;
      step.with = structuredClone(DEFAULT_WITH[step.action] || {});
      redraw();
      document.getElementById(`${step.key}-action`)?.focus();
    },
  }, ctx.actions.map((a) => h('option', { value: a, selected: a === step.action }, a)));
  if (!ctx.actions.includes(step.action)) actionSelect.append(h('option', { value: step.action, selected: true }, step.action));

  const actionFields = (ACTIONS[step.action] || GENERIC).map((spec) => {
    const current = spec.key === null ? step.with : step.with?.[spec.key];
    let input;
    const set = (value) => {
      if (spec.key === null) step.with = value && typeof value === 'object' ? value : {};
      else {
        step.with = step.with || {};
        if (value === undefined) delete step.with[spec.key]; else step.with[spec.key] = value;
      }
      edited();
    };
    if (spec.kind === 'select') {
      input = h('select', { onchange: (e) => set(e.target.value) },
        spec.options.map((o) => h('option', { value: o, selected: o === (current || spec.options[0]) }, o)));
    } else if (spec.kind === 'bool') {
      // Unset means yes (the server's default).
      input = h('select', { onchange: (e) => set(e.target.value === 'yes') },
        ['yes', 'no'].map((o) => h('option', { value: o, selected: o === (current === false ? 'no' : 'yes') }, o)));
    } else if (['pairs', 'lines', 'json'].includes(spec.kind)) {
      input = h('textarea.mono', { rows: 3, placeholder: spec.placeholder, oninput: (e) => set(parseInput(spec.kind, e.target.value)) });
      input.value = show(spec.kind, current);
      if (spec.kind === 'json') input.dataset.kind = 'json';
    } else {
      input = h('input', { type: 'text', placeholder: spec.placeholder, value: show(spec.kind, current), oninput: (e) => set(parseInput(spec.kind, e.target.value)) });
      // Suggestions from the account's workflows, when the builder listed them.
      if (spec.list) input.setAttribute('list', spec.list);
    }
    const name = spec.key === null ? 'with' : `with.${spec.key}`;
    if (spec.kind === 'select' || spec.kind === 'bool') return field(spec.label, name, input);
    // Every string of `with` is a template when the step runs: each typed field
    // (one line or many) previews what the step receives once it holds one.
    const said = h('div.value-preview', { id: `${step.key}-${name.replace(/[^a-z0-9]/gi, '-')}-preview`, 'aria-live': 'polite' });
    const look = () => valuePreview(spec.kind, input, said, ctx.sample());
    input.addEventListener('input', look);
    look();
    return field(spec.label, name, input, null, said);
  });

  // Step fields newer servers accept (schema.js): dependencies and fan-out.
  const extra = [];
  const deps = ctx.stepFields.includes('needs') ? h('div.deps', { role: 'group', 'aria-labelledby': `${step.key}-deps-title` }) : null;
  if (deps) drawOwnDeps = () => drawDeps(deps, step, index, ctx, redraw);
  if (ctx.stepFields.includes('for_each')) {
    extra.push(field('For each (template of a list)', 'for_each', text(step.for_each, (v) => { step.for_each = v.trim() ? v : null; edited(); }, { placeholder: '{{ trigger.payload.items }}' }),
      'Runs the step once per item.'));
  }

  const retry = step.retry || {};
  const setRetry = (k, v) => {
    const next = { ...(step.retry || {}) };
    const value = toNumber(v);
    if (value === null) delete next[k]; else next[k] = value;
    step.retry = Object.keys(next).length ? next : null;
    edited();
  };

  // The references are listed when the helper opens, from the steps as they are then.
  const helper = h('details.refs');
  const refsBody = h('div.refs-body');
  helper.append(h('summary', {}, 'Insert a value'), refsBody);
  helper.addEventListener('toggle', () => {
    if (!helper.open) return;
    const visible = dependencies(ctx.steps).graph ? ctx.steps.filter((_, j) => waitsFor(ctx.steps, index, j)) : null;
    const groups = references(ctx.steps, index, ctx.sample(), visible);
    fill(refsBody,
      h('p.help', {}, 'Click a value to insert it at the cursor of the field you edited last in this step (or its first input).'),
      groups.map((g) => h('div', {}, h('strong', {}, g.group), h('ul.chips', {},
        g.items.map((path) => h('li', {}, h('button.chip', {
          type: 'button',
          // `when` is an expression over bare paths; other fields take templates.
          onclick: () => {
            // Into the field edited last, else the action's first input.
            const target = lastField || actionFields[0]?.querySelector('input, textarea');
            if (!target) return;
            const template = `{{ ${path} }}`;
            // Into a JSON value, a template outside a string goes in quotes: the value
            // stays JSON (a lone template keeps its type when the step runs).
            const at = target.selectionStart ?? target.value.length;
            insert(target, target.dataset.field.endsWith('.when') ? path
              : target.dataset.kind === 'json' ? quoteAt(target.value, at, template) : template);
          },
        }, path)))))));
  });

  const title = h('strong.step-title', { id: `${step.key}-title`, tabindex: '-1' }, step.name || step.id || '(new step)');
  const retitle = () => { title.textContent = step.name || step.id || '(new step)'; edited(); };

  const handle = h('button.handle', {
    type: 'button',
    'aria-label': `Reorder step ${index + 1} of ${n}: drag, or press Arrow Up or Arrow Down`,
    title: 'Drag to reorder (or Arrow Up / Arrow Down)',
    disabled: ctx.disabled,
    onkeydown: (e) => {
      if (e.key === 'ArrowUp') { e.preventDefault(); move(index, index - 1); }
      if (e.key === 'ArrowDown') { e.preventDefault(); move(index, index + 1); }
    },
  }, '⠿');

  const li = h('li.step-card', { dataset: { key: step.key, index: String(index) }, 'data-field': at },
    h('div.step-head', {},
      handle,
      h('span.step-number', {}, `${index + 1}.`),
      title,
      h('span.muted', {}, step.action),
      h('button.link.danger', {
        type: 'button', disabled: ctx.disabled, 'aria-label': `Remove step ${index + 1}`,
        onclick: () => {
          const dependents = ctx.steps.filter((s) => s !== step && (s.needs || []).includes(step.id));
          if (dependents.length && !confirm(`Step ${step.id} is needed by ${dependents.map((s) => s.id).join(', ')}. `
            + 'Remove it, and remove it from their needs?')) return;
          for (const d of dependents) {
            d.needs = d.needs.filter((need) => need !== step.id);
            if (!d.needs.length) d.needs = null;
          }
          ctx.steps.splice(index, 1);
          ctx.announce('Step removed');
          redraw();
        },
      }, 'Remove')),
    h('div.grid', {},
      field('Step id', 'id', text(step.id, (v) => { rename(ctx.steps, step, v); retitle(); }, { placeholder: 'fetch-orders', autocapitalize: 'off', spellcheck: 'false' }),
        'Lowercase letters, digits and "-"; later steps reference it.'),
      field('Name', 'name', text(step.name, (v) => { step.name = v; retitle(); })),
      field('Action', 'action', actionSelect)),
    deps,
    h('div.grid', {}, actionFields),
    h('details.more', { open: Boolean(step.retry || step.timeout_ms || step.when || step.for_each) },
      h('summary', {}, 'Retry, timeout and condition'),
      h('div.grid', {},
        field('Max attempts', 'retry.max_attempts', num(retry.max_attempts, (v) => setRetry('max_attempts', v))),
        field('Backoff (ms)', 'retry.backoff_ms', num(retry.backoff_ms, (v) => setRetry('backoff_ms', v))),
        field('Backoff factor', 'retry.backoff_factor', num(retry.backoff_factor, (v) => setRetry('backoff_factor', v))),
        field('Timeout per attempt (ms)', 'timeout_ms', num(step.timeout_ms, (v) => { step.timeout_ms = toNumber(v); edited(); })),
        field('Run only when', 'when', text(step.when, (v) => { step.when = v; edited(); }, { placeholder: 'trigger.payload.amount > 100' }),
          'An expression over the same values as templates; false skips the step.'),
        extra)),
    ctx.disabled ? null : helper);
  dragSupport(li, handle, index, ctx, move);
  if (drawOwnDeps) { li.drawDeps = drawOwnDeps; drawOwnDeps(); }
  return li;
}

/** A step's id changes: the needs that named it follow, unless the name was shared. */
function rename(steps, step, id) {
  const old = step.id;
  step.id = id;
  const others = steps.filter((s) => s !== step);
  if (!old || !id || others.some((s) => s.id === old || s.id === id)) return;
  for (const s of others) if (s.needs) s.needs = s.needs.map((n) => (n === old ? id : n));
}

/**
 * What a step waits for, as the engine reads it: its needs (each removable), a picker
 * of the other steps to add one, or in a chain the step it follows.
 */
function drawDeps(box, step, index, ctx, redraw) {
  const { graph } = dependencies(ctx.steps);
  const needs = step.needs || [];
  const others = ctx.steps.filter((s, i) => i !== index && s.id && !needs.includes(s.id));
  const picker = h('select', { id: `${step.key}-needs`, 'data-field': `steps[${index}].needs`, 'aria-label': `Add a step that ${step.id || 'this step'} needs`, disabled: ctx.disabled },
    h('option', { value: '' }, 'Add a dependency…'),
    others.map((s) => h('option', { value: s.id }, s.name && s.name !== s.id ? `${s.id} (${s.name})` : s.id)));
  const add = () => {
    const id = picker.value;
    if (!id) return;
    const from = ctx.steps.findIndex((s) => s.id === id);
    if (waitsFor(ctx.steps, from, index)) {
      ctx.announce(`Not added: ${id} already waits for ${step.id}, so this would be a cycle`);
      return;
    }
    step.needs = [...needs, id];
    ctx.announce(graph ? `${step.id} now needs ${id}` : `${step.id} now needs ${id}. The steps form a graph: steps without needs start at once`);
    redraw(step.key, 'select.needs-picker');
  };
  picker.classList.add('needs-picker');
  const follows = !graph && index > 0 ? ctx.steps[index - 1].id : null;
  fill(box,
    h('span.deps-title', { id: `${step.key}-deps-title` }, 'Needs'),
    needs.length
      ? h('ul.needs', {}, needs.map((id) => h('li.need', {}, h('span.mono', {}, id),
        ctx.disabled ? null : h('button.link', {
          type: 'button', 'aria-label': `Remove the dependency of ${step.id} on ${id}`,
          onclick: () => {
            step.needs = needs.filter((n) => n !== id);
            if (!step.needs.length) step.needs = null;
            ctx.announce(`${step.id} no longer needs ${id}`);
            redraw(step.key, 'select.needs-picker');
          },
        }, '×'))))
      : h('span.muted', {}, follows ? `nothing set: follows ${follows} (no step sets needs)` : (graph || index === 0 ? 'nothing: starts at once' : 'nothing')),
    ctx.disabled || !others.length ? null : [picker, h('button.secondary', { type: 'button', id: `${step.key}-add-need`, onclick: add }, 'Add')]);
}

/**
 * Under a field of `kind` (json, pairs, lines, or a single line: text, int, statuses):
 * once it holds a template, what the step would receive, written as the field is; for
 * JSON, why the text is not JSON.
 */
function valuePreview(kind, input, box, sample) {
  const t = input.value.trim();
  if (!t) return void fill(box);
  if (kind === 'json') {
    if (/^[[{]/.test(t)) {
      try { JSON.parse(t); } catch (e) {
        input.setAttribute('aria-invalid', 'true');
        fill(box, h('p.field-error', {}, `Not valid JSON (${e.message}): the step would receive this text as one string.`));
        return;
      }
    }
    if (input.getAttribute('aria-invalid') && !input.nextElementSibling?.classList.contains('field-error')) input.removeAttribute('aria-invalid');
  }
  if (!t.includes('{{')) return void fill(box);
  const value = preview(parseInput(kind, input.value), sample);
  fill(box, h('p.help', {}, 'The step receives (with the sample payload; what only the run knows stays a template):'),
    scrollStop(h('pre.json.preview-value', {}, kind === 'json' ? JSON.stringify(value, null, 2) : show(kind, value))));
}

function insert(input, text) {
  if (!input) return;
  const start = input.selectionStart ?? input.value.length;
  const end = input.selectionEnd ?? start;
  input.value = input.value.slice(0, start) + text + input.value.slice(end);
  input.focus();
  input.setSelectionRange(start + text.length, start + text.length);
  input.dispatchEvent(new Event('input', { bubbles: true }));
}

/** Pointer-driven drag of a card by its handle; drops between the other cards. */
function dragSupport(li, handle, index, ctx, move) {
  handle.addEventListener('pointerdown', (down) => {
    if (ctx.disabled || down.button !== 0) return;
    down.preventDefault();
    handle.setPointerCapture(down.pointerId);
    const list = li.parentElement;
    let target = index;
    li.classList.add('dragging');
    const onMove = (e) => {
      const others = [...list.querySelectorAll('.step-card')].filter((c) => c !== li);
      target = others.filter((c) => {
        const r = c.getBoundingClientRect();
        return r.top + r.height / 2 < e.clientY;
      }).length;
      others.forEach((c, i) => {
        c.classList.toggle('drop-before', i === target);
        c.classList.toggle('drop-after', i === others.length - 1 && target === others.length);
      });
    };
    const onUp = () => {
      handle.removeEventListener('pointermove', onMove);
      handle.removeEventListener('pointerup', onUp);
      handle.removeEventListener('pointercancel', onUp);
      li.classList.remove('dragging');
      list.querySelectorAll('.drop-before, .drop-after').forEach((c) => c.classList.remove('drop-before', 'drop-after'));
      move(index, target);
    };
    handle.addEventListener('pointermove', onMove);
    handle.addEventListener('pointerup', onUp);
    handle.addEventListener('pointercancel', onUp);
  });
}

/** The API's `steps` array of the model. */
export function toApiSteps(steps) {
  return steps.map((s) => {
    const out = { id: s.id, action: s.action };
    if (s.name) out.name = s.name;
    if (s.with && Object.keys(s.with).length) out.with = s.with;
    if (s.retry) out.retry = s.retry;
    if (s.timeout_ms !== null && s.timeout_ms !== undefined && s.timeout_ms !== '') out.timeout_ms = s.timeout_ms;
    if (s.when && s.when.trim()) out.when = s.when;
    for (const extra of ['needs', 'for_each', 'for_each_concurrency']) if (s[extra] !== undefined && s[extra] !== null) out[extra] = s[extra];
    return out;
  });
}
