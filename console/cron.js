// Preview of a schedule: the next times a 5-field cron expression fires, on the wall
// clock of its IANA timezone. The server (croner) decides when runs start and
// validates the expression; this is a guide while typing, checked against it by the
// API's validation errors when the workflow is saved.

const FIELDS = [
  { name: 'minute', min: 0, max: 59 },
  { name: 'hour', min: 0, max: 23 },
  { name: 'day of month', min: 1, max: 31 },
  { name: 'month', min: 1, max: 12, names: ['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec'], base: 1 },
  { name: 'day of week', min: 0, max: 7, names: ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'], base: 0 },
];

const ALIASES = {
  '@yearly': '0 0 1 1 *', '@annually': '0 0 1 1 *', '@monthly': '0 0 1 * *',
  '@weekly': '0 0 * * 0', '@daily': '0 0 * * *', '@midnight': '0 0 * * *', '@hourly': '0 * * * *',
};

function value(text, field) {
  const lower = text.toLowerCase();
  const named = field.names ? field.names.indexOf(lower) : -1;
  if (named >= 0) return named + field.base;
  if (!/^\d+$/.test(text)) throw new Error(`${field.name}: "${text}" is not a number`);
  const n = Number(text);
  if (n < field.min || n > field.max) throw new Error(`${field.name}: ${n} is outside ${field.min}-${field.max}`);
  return n;
}

function parseField(text, field) {
  const set = new Set();
  for (const part of text.split(',')) {
    const [range, stepText] = part.split('/');
    const step = stepText === undefined ? 1 : Number(stepText);
    if (!Number.isInteger(step) || step < 1) throw new Error(`${field.name}: bad step "${stepText}"`);
    let lo; let hi;
    if (range === '*') { lo = field.min; hi = field.max; } else if (range.includes('-')) {
      const [a, b] = range.split('-');
      lo = value(a, field); hi = value(b, field);
      if (lo > hi) throw new Error(`${field.name}: range ${range} runs backwards`);
    } else {
      lo = value(range, field);
      hi = stepText === undefined ? lo : field.max;
    }
    for (let n = lo; n <= hi; n += step) set.add(field.name === 'day of week' ? n % 7 : n);
  }
  return set;
}

/** Parses "m h dom mon dow" (or an @alias); throws an Error naming the bad field. */
export function parse(expression) {
  const text = ALIASES[expression.trim().toLowerCase()] || expression.trim();
  const parts = text.split(/\s+/);
  if (parts.length !== 5) throw new Error(`expected 5 fields (minute hour day-of-month month day-of-week), got ${parts.length}`);
  const [minute, hour, dom, month, dow] = parts.map((p, i) => parseField(p, FIELDS[i]));
  return { minute, hour, dom, month, dow, anyDom: parts[2] === '*', anyDow: parts[4] === '*' };
}

/** Wall-clock fields of `date` in `timeZone`, as a UTC-based naive Date. */
function wallClock(date, timeZone) {
  const parts = Object.fromEntries(new Intl.DateTimeFormat('en-US', {
    timeZone, hourCycle: 'h23', year: 'numeric', month: '2-digit', day: '2-digit', hour: '2-digit', minute: '2-digit',
  }).formatToParts(date).map((p) => [p.type, p.value]));
  return new Date(Date.UTC(+parts.year, +parts.month - 1, +parts.day, +parts.hour % 24, +parts.minute));
}

function dayMatches(c, d) {
  const dom = c.dom.has(d.getUTCDate());
  const dow = c.dow.has(d.getUTCDay());
  // Standard cron: when both day fields are restricted, either may match.
  if (!c.anyDom && !c.anyDow) return dom || dow;
  return dom && dow;
}

/**
 * The next `count` fire times after `from`, as wall-clock strings in `timeZone`
 * ("Mon, 24 Nov 2026, 09:00"). Searches at most four years ahead.
 */
export function nextTimes(expression, timeZone = 'UTC', count = 5, from = new Date()) {
  const c = parse(expression);
  new Intl.DateTimeFormat('en-US', { timeZone }); // throws RangeError for an unknown zone
  const out = [];
  const t = wallClock(from, timeZone);
  t.setUTCMinutes(t.getUTCMinutes() + 1);
  const limit = t.getTime() + 4 * 366 * 86400000;
  while (out.length < count && t.getTime() < limit) {
    if (!c.month.has(t.getUTCMonth() + 1)) {
      t.setUTCMonth(t.getUTCMonth() + 1, 1); t.setUTCHours(0, 0);
    } else if (!dayMatches(c, t)) {
      t.setUTCDate(t.getUTCDate() + 1); t.setUTCHours(0, 0);
    } else if (!c.hour.has(t.getUTCHours())) {
      t.setUTCHours(t.getUTCHours() + 1, 0);
    } else if (!c.minute.has(t.getUTCMinutes())) {
      t.setUTCMinutes(t.getUTCMinutes() + 1);
    } else {
      out.push(t.toLocaleString('en-GB', {
        timeZone: 'UTC', weekday: 'short', day: 'numeric', month: 'short', year: 'numeric', hour: '2-digit', minute: '2-digit',
      }));
      t.setUTCMinutes(t.getUTCMinutes() + 1);
    }
  }
  return out;
}

/** A sentence for the common shapes; null when the list of times says it better. */
export function describe(expression) {
  const text = (ALIASES[expression.trim().toLowerCase()] || expression.trim()).split(/\s+/);
  if (text.length !== 5) return null;
  const [m, hr, dom, mon, dow] = text;
  const rest = dom === '*' && mon === '*' && dow === '*';
  if (rest && hr === '*' && m === '*') return 'Every minute';
  if (rest && hr === '*' && /^\*\/\d+$/.test(m)) return `Every ${m.slice(2)} minutes`;
  if (rest && hr === '*' && /^\d+$/.test(m)) return `Every hour at minute ${m}`;
  if (rest && /^\d+$/.test(hr) && /^\d+$/.test(m)) return `Every day at ${hr.padStart(2, '0')}:${m.padStart(2, '0')}`;
  return null;
}
