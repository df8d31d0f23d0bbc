// A line diff of two texts (the longest common subsequence of their lines), for
// comparing two versions of a workflow's YAML.

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
