// The console's only way to the server: the public /v1 API, with the key the user
// pasted. The key stays in sessionStorage (this tab, until it is closed or the user
// signs out); nothing is sent anywhere else.

const KEY = 'flowline.key';
const SCOPES = 'flowline.scopes';

export class ApiError extends Error {
  constructor(status, body) {
    const error = (body && body.error) || {};
    super(error.message || `HTTP ${status}`);
    this.status = status;
    this.code = error.code || 'http_error';
    this.details = error.details || [];
  }
}

export const session = {
  key: () => sessionStorage.getItem(KEY),
  scopes: () => JSON.parse(sessionStorage.getItem(SCOPES) || '[]'),
  can: (scope) => session.scopes().includes(scope),
  save(key, scopes) {
    sessionStorage.setItem(KEY, key);
    sessionStorage.setItem(SCOPES, JSON.stringify(scopes));
  },
  clear() {
    sessionStorage.removeItem(KEY);
    sessionStorage.removeItem(SCOPES);
  },
};

/** Calls /v1<path>; resolves to the JSON body (null for 204), rejects with ApiError. */
export async function call(method, path, { body, query, key, headers } = {}) {
  const url = new URL(`/v1${path}`, location.origin);
  for (const [k, v] of Object.entries(query || {})) {
    if (v !== undefined && v !== null && v !== '') url.searchParams.set(k, v);
  }
  const init = {
    method,
    headers: { Authorization: `Bearer ${key || session.key()}`, Accept: 'application/json', ...headers },
    cache: 'no-store',
  };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(url, init);
  } catch (e) {
    throw new ApiError(0, { error: { code: 'network_error', message: `The API is unreachable (${e.message})` } });
  }
  const text = await res.text();
  let parsed = null;
  try { parsed = text ? JSON.parse(text) : null; } catch { parsed = null; }
  if (!res.ok) {
    const err = new ApiError(res.status, parsed);
    err.retryAfter = Number(res.headers.get('Retry-After')) || null;
    // A revoked or expired key: back to the sign-in page (unless this was the probe).
    if (res.status === 401 && !key) window.dispatchEvent(new CustomEvent('flowline:unauthenticated'));
    throw err;
  }
  return parsed;
}

export const get = (path, query) => call('GET', path, { query });
export const post = (path, body, opts = {}) => call('POST', path, { body, ...opts });
export const patch = (path, body) => call('PATCH', path, { body });
export const del = (path) => call('DELETE', path);

/**
 * The scopes of a key, as `GET /v1/me` says them (admin includes every other scope;
 * every valid key can read). A key the API refuses throws, as any call does.
 */
export async function probeScopes(key) {
  const me = await call('GET', '/me', { key });
  const has = (scope) => me.scopes.includes(scope) || me.scopes.includes('admin');
  const scopes = ['read'];
  if (has('write')) scopes.push('write');
  if (has('execute')) scopes.push('execute');
  if (has('admin')) scopes.push('admin');
  return scopes;
}

/** Every page of a list, following next_cursor (for pickers; lists page in the UI). */
export async function listAll(path, query = {}, max = 500) {
  const items = [];
  let cursor;
  do {
    const page = await get(path, { ...query, limit: 100, cursor });
    items.push(...page.data);
    cursor = page.next_cursor;
  } while (cursor && items.length < max);
  return items;
}
