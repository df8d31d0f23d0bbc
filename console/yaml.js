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
    out[key] = camel(v, inWith || k === 'with' || k === 'output');
  }
  return out;
}

/** The manifest object of a workflow view (GET /v1/workflows/{id}). */
export function manifest(wf) {
  const spec = camel({
    name: wf.name, description: wf.description, state: wf.state, trigger: wf.trigger,
    executor: wf.executor, timeout_ms: wf.timeout_ms, concurrency: wf.concurrency, rate_limit: wf.rate_limit,
    debounce: wf.debounce, parallelism: wf.parallelism, priority: wf.priority, cancel_on: wf.cancel_on,
    steps: (wf.steps || []).map((s) => ({ ...s, with: s.with && Object.keys(s.with).length ? s.with : null })),
    output: wf.output,
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

// Reading YAML back: the block and flow forms manifests use (mappings, sequences,
// plain, quoted and block scalars, comments); anchors, tags and several documents are
// refused with the line that holds them.

/** The API's fields of a Workflow manifest: `spec` with snake_case keys (not in `with` or `output`). */
export function fromManifest(doc) {
  if (!doc || typeof doc !== 'object' || Array.isArray(doc)) throw new Error('the manifest is not a mapping');
  if (doc.kind !== undefined && doc.kind !== 'Workflow') throw new Error(`its kind is ${doc.kind}, not Workflow`);
  if (!doc.spec || typeof doc.spec !== 'object' || Array.isArray(doc.spec)) throw new Error('the manifest has no spec');
  const snake = (v, raw) => {
    if (Array.isArray(v)) return v.map((x) => snake(x, raw));
    if (!v || typeof v !== 'object') return v;
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [
      raw ? k : k.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`), snake(x, raw || k === 'with' || k === 'output')]));
  };
  return snake(doc.spec, false);
}

const fail = (line, message) => { throw new Error(`line ${line.n}: ${message}`); };

function stripComment(text) {
  let quote = null;
  for (let i = 0; i < text.length; i += 1) {
    const c = text[i];
    if (quote) {
      if (c === '\\' && quote === '"') i += 1;
      else if (c === quote) quote = null;
    } else if (c === '"' || c === "'") {
      if (i === 0 || /[\s[{,:-]/.test(text[i - 1])) quote = c;
    } else if (c === '#' && (i === 0 || /\s/.test(text[i - 1]))) return text.slice(0, i);
  }
  return text;
}

/** Where a `key: value` line's colon is (outside quotes), or -1. */
function colonAt(text) {
  let i = 0;
  if (text[0] === '"' || text[0] === "'") {
    const q = text[0];
    for (i = 1; i < text.length && text[i] !== q; i += 1) if (q === '"' && text[i] === '\\') i += 1;
    i += 1;
  }
  for (; i < text.length; i += 1) {
    if (text[i] === ':' && (i + 1 === text.length || text[i + 1] === ' ')) return i;
    if (i === 0 && (text[0] === '[' || text[0] === '{')) return -1;
  }
  return -1;
}

function plain(text) {
  if (/^(null|Null|NULL|~)?$/.test(text)) return null;
  if (/^(true|True|TRUE)$/.test(text)) return true;
  if (/^(false|False|FALSE)$/.test(text)) return false;
  if (/^[-+]?\d+$/.test(text)) return Number(text);
  if (/^[-+]?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?$/.test(text)) return Number(text);
  return text;
}

function quoted(text, line) {
  if (text[0] === '"') {
    try { return JSON.parse(text); } catch { return fail(line, `a double-quoted string does not end, or has an escape JSON does not know: ${text}`); }
  }
  if (!/^'([^']|'')*'$/.test(text)) fail(line, `a single-quoted string does not end: ${text}`);
  return text.slice(1, -1).replace(/''/g, "'");
}

/** A value written on one line: a flow collection, a quoted or a plain scalar. */
function inline(text, line) {
  if (/^[&*!]/.test(text)) fail(line, 'anchors, aliases and tags are not supported');
  if (text[0] === '[' || text[0] === '{') {
    let at = 0;
    const ws = () => { while (text[at] === ' ') at += 1; };
    const value = (inFlow) => {
      ws();
      if (text[at] === '[' || text[at] === '{') {
        const close = text[at] === '[' ? ']' : '}';
        const map = close === '}';
        at += 1;
        const out = map ? {} : [];
        ws();
        while (text[at] !== close) {
          if (at >= text.length) fail(line, `a flow collection must end on its line (${close} missing)`);
          if (map) {
            const key = value(true);
            ws();
            if (text[at] !== ':') fail(line, `":" expected after the key ${JSON.stringify(key)}`);
            at += 1;
            out[String(key)] = value(true);
          } else out.push(value(true));
          ws();
          if (text[at] === ',') { at += 1; ws(); } else if (text[at] !== close) fail(line, `"," or "${close}" expected at column ${at + 1}`);
        }
        at += 1;
        return out;
      }
      if (text[at] === '"' || text[at] === "'") {
        const q = text[at];
        let end = at + 1;
        for (; end < text.length; end += 1) {
          if (q === '"' && text[end] === '\\') end += 1;
          else if (text[end] === q) { if (q === "'" && text[end + 1] === "'") end += 1; else break; }
        }
        const s = quoted(text.slice(at, end + 1), line);
        at = end + 1;
        return s;
      }
      const start = at;
      while (at < text.length && !(inFlow && /[,\]}]/.test(text[at])) && !(text[at] === ':' && /[\s,\]}]|^$/.test(text[at + 1] || ''))) at += 1;
      return plain(text.slice(start, at).trim());
    };
    const v = value(false);
    ws();
    if (at < text.length) fail(line, `unexpected text after the flow collection: ${text.slice(at)}`);
    return v;
  }
  if (text[0] === '"' || text[0] === "'") return quoted(text, line);
  return plain(text);
}

export function parseYaml(source) {
  const lines = [];
  source.split(/\r?\n/).forEach((raw, i) => {
    const n = i + 1;
    if (/^(---|\.\.\.)(\s|$)/.test(raw)) {
      if (lines.some((l) => l.text)) fail({ n }, 'only one document is supported');
      return;
    }
    const indent = raw.match(/^ */)[0].length;
    if (raw[indent] === '\t') fail({ n }, 'indent with spaces, not tabs');
    lines.push({ n, raw, indent, text: stripComment(raw.slice(indent)).trimEnd() });
  });
  let i = 0;
  const skip = () => { while (i < lines.length && !lines[i].text) i += 1; };
  const isItem = (text) => /^-( |$)/.test(text);

  function block(indent) {
    skip();
    const line = lines[i];
    if (isItem(line.text)) return sequence(line.indent);
    if (colonAt(line.text) > 0) return mapping(line.indent);
    i += 1;
    return inline(line.text, line);
  }

  /** The value after `key:` or `-` with nothing else on the line. */
  function nested(parent, allowSameIndentSequence) {
    const at = i;
    skip();
    const next = lines[i];
    if (next && (next.indent > parent || (allowSameIndentSequence && next.indent === parent && isItem(next.text)))) return block(next.indent);
    i = at;
    return null;
  }

  function scalarBlock(header, parent, line) {
    const [, style, chomp] = header.match(/^([|>])([-+]?)$/) || fail(line, `unsupported block scalar header ${header}`);
    const body = [];
    let indent = null;
    while (i < lines.length) {
      const l = lines[i];
      const blank = !l.raw.trim();
      if (!blank && l.indent <= parent) break;
      if (!blank && indent === null) indent = l.indent;
      body.push(blank ? '' : l.raw.slice(indent));
      i += 1;
    }
    let end = body.length;
    while (end > 0 && body[end - 1] === '') end -= 1;
    const kept = body.slice(0, end);
    let text = style === '|' ? kept.join('\n')
      : kept.reduce((acc, l, k) => (k === 0 ? l : acc + (l === '' ? '\n' : (kept[k - 1] === '' ? '' : ' ')) + l), '');
    if (chomp === '+') text += '\n'.repeat(body.length - end + 1);
    else if (chomp !== '-' && kept.length) text += '\n';
    return text;
  }

  function value(rest, parent, line, sameIndentSequence) {
    if (rest === '') return nested(parent, sameIndentSequence);
    if (/^[|>][-+]?$/.test(rest)) return scalarBlock(rest, parent, line);
    return inline(rest, line);
  }

  function mapping(indent) {
    const out = {};
    for (skip(); i < lines.length; skip()) {
      const line = lines[i];
      if (line.indent < indent) break;
      if (line.indent > indent) fail(line, 'this line is indented more than the mapping it is in');
      if (isItem(line.text)) break;
      const at = colonAt(line.text);
      if (at <= 0) fail(line, `"key: value" expected, found ${line.text}`);
      const rawKey = line.text.slice(0, at).trim();
      const key = rawKey[0] === '"' || rawKey[0] === "'" ? quoted(rawKey, line) : rawKey;
      if (Object.prototype.hasOwnProperty.call(out, key)) fail(line, `the key ${key} is given twice`);
      i += 1;
      out[key] = value(line.text.slice(at + 1).trim(), indent, line, true);
    }
    return out;
  }

  function sequence(indent) {
    const out = [];
    for (skip(); i < lines.length; skip()) {
      const line = lines[i];
      if (line.indent !== indent || !isItem(line.text)) {
        if (line.indent > indent) fail(line, 'this line is indented more than the list it is in');
        break;
      }
      const rest = line.text.slice(1).trimStart();
      if (rest && (isItem(rest) || colonAt(rest) > 0)) {
        // "- key: value": a mapping (or a list) that starts on the item's line.
        lines[i] = { ...line, indent: indent + line.text.length - rest.length, text: rest };
        out.push(block(lines[i].indent));
      } else {
        i += 1;
        out.push(value(rest, indent, line, false));
      }
    }
    return out;
  }

  skip();
  if (i >= lines.length) throw new Error('the text is empty');
  const doc = block(lines[i].indent);
  skip();
  if (i < lines.length) fail(lines[i], 'unexpected text after the document');
  return doc;
}
