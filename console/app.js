// Entry point: the sign-in gate, the navigation and a small router over the
// History API. Each view module exports `render(main, params)` and may return a
// function that stops what it started (polling) when the user navigates away.

import { session, probeScopes } from './api.js';
import { h, fill, toast, errorText } from './dom.js';

const routes = [
  [/^\/workflows\/?$/, () => import('./views/workflows.js')],
  [/^\/workflows\/new$/, () => import('./views/builder.js')],
  [/^\/workflows\/([^/]+)\/runs$/, () => import('./views/runs.js'), 'workflowId'],
  [/^\/workflows\/([^/]+)$/, () => import('./views/builder.js'), 'workflowId'],
  [/^\/runs\/?$/, () => import('./views/runs.js')],
  [/^\/runs\/([^/]+)$/, () => import('./views/run.js'), 'runId'],
  [/^\/webhooks\/?$/, () => import('./views/webhooks.js')],
  [/^\/webhooks\/([^/]+)$/, () => import('./views/webhooks.js'), 'webhookId'],
  [/^\/api-keys\/?$/, () => import('./views/keys.js')],
  [/^\/events\/?$/, () => import('./views/events.js')],
  [/^\/events\/([^/]+)$/, () => import('./views/events.js'), 'eventId'],
];

const main = document.getElementById('main');
let stop = null;
let generation = 0;
// What the current view says before the user leaves it: a question to confirm, or
// null when nothing would be lost (see `guardLeaving`).
let leaving = null;
let here = location.pathname + location.search;

/** `check()` returns the question to ask before leaving this view, or null. */
export function guardLeaving(check) {
  leaving = check;
}

function mayLeave() {
  const question = leaving && leaving();
  return !question || confirm(question);
}

export function navigate(path, { replace = false } = {}) {
  if (!mayLeave()) return;
  if (replace) history.replaceState(null, '', path);
  else history.pushState(null, '', path);
  render();
}

async function render() {
  const mine = ++generation;
  if (stop) { stop(); stop = null; }
  leaving = null;
  here = location.pathname + location.search;
  shell();
  if (!session.key()) return signIn();
  if (location.pathname === '/') return navigate('/workflows', { replace: true });
  const route = routes.find(([re]) => re.test(location.pathname));
  if (!route) return fill(main, h('h1', { tabindex: '-1' }, 'Not found'), h('p', {}, 'No such page.'));
  const [re, load, param] = route;
  const match = location.pathname.match(re);
  const params = Object.fromEntries(new URLSearchParams(location.search));
  if (param) params[param] = decodeURIComponent(match[1]);
  try {
    const view = await load();
    if (mine !== generation) return;
    const cleanup = await view.render(main, params);
    if (mine !== generation) { if (cleanup) cleanup(); return; }
    stop = cleanup || null;
    const heading = main.querySelector('h1');
    if (heading && document.activeElement === document.body) heading.focus({ preventScroll: true });
  } catch (e) {
    if (mine !== generation) return;
    fill(main, h('h1', { tabindex: '-1' }, 'Something went wrong'), h('p.error', { role: 'alert' }, errorText(e)));
  }
}

/** Navigation and session bar, with links hidden when the key lacks their scope. */
function shell() {
  const signedIn = Boolean(session.key());
  document.getElementById('nav').hidden = !signedIn;
  document.getElementById('session').hidden = !signedIn;
  document.getElementById('scopes').textContent = signedIn ? `Key scopes: ${session.scopes().join(', ')}` : '';
  for (const el of document.querySelectorAll('[data-needs]')) el.hidden = !session.can(el.dataset.needs);
  for (const a of document.querySelectorAll('#nav a')) {
    const current = location.pathname.startsWith(a.getAttribute('href'));
    if (current) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
}

function signIn() {
  document.title = 'Sign in · Flowline';
  const input = h('input.mono', {
    id: 'api-key', name: 'api-key', type: 'password', autocomplete: 'off', required: true,
    placeholder: 'flk_…', 'aria-describedby': 'api-key-help',
  });
  const error = h('p.error', { id: 'sign-in-error', role: 'alert' });
  const button = h('button.primary', { type: 'submit' }, 'Sign in');
  const form = h('form.card.narrow', {
    onsubmit: async (event) => {
      event.preventDefault();
      const key = input.value.trim();
      button.disabled = true;
      error.textContent = '';
      try {
        const scopes = await probeScopes(key);
        session.save(key, scopes);
        toast('Signed in');
        render();
      } catch (e) {
        error.textContent = e.status === 401 ? 'That key is not valid (unknown or revoked).' : errorText(e);
        input.setAttribute('aria-invalid', 'true');
        button.disabled = false;
        input.focus();
      }
    },
  },
  h('h1', { tabindex: '-1' }, 'Sign in to Flowline'),
  h('label', { for: 'api-key' }, 'API key'),
  input,
  h('p.muted', { id: 'api-key-help' },
    'Paste a key of your account (', h('code', {}, 'flowline api-key create'), ', or API keys in this console). ' +
    'It is kept in this browser tab only, until you sign out or close the tab.'),
  error,
  button);
  fill(main, form);
  input.focus();
}

function signOut(message) {
  session.clear();
  toast(message);
  navigate('/workflows');
}

document.getElementById('sign-out').addEventListener('click', () => signOut('Signed out: the key was removed from this tab'));
window.addEventListener('flowline:unauthenticated', () => signOut('The key is no longer valid: sign in again'));
window.addEventListener('popstate', () => {
  // Back or forward: asked like a link; kept here (the address put back) when refused.
  if (!mayLeave()) { history.pushState(null, '', here); return; }
  leaving = null;
  render();
});
window.addEventListener('beforeunload', (event) => {
  if (leaving && leaving()) event.preventDefault();
});
document.addEventListener('click', (event) => {
  const a = event.target.closest('a[data-link]');
  if (!a || event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0) return;
  event.preventDefault();
  navigate(a.getAttribute('href'));
});
render();
