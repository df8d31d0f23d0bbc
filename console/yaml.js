// The Workflow manifest of a workflow as the API shows it, in YAML for GitOps users:
// `kubectl apply -f` gives the same workflow. The API's snake_case settings become the
// CRD's camelCase fields; `with` values are copied as they are.

const CAMEL = {
  timeout_ms: 'timeoutMs', max_attempts: 'maxAttempts', backoff_ms: 'backoffMs', backoff_factor: 'backoffFactor',
  for_each: 'forEach', for_each_concurrency: 'forEachConcurrency', cancel_on: 'cancelOn',
  catchup_window_ms: 'catchupWindowMs', rate_limit: 'rateLimit', period_ms: 'periodMs', max_wait_ms: 'maxWaitMs',
};

function camel(value, inWith) {
  if (Array.isArray(value)) return value.map((v) => camel(v, inWith));
  if (!value || typeof value !== 'object') return value;
  const out = {};
  for (const [k, v] of Object.entries(value)) {
    if (v === null || v === undefined) continue;
    const key = inWith ? k : (CAMEL[k] || k);
    out[key] = camel(v, inWith || k === 'with');
  }
  return out;
}

/** The manifest object of a workflow view (GET /v1/workflows/{id}). */
export function manifest(wf) {
  const spec = camel({
    name: wf.name, description: wf.description, state: wf.state, trigger: wf.trigger,
    executor: wf.executor, timeout_ms: wf.timeout_ms, concurrency: wf.concurrency, rate_limit: wf.rate_limit,
    debounce: wf.debounce, priority: wf.priority, cancel_on: wf.cancel_on,
    steps: (wf.steps || []).map((s) => ({ ...s, with: s.with && Object.keys(s.with).length ? s.with : null })),
  }, false);
  return { apiVersion: 'flowline.io/v1', kind: 'Workflow', metadata: { name: wf.id }, spec };
}

const PLAIN = /^[A-Za-z_/][A-Za-z0-9_.\/-]*$/;
const RESERVED = /^(true|false|yes|no|on|off|y|n|null|~)$/i;

function scalar(v) {
  if (typeof v === 'string') return PLAIN.test(v) && !RESERVED.test(v) ? v : JSON.stringify(v);
  return JSON.stringify(v);
}

function isEmpty(v) {
  return v && typeof v === 'object' && Object.keys(v).length === 0;
}

function emit(v, indent, lines, prefix) {
  const pad = '  '.repeat(indent);
  if (Array.isArray(v)) {
    for (const item of v) {
      if (item && typeof item === 'object' && !isEmpty(item)) {
        const sub = [];
        emit(item, indent + 1, sub, '');
        sub[0] = `${pad}- ${sub[0].trimStart()}`;
        lines.push(...sub);
      } else lines.push(`${pad}- ${isEmpty(item) ? (Array.isArray(item) ? '[]' : '{}') : scalar(item)}`);
    }
    return;
  }
  for (const [k, item] of Object.entries(v)) {
    const key = PLAIN.test(k) ? k : JSON.stringify(k);
    if (item && typeof item === 'object' && !isEmpty(item)) {
      lines.push(`${pad}${key}:`);
      emit(item, Array.isArray(item) ? indent : indent + 1, lines, prefix);
    } else {
      lines.push(`${pad}${key}: ${isEmpty(item) ? (Array.isArray(item) ? '[]' : '{}') : scalar(item)}`);
    }
  }
}

export function toYaml(value) {
  const lines = [];
  emit(value, 0, lines, '');
  return `${lines.join('\n')}\n`;
}
