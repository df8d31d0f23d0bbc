// Small DOM helpers shared by every view: element building (no innerHTML, so API
// data is never parsed as markup), toasts, times, copy and download.

/** h('button.primary', {onclick, type: 'button'}, 'Save') → element. */
export function h(tag, attrs, ...children) {
  const [name, ...classes] = tag.split('.');
  const el = document.createElement(name || 'div');
  if (classes.length) el.className = classes.join(' ');
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
    else if (key === 'dataset') Object.assign(el.dataset, value);
    else if (key === 'value') el.value = value;
    else if (value === true) el.setAttribute(key, '');
    else el.setAttribute(key, String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replaces an element's children. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** A link handled by the client-side router. */
export function link(href, ...children) {
  return h('a', { href, 'data-link': true }, ...children);
}

let toastId = 0;
/** A short message in the polite live region; errors stay until dismissed. */
export function toast(message, kind = 'info') {
  const box = document.getElementById('toasts');
  const id = `toast-${++toastId}`;
  const item = h(`div.toast.${kind}`, { id },
    h('span', {}, message),
    h('button.link', { type: 'button', 'aria-label': 'Dismiss', onclick: () => item.remove() }, '×'));
  box.append(item);
  if (kind !== 'error') setTimeout(() => item.remove(), 5000);
}

/** "2026-11-23 14:05:09" in the browser's zone, with the ISO time as a tooltip. */
export function time(iso) {
  if (!iso) return h('span.muted', {}, '—');
  const d = new Date(iso);
  const pad = (n) => String(n).padStart(2, '0');
  const text = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  return h('time', { datetime: iso, title: iso }, text);
}

export function duration(ms) {
  if (ms === null || ms === undefined) return '—';
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
}

export function badge(status) {
  return h(`span.badge.s-${status}`, {}, status);
}

export async function copy(text) {
  try {
    await navigator.clipboard.writeText(text);
    toast('Copied to the clipboard');
  } catch {
    toast('The browser refused the clipboard: select the text and copy it', 'error');
  }
}

export function download(filename, text, type = 'application/yaml') {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = h('a', { href: url, download: filename });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

/** A value shown once (a key or a secret): read-only field, copy button, warning. */
export function secretOnce(label, value, note) {
  const input = h('input.mono', { type: 'text', readonly: true, value, 'aria-label': label, 'data-secret': true });
  return h('div.once', { role: 'group', 'aria-label': label },
    h('strong', {}, label),
    h('p', {}, note || 'Shown only this once: copy it now.'),
    h('div.row', {}, input, h('button.secondary', { type: 'button', onclick: () => copy(value) }, 'Copy')));
}

/**
 * Creates something whose secret the API returns once (a key, a webhook): `create()`
 * posts, `reveal(created)` draws the secret into `once` (focused), `done(created)`
 * refreshes the page. A refusal goes to `error`; resolves to it (or null).
 */
export async function createShownOnce({ error, once, create, reveal, done }) {
  error.textContent = '';
  try {
    const created = await create();
    fill(once, reveal(created));
    await done(created);
    once.querySelector('input').focus();
    return null;
  } catch (err) {
    error.textContent = errorText(err);
    return err;
  }
}

/** Pretty JSON in a <pre> (a Tab stop only when it scrolls: see `scrollStop`). */
export function json(value) {
  return scrollStop(h('pre.json', {}, JSON.stringify(value, null, 2)));
}

/**
 * Makes `box` (an output that may scroll) a Tab stop only while its content overflows
 * it, so that the keyboard can scroll a long one and a short one adds no stop. Checked
 * when its size changes (drawn, shown, the window resized) and when its content does.
 */
export function scrollStop(box) {
  const check = () => {
    const overflows = box.scrollHeight > box.clientHeight || box.scrollWidth > box.clientWidth;
    if (overflows) box.setAttribute('tabindex', '0');
    else box.removeAttribute('tabindex');
  };
  // Views draw their boxes afresh: once one has left the page, it is let go.
  let shown = false;
  const sized = new ResizeObserver(() => {
    if (box.isConnected) { shown = true; check(); } else if (shown) sized.disconnect();
  });
  sized.observe(box);
  new MutationObserver(check).observe(box, { childList: true, characterData: true, subtree: true });
  return box;
}

/** A heading that receives focus after navigation (screen readers announce the page). */
export function pageTitle(text, ...extra) {
  document.title = `${text} · Flowline`;
  return h('div.page-head', {}, h('h1', { tabindex: '-1' }, text), ...extra);
}

/** An error from the API as text: its validation details, or its message and code. */
export function errorText(err) {
  if (err && err.details && err.details.length) return err.details.map((d) => `${d.field} ${d.message}`).join('; ');
  return err && err.code ? `${err.message} (${err.code})` : String(err && err.message || err);
}

/**
 * A group of checkboxes, one per [value, label] (label may be an array of nodes).
 * Returns { element, values() } with the checked values in order.
 */
export function checkboxes(name, options, isChecked) {
  const inputs = options.map(([value]) => h('input', { type: 'checkbox', name, value, checked: isChecked(value) }));
  const element = h('div.checks', {}, options.map(([, label], i) => h('label.check', {}, inputs[i], label)));
  return { element, values: () => inputs.filter((i) => i.checked).map((i) => i.value) };
}
