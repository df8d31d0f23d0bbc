// A line diff of two texts (the longest common subsequence of their lines), for
// comparing two versions of a workflow's YAML: the run page (a run's version against
// the workflow now) and the workflow page (any two of its versions).

import { h } from './dom.js';
import { manifest, toYaml } from './yaml.js';

/** [{op: ' ' | '-' | '+', text}]: lines of `a` kept, removed and `b`'s added. */
export function diffLines(a, b) {
  const x = a.split('\n');
  const y = b.split('\n');
  // The common head needs no table. (Not the tail: matching from the front keeps a
  // change next to the lines it belongs with, where a shared tail would pull them apart.)
  let head = 0;
  while (head < x.length && head < y.length && x[head] === y[head]) head += 1;
  const xs = x.slice(head);
  const ys = y.slice(head);
  const n = xs.length;
  const m = ys.length;
  // lcs[i * (m + 1) + j]: the length of the LCS of xs[i..] and ys[j..].
  const lcs = new Uint32Array((n + 1) * (m + 1));
  for (let i = n - 1; i >= 0; i -= 1) {
    for (let j = m - 1; j >= 0; j -= 1) {
      lcs[i * (m + 1) + j] = xs[i] === ys[j]
        ? lcs[(i + 1) * (m + 1) + j + 1] + 1
        : Math.max(lcs[(i + 1) * (m + 1) + j], lcs[i * (m + 1) + j + 1]);
    }
  }
  const out = x.slice(0, head).map((text) => ({ op: ' ', text }));
  let i = 0;
  let j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && xs[i] === ys[j]) { out.push({ op: ' ', text: xs[i] }); i += 1; j += 1; }
    else if (i < n && (j === m || lcs[(i + 1) * (m + 1) + j] >= lcs[i * (m + 1) + j + 1])) { out.push({ op: '-', text: xs[i] }); i += 1; }
    else { out.push({ op: '+', text: ys[j] }); j += 1; }
  }
  return out;
}

/**
 * The parts of a workflow a version keeps (`workflow_version` of a run, a version of
 * GET /v1/workflows/{id}/versions, or the workflow itself), as manifest YAML.
 */
export function versionYaml(v, id) {
  const { name, steps, timeout_ms: timeout, concurrency, rate_limit: rate, debounce, parallelism, output } = v;
  return toYaml(manifest({ id, name, steps, timeout_ms: timeout, concurrency, rate_limit: rate, debounce, parallelism, output }));
}

/**
 * A line diff as a list: removed lines marked "−", added "+", long unchanged runs
 * folded. `from` and `to` name the two sides in the summary ("version 2").
 */
export function diffView(lines, from, to) {
  const removed = lines.filter((l) => l.op === '-').length;
  const added = lines.filter((l) => l.op === '+').length;
  if (!removed && !added) return h('p', { id: 'diff-summary' }, 'No differences: the same steps and settings.');
  const rows = [];
  lines.forEach((l, i) => {
    // Three lines of context either side of a change; the rest is folded.
    const near = lines.slice(Math.max(0, i - 3), i + 4).some((x) => x.op !== ' ');
    if (l.op === ' ' && !near) {
      if (rows.length && rows[rows.length - 1].fold) rows[rows.length - 1].fold += 1;
      else rows.push({ fold: 1 });
      return;
    }
    rows.push(l);
  });
  return [
    h('p', { id: 'diff-summary' }, `${removed} line${removed === 1 ? '' : 's'} removed, ${added} added (− in ${from}, + in ${to}).`),
    h('pre.diff', { id: 'diff', tabindex: '0', 'aria-label': `Differences between ${from} and ${to}` }, rows.map((r) => (r.fold
      ? h('span.fold', {}, `  … ${r.fold} unchanged line${r.fold === 1 ? '' : 's'}\n`)
      : h(`span.${r.op === '-' ? 'del' : r.op === '+' ? 'ins' : 'same'}`, {}, `${r.op === '-' ? '−' : r.op} ${r.text}\n`)))),
  ];
}
