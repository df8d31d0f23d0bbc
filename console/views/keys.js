// API keys (admin scope): create with a name and scopes (the value shown once), list,
// revoke. Keys never leave the server again after creation: only their names.

import { post, del, session, listAll } from '../api.js';
import { h, fill, time, pageTitle, errorText, toast, secretOnce, checkboxes, createShownOnce } from '../dom.js';

const SCOPES = [
  ['read', 'read workflows, runs and webhooks'],
  ['write', 'create, change and delete workflows and webhooks (includes read)'],
  ['execute', 'start, cancel and retry runs (includes read)'],
  ['admin', 'everything, including API keys'],
];

export async function render(main) {
  if (!session.can('admin')) {
    fill(main, pageTitle('API keys'), h('p.notice', {}, 'Managing API keys needs a key with the admin scope.'));
    return;
  }
  const once = h('div', { id: 'once' });
  // The key whose value `once` shows: revoking it takes the value off the screen.
  let shown = null;
  const list = h('div');
  const name = h('input', { id: 'key-name', 'data-field': 'name', required: true, placeholder: 'ci-deploy' });
  const scopes = checkboxes('scopes', SCOPES.map(([s, help]) => [s, [h('span', {}, s), h('span.muted', {}, ` — ${help}`)]]), (s) => s === 'read');
  const error = h('p.error', { role: 'alert', id: 'key-error' });
  const refresh = async () => {
    let keys;
    try { keys = await listAll('/api-keys'); } catch (e) { return void fill(list, h('p.error', { role: 'alert' }, errorText(e))); }
    fill(list, h('table.list', { id: 'api-keys' },
      h('caption.sr-only', {}, 'API keys'),
      h('thead', {}, h('tr', {}, ['Name', 'Id', 'Scopes', 'Created', ''].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, keys.map((k) => h('tr', { dataset: { id: k.id, name: k.name } },
        h('td', { 'data-label': 'Name' }, k.name),
        h('td.mono', { 'data-label': 'Id' }, k.id),
        h('td', { 'data-label': 'Scopes' }, k.scopes.join(', ')),
        h('td', { 'data-label': 'Created' }, time(k.created_at)),
        h('td', {}, h('button.link.danger', {
          type: 'button', 'aria-label': `Revoke key ${k.name}`,
          onclick: async () => {
            if (!confirm(`Revoke the key "${k.name}"? Clients using it are refused within seconds.`)) return;
            try {
              await del(`/api-keys/${k.id}`);
              if (shown === k.id) { fill(once); shown = null; }
              toast(`Key ${k.name} revoked`);
              await refresh();
            } catch (e) { toast(errorText(e), 'error'); }
          },
        }, 'Revoke')))))));
  };
  fill(main,
    pageTitle('API keys'),
    once,
    h('form.card', {
      id: 'key-form',
      onsubmit: async (e) => {
        e.preventDefault();
        await createShownOnce({
          error, once,
          create: () => post('/api-keys', { name: name.value.trim(), scopes: scopes.values() }),
          reveal: (created) => {
            shown = created.id;
            return secretOnce(`API key ${created.name}`, created.key, 'The key value is shown only this once: copy it now. Flowline keeps only its hash.');
          },
          done: async () => { name.value = ''; toast('Key created'); await refresh(); },
        });
      },
    },
    h('h2', {}, 'New API key'),
    h('div.field', {}, h('label', { for: 'key-name' }, 'Name'), name),
    h('fieldset', {}, h('legend', {}, 'Scopes'), scopes.element),
    error,
    h('button.primary', { type: 'submit', id: 'create-key' }, 'Create key')),
    list);
  await refresh();
}
