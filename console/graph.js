// The steps as a graph, drawn as inline SVG: what the engine executes. Without any
// `needs` the steps are a chain (each step follows the previous one); as soon as one
// step has `needs`, only `needs` order them and steps without any start at once.
// Layout: longest-path layers over the dependencies (left to right), then the steps
// of each layer ordered by where their dependencies sit. No library. The layers go
// left to right, or top to bottom (`vertical`: in a narrow column beside the cards).

const NS = 'http://www.w3.org/2000/svg';
const W = 190;
const H = 56;
const GX = 56;
const GY = 30;
const PAD = 14;
// Between the nodes of a layer and between layers, when the layers go down.
const VX = 24;
const VY = 44;

function svg(tag, attrs, ...children) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat(Infinity)) if (c !== null && c !== undefined && c !== false) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

/**
 * What each step waits for, by position: `deps[i]` (its `needs` that exist, or the
 * previous step in a chain), and whether the steps form a graph at all.
 */
export function dependencies(steps) {
  const graph = steps.some((s) => (s.needs || []).length);
  const at = new Map();
  steps.forEach((s, i) => { if (s.id && !at.has(s.id)) at.set(s.id, i); });
  const deps = steps.map((s, i) => {
    if (!graph) return i ? [i - 1] : [];
    const out = [];
    for (const need of s.needs || []) {
      const j = at.get(need);
      if (j !== undefined && j !== i && !out.includes(j)) out.push(j);
    }
    return out;
  });
  return { deps, graph };
}

/**
 * Layers (longest path from a root; an edge closing a cycle is left out) and the
 * order of the steps within each layer: [{layer, row}] by position, and the layers.
 */
export function layout(steps) {
  const { deps, graph } = dependencies(steps);
  const n = steps.length;
  const layer = new Array(n).fill(0);
  const state = new Array(n).fill(0);
  const cyclic = new Set();
  const visit = (i) => {
    if (state[i] === 2) return layer[i];
    state[i] = 1;
    let l = 0;
    for (const d of deps[i]) {
      if (state[d] === 1) { cyclic.add(`${d}>${i}`); continue; }
      l = Math.max(l, visit(d) + 1);
    }
    state[i] = 2;
    layer[i] = l;
    return l;
  };
  for (let i = 0; i < n; i += 1) visit(i);
  const layers = [];
  steps.forEach((_, i) => { (layers[layer[i]] = layers[layer[i]] || []).push(i); });
  // Two sweeps of barycentres: a step sits near the average row of what it needs.
  const row = new Array(n).fill(0);
  const rows = () => layers.forEach((l) => l.forEach((i, r) => { row[i] = r; }));
  rows();
  for (let sweep = 0; sweep < 2; sweep += 1) {
    for (let l = 1; l < layers.length; l += 1) {
      const weight = (i) => {
        const ds = deps[i].filter((d) => layer[d] < l);
        return ds.length ? ds.reduce((a, d) => a + row[d], 0) / ds.length : row[i];
      };
      const w = new Map(layers[l].map((i) => [i, weight(i)]));
      layers[l].sort((a, b) => w.get(a) - w.get(b) || a - b);
      rows();
    }
  }
  return { deps, graph, cyclic, layers, place: steps.map((_, i) => ({ layer: layer[i], row: row[i] })) };
}

/** Whether step `from` waits, directly or not, for step `to` (positions). */
export function waitsFor(steps, from, to) {
  const { deps } = dependencies(steps);
  const seen = new Set();
  const walk = (i) => deps[i].some((d) => d === to || (!seen.has(d) && (seen.add(d), walk(d))));
  return walk(from);
}

/** How a step is drawn: its shape and the word that says what it is. */
export function kind(step) {
  if (step.for_each) return { shape: 'stack', word: 'for each' };
  switch (step.action) {
    case 'approval': return { shape: 'gate', word: 'approval' };
    case 'wait': case 'delay': case 'wait_for_event': return { shape: 'wait', word: step.action === 'wait_for_event' ? 'waits for an event' : step.action };
    case 'callback': return { shape: 'callback', word: 'callback' };
    case 'workflow': return { shape: 'sub', word: 'sub-workflow' };
    default: return { shape: 'task', word: step.action || 'step' };
  }
}

const cut = (text, max) => (text.length > max ? `${text.slice(0, max - 1)}…` : text);

function shape(k, x, y) {
  const box = (extra) => svg('rect', { x, y, width: W, height: H, rx: 8, class: `shape ${extra || ''}` });
  switch (k.shape) {
    case 'stack': return [
      svg('rect', { x: x + 8, y: y - 8, width: W, height: H, rx: 8, class: 'shape back' }),
      svg('rect', { x: x + 4, y: y - 4, width: W, height: H, rx: 8, class: 'shape back' }), box()];
    case 'gate': return [svg('polygon', {
      class: 'shape', points: [[x + 14, y], [x + W - 14, y], [x + W, y + H / 2], [x + W - 14, y + H], [x + 14, y + H], [x, y + H / 2]].map((p) => p.join(',')).join(' '),
    })];
    case 'wait': return [box('dashed')];
    case 'callback': return [box('dotted')];
    case 'sub': return [box(), svg('rect', { x: x + 4, y: y + 4, width: W - 8, height: H - 8, rx: 5, class: 'inner' })];
    default: return [box()];
  }
}

/** A small glyph at the node's left, drawn (no font needed). */
function icon(k, x, y) {
  const cx = x + 20;
  const cy = y + H / 2;
  switch (k.shape) {
    case 'gate': return svg('path', { class: 'icon', d: `M${cx - 6} ${cy} l4 5 l8 -10` });
    case 'wait': return svg('g', { class: 'icon' }, svg('circle', { cx, cy, r: 7 }), svg('path', { d: `M${cx} ${cy - 4} v4 h3` }));
    case 'callback': return svg('path', { class: 'icon', d: `M${cx + 6} ${cy - 5} h-8 a5 5 0 0 0 0 10 h8 m-3 -3 l3 3 l-3 3` });
    case 'sub': return svg('g', { class: 'icon' }, svg('rect', { x: cx - 7, y: cy - 6, width: 9, height: 9 }), svg('rect', { x: cx - 2, y: cy - 1, width: 9, height: 9 }));
    case 'stack': return svg('path', { class: 'icon', d: `M${cx - 7} ${cy - 5} h14 M${cx - 7} ${cy} h14 M${cx - 7} ${cy + 5} h14` });
    default: return svg('circle', { class: 'icon', cx, cy, r: 4 });
  }
}

/**
 * A graph view in `box`, redrawn by `update(steps)`. opts:
 *   label           the accessible name of the graph
 *   onSelect(i)     a node was chosen (click, Enter or Space)
 *   onConnect(i, j) builder only: step j should need step i (a node's handle, then
 *                   the target: by click-then-click, by keyboard, or by dragging)
 *   status(step)    run page: the step's record ({status, child_run_id, …}) or null
 *   announce(text)  tells screen readers what happened
 *   vertical()      whether the layers go top to bottom (read at each drawing)
 * Returns { update(steps), mark(i) } (mark: the step being edited, or null).
 */
export function graphView(box, opts) {
  let pending = null; // the position whose handle was chosen, waiting for a target
  let steps = [];
  let marked = null;
  const hint = document.createElement('p');
  hint.className = 'help graph-hint';
  hint.setAttribute('aria-live', 'polite');
  const scroller = document.createElement('div');
  scroller.className = 'graph-scroll';
  box.replaceChildren(scroller, hint);

  const connectTo = (j) => {
    const from = pending;
    pending = null;
    if (from !== null && from !== j) opts.onConnect(from, j);
    else draw();
  };
  const startConnect = (i) => {
    pending = pending === i ? null : i;
    draw();
    if (pending !== null) opts.announce?.(`Connecting from ${steps[i].id}: choose the step that needs it, or press Escape`);
  };

  function draw() {
    const active = document.activeElement;
    const refocus = box.contains(active) ? active.getAttribute('data-focus') : null;
    const { deps, graph, cyclic, layers, place } = layout(steps);
    const tallest = Math.max(1, ...layers.map((l) => l.length));
    const deep = Math.max(1, layers.length);
    const vertical = Boolean(opts.vertical?.());
    const pos = place.map(({ layer, row }) => {
      const side = row + (tallest - layers[layer].length) / 2;
      return vertical
        ? { x: PAD + side * (W + VX), y: PAD + 8 + layer * (H + VY) }
        : { x: PAD + layer * (W + GX), y: PAD + 8 + side * (H + GY) };
    });
    const width = vertical
      ? PAD * 2 + 8 + tallest * (W + VX) - VX
      : PAD * 2 + 8 + deep * (W + GX) - GX + (opts.onConnect ? 10 : 0);
    const height = vertical
      ? PAD * 2 + 8 + deep * (H + VY) - VY + 14 + (opts.onConnect ? 10 : 0)
      : PAD * 2 + 8 + tallest * (H + GY) - GY + 14;
    // Where edges leave a node (and its connect handle sits), and where they arrive.
    const exit = (p) => (vertical ? [p.x + W / 2, p.y + H] : [p.x + W, p.y + H / 2]);
    const entry = (p, step) => (vertical ? [p.x + W / 2, p.y - (step.for_each ? 10 : 2)] : [p.x - 2, p.y + H / 2]);
    const edges = [];
    deps.forEach((ds, j) => ds.forEach((i) => {
      const back = cyclic.has(`${i}>${j}`);
      const [x1, y1] = exit(pos[i]);
      const [x2, y2] = entry(pos[j], steps[j]);
      const mid = back ? 40 : ((vertical ? y2 - y1 : x2 - x1) / 2);
      edges.push(svg('path', {
        class: `edge${back ? ' cycle' : ''}${graph ? '' : ' chain'}`, 'marker-end': 'url(#graph-arrow)',
        d: vertical
          ? `M${x1} ${y1} C${x1} ${y1 + mid} ${x2} ${y2 - mid} ${x2} ${y2}`
          : `M${x1} ${y1} C${x1 + mid} ${y1} ${x2 - mid} ${y2} ${x2} ${y2}`,
        'data-edge': `${steps[i].id}>${steps[j].id}`,
      }));
    }));
    const nodes = steps.map((step, i) => {
      const { x, y } = pos[i];
      const k = kind(step);
      const record = opts.status ? opts.status(step) : null;
      const status = record?.status;
      const title = step.name && step.name !== step.id ? `${step.name} (${step.id})` : (step.id || '(new step)');
      const needs = deps[i].map((d) => steps[d].id);
      const first = cut(step.name || step.id || '(new step)', 19);
      const second = cut(status ? `${k.word} · ${status}` : k.word, 24);
      // The name read out starts with the words shown.
      const said = `${first} ${second}: step ${title}${step.for_each ? ` (${step.action}, for each)` : ''}, `
        + `${needs.length ? `after ${needs.join(', ')}` : 'starts at once'}`;
      const node = svg('g', {
        class: `node${status ? ` st-${status}` : ''}${marked === i ? ' current' : ''}${pending === i ? ' source' : ''}${pending !== null && pending !== i ? ' target' : ''}`,
        // Named by its <title> (the words shown, then the rest), not by aria-label.
        role: 'button', tabindex: 0,
        'data-node': step.id, 'data-focus': `n${i}`, 'data-status': status || null, 'data-kind': k.shape,
        onclick: () => (pending !== null ? connectTo(i) : opts.onSelect(i)),
        onkeydown: (e) => {
          if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); if (pending !== null) connectTo(i); else opts.onSelect(i); }
        },
      },
      svg('title', {}, pending !== null && pending !== i ? `${first} ${second}: make ${step.id} need ${steps[pending].id}` : said),
      shape(k, x, y),
      icon(k, x, y),
      svg('text', { x: x + 36, y: y + 23, class: 'name' }, first),
      svg('text', { x: x + 36, y: y + 42, class: 'kind' }, second));
      const extra = [];
      if (opts.onConnect) {
        const [px, py] = exit(pos[i]);
        extra.push(svg('g', {
          class: `port${pending === i ? ' on' : ''}`, role: 'button', tabindex: 0, 'data-focus': `h${i}`, 'data-port': step.id,
          'aria-label': pending === i ? `Stop connecting from ${step.id}` : `Connect ${step.id} to a step that needs it`,
          onclick: (e) => { if (!dragged) startConnect(i); dragged = false; e.stopPropagation(); },
          onkeydown: (e) => { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); startConnect(i); } },
          onpointerdown: (e) => drag(e, i, px, py),
        }, svg('title', {}, `Connect ${step.id} to a step that needs it (drag to it, or click here then on it)`),
        svg('circle', { cx: px, cy: py, r: 9 }), svg('path', { d: `M${px - 4} ${py} h8 M${px} ${py - 4} v8` })));
      }
      if (record?.child_run_id) {
        extra.push(svg('a', { href: `/runs/${record.child_run_id}`, 'data-link': '', class: 'child-link', 'data-child': step.id },
          svg('text', { x: x + W - 4, y: y + H + 15, 'text-anchor': 'end' }, 'child run ↗')));
      }
      return [node, ...extra];
    });
    const el = svg('svg', {
      width, height, viewBox: `0 0 ${width} ${height}`, role: 'group',
      'aria-label': `${opts.label}: ${steps.length} step${steps.length === 1 ? '' : 's'}, ${graph ? 'ordered by their needs' : 'one after the other'}`,
      class: pending !== null ? 'connecting' : null,
    },
    svg('defs', {}, svg('marker', { id: 'graph-arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
      svg('path', { d: 'M0 0 L10 5 L0 10 z', class: 'arrow' }))),
    edges, nodes);
    scroller.replaceChildren(el);
    hint.textContent = pending !== null
      ? `Connecting from ${steps[pending].id}: click the step that needs it (again to remove the dependency), or press Escape.`
      : (opts.onConnect && steps.length > 1 ? 'Click a step to edit it. To add a dependency, drag from a step\'s ⊕ handle to the step that needs it, or click the handle and then that step.' : '');
    if (cyclic.size) hint.textContent += ' The needs form a cycle (dashed red): the server refuses it.';
    if (refocus) box.querySelector(`[data-focus="${refocus}"]`)?.focus();
  }

  let dragged = false;
  function drag(down, i, x0, y0) {
    if (down.button !== 0) return;
    down.preventDefault();
    const svgEl = scroller.querySelector('svg');
    const origin = svgEl.getBoundingClientRect();
    let line = null;
    const move = (e) => {
      const x = e.clientX - origin.left;
      const y = e.clientY - origin.top;
      if (!line && Math.hypot(e.clientX - down.clientX, e.clientY - down.clientY) < 6) return;
      if (!line) { line = svg('line', { class: 'edge drawing', x1: x0, y1: y0 }); svgEl.append(line); }
      line.setAttribute('x2', x);
      line.setAttribute('y2', y);
    };
    const up = (e) => {
      document.removeEventListener('pointermove', move);
      document.removeEventListener('pointerup', up);
      if (!line) return;
      line.remove();
      dragged = true;
      setTimeout(() => { dragged = false; }, 0);
      const target = document.elementFromPoint(e.clientX, e.clientY)?.closest('[data-node]');
      const j = target ? steps.findIndex((s) => s.id === target.getAttribute('data-node')) : -1;
      if (j >= 0 && j !== i) { pending = i; connectTo(j); }
    };
    document.addEventListener('pointermove', move);
    document.addEventListener('pointerup', up);
  }

  box.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && pending !== null) {
      const from = pending;
      pending = null;
      draw();
      box.querySelector(`[data-focus="h${from}"]`)?.focus();
      opts.announce?.('Connecting cancelled');
    }
  });

  return {
    update(next) {
      steps = next;
      if (pending !== null && pending >= steps.length) pending = null;
      box.hidden = !steps.length;
      draw();
    },
    /** Marks step `i` as the one being edited (null: none), scrolled into the graph's view. */
    mark(i) {
      marked = i;
      for (const node of scroller.querySelectorAll('.node')) node.classList.toggle('current', node.getAttribute('data-focus') === `n${i}`);
      const node = scroller.querySelector('.node.current');
      if (!node) return;
      const r = node.getBoundingClientRect();
      const s = scroller.getBoundingClientRect();
      if (r.top < s.top || r.bottom > s.bottom) scroller.scrollTop += r.top - s.top - (s.height - r.height) / 2;
      if (r.left < s.left || r.right > s.right) scroller.scrollLeft += r.left - s.left - (s.width - r.width) / 2;
    },
  };
}
