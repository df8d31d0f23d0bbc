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
export function references(steps, index, sample, visible) {
  const groups = [];
  groups.push({
    group: 'Trigger payload',
    items: sample && typeof sample === 'object' ? paths(sample, 'trigger.payload') : ['trigger.payload'],
  });
  // In a graph, only the steps it waits for (`visible`); in a chain, those before it.
  const earlier = (visible || steps.slice(0, index)).filter((s) => s.id);
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

/** Whether position `at` of JSON text `text` is inside a string literal. */
function inString(text, at) {
  let inside = false;
  for (let i = 0; i < at; i += 1) {
    if (inside && text[i] === '\\') i += 1;
    else if (text[i] === '"') inside = !inside;
  }
  return inside;
}

/** `template` as it goes at position `at` of JSON text: quoted unless in a string. */
export function quoteAt(text, at, template) {
  return inString(text, at) ? template : `"${template}"`;
}

/**
 * A `with` value as a step would receive it, as far as the sample payload tells:
 * `{{ trigger.payload.… }}` paths it has are filled in (a lone template keeps the
 * value's type, as the engine does), anything else stays a template.
 */
export function preview(value, sample) {
  const context = { trigger: { payload: sample ?? undefined } };
  const look = (path) => path.trim().split('.').reduce(
    (v, k) => (v !== null && typeof v === 'object' && k in v ? v[k] : undefined), context);
  const walk = (v) => {
    if (typeof v === 'string') {
      const whole = v.match(/^\{\{([^{}]+)\}\}$/);
      if (whole) { const found = look(whole[1]); return found === undefined ? v : found; }
      return v.replace(/\{\{([^{}]+)\}\}/g, (m, path) => {
        const found = look(path);
        return found === undefined ? m : (typeof found === 'string' ? found : JSON.stringify(found));
      });
    }
    if (Array.isArray(v)) return v.map(walk);
    if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, walk(x)]));
    return v;
  };
  return walk(value);
}
