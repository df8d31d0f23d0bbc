// What a step's inputs may reference: `{{ … }}` paths from the trigger's sample
// payload, the outputs of earlier steps, the run and the workflow.

/** Dotted paths of every value inside `value` (arrays by index), parents first. */
export function paths(value, prefix, out = [], depth = 0) {
  if (depth > 8 || out.length > 200) return out;
  if (value && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) {
      const path = `${prefix}.${k}`;
      out.push(path);
      paths(v, path, out, depth + 1);
    }
  }
  return out;
}

/** Outputs an action is known to produce (beyond what a sample shows). */
const OUTPUTS = {
  'http.request': ['status', 'headers', 'body'],
  workflow: ['run_id', 'status', 'output'],
};

/**
 * References available to step number `index` of `steps`, grouped for display:
 * [{group, items: [path]}]. `sample` is the parsed sample payload (or null).
 */
export function references(steps, index, sample) {
  const groups = [];
  groups.push({
    group: 'Trigger payload',
    items: sample && typeof sample === 'object' ? paths(sample, 'trigger.payload') : ['trigger.payload'],
  });
  const earlier = steps.slice(0, index).filter((s) => s.id);
  if (earlier.length) {
    groups.push({
      group: 'Earlier steps',
      items: earlier.flatMap((s) => {
        const base = `steps.${s.id}.output`;
        const known = (OUTPUTS[s.action] || []).map((k) => `${base}.${k}`);
        const shaped = s.action === 'transform' && s.with && typeof s.with.value === 'object'
          ? paths(s.with.value, base) : [];
        return [base, ...known, ...shaped];
      }),
    });
  }
  // A callback's URL exists from the run's start: every step may hand it out.
  const callbacks = steps.filter((s) => s.id && s.action === 'callback');
  if (callbacks.length) {
    groups.push({ group: 'Callback URLs', items: callbacks.map((s) => `callbacks.${s.id}.url`) });
  }
  groups.push({ group: 'Run', items: ['run.id', 'workflow.id'] });
  return groups;
}
