// Webhooks: create (the signing secret shown once), list, delete; one webhook's
// deliveries log with status codes and times, resend, rotate the secret.

import { get, post, del, session, listAll } from '../api.js';
import { h, fill, link, time, duration, pageTitle, errorText, toast, secretOnce, checkboxes, createShownOnce } from '../dom.js';
import { navigate } from '../app.js';

const EVENTS = ['run.started', 'run.succeeded', 'run.failed', 'run.cancelled', 'workflow.activated', 'workflow.paused'];

export async function render(main, params) {
  if (params.webhookId) return deliveries(main, params.webhookId);
  const once = h('div', { id: 'once' });
  const list = h('div', {}, h('p.muted', {}, 'Loading…'));
  fill(main,
    pageTitle('Webhooks'),
    h('p.help', {}, 'Flowline POSTs signed events to these URLs. Verify the X-Service-Signature (or Standard Webhooks) header with the secret shown at creation.'),
    once,
    session.can('write') ? await createForm(once, () => drawList(list)) : h('p.notice', {}, 'Creating and deleting webhooks needs the write scope.'),
    list);
  await drawList(list);
}

async function createForm(once, refresh) {
  let workflows = [];
  try { workflows = await listAll('/workflows'); } catch { workflows = []; }
  const url = h('input', { id: 'hook-url', type: 'url', 'data-field': 'url', required: true, placeholder: 'https://example.com/flowline', 'aria-describedby': 'hook-url-error' });
  const workflow = h('select', { id: 'hook-workflow', 'data-field': 'workflow_id' },
    h('option', { value: '' }, 'all workflows of the account'),
    workflows.map((w) => h('option', { value: w.id }, `${w.name} (${w.id})`)));
  const events = checkboxes('events', EVENTS.map((e) => [e, e]), (e) => e.startsWith('run.') && e !== 'run.started');
  const error = h('p.error', { id: 'hook-error', role: 'alert' });
  // A refused URL is said under the URL field, not under the form.
  const urlError = h('p.field-error', { id: 'hook-url-error', role: 'alert' });
  return h('form.card', {
    id: 'webhook-form',
    onsubmit: async (e) => {
      e.preventDefault();
      urlError.textContent = '';
      url.removeAttribute('aria-invalid');
      const err = await createShownOnce({
        error, once,
        create: () => post('/webhooks', { url: url.value.trim(), events: events.values(), workflow_id: workflow.value || null }),
        reveal: (created) => secretOnce('Signing secret', created.secret, `Signing secret of ${created.url}: shown only this once. Copy it into the receiver now.`),
        done: async () => { url.value = ''; toast('Webhook created'); await refresh(); },
      });
      const onUrl = err?.details?.filter((d) => d.field === 'url') || [];
      if (onUrl.length) {
        urlError.textContent = onUrl.map((d) => d.message).join('; ');
        const rest = err.details.filter((d) => d.field !== 'url');
        error.textContent = rest.length ? errorText({ ...err, details: rest }) : '';
        url.setAttribute('aria-invalid', 'true');
        url.focus();
      }
    },
  },
  h('h2', {}, 'New webhook'),
  h('div.field', {}, h('label', { for: 'hook-url' }, 'URL'), url, urlError),
  h('fieldset', {}, h('legend', {}, 'Events'), events.element),
  h('div.field', {}, h('label', { for: 'hook-workflow' }, 'Workflow'), workflow),
  error,
  h('button.primary', { type: 'submit', id: 'create-webhook' }, 'Create webhook'));
}

async function drawList(list) {
  let hooks;
  try { hooks = await listAll('/webhooks'); } catch (e) { return void fill(list, h('p.error', { role: 'alert' }, errorText(e))); }
  if (!hooks.length) return void fill(list, h('p.empty', {}, 'No webhooks yet.'));
  fill(list, h('table.list', { id: 'webhooks' },
    h('caption.sr-only', {}, 'Webhooks'),
    h('thead', {}, h('tr', {}, ['URL', 'Events', 'Workflow', 'Enabled', 'Created', ''].map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', {}, hooks.map((w) => h('tr', { dataset: { id: w.id } },
      h('td', { 'data-label': 'URL' }, link(`/webhooks/${w.id}`, w.url)),
      h('td', { 'data-label': 'Events' }, w.events.join(', ')),
      h('td', { 'data-label': 'Workflow' }, w.workflow_id || 'all'),
      h('td', { 'data-label': 'Enabled' }, w.enabled ? 'yes' : 'disabled'),
      h('td', { 'data-label': 'Created' }, time(w.created_at)),
      h('td', {}, session.can('write') ? h('button.link.danger', {
        type: 'button', 'aria-label': `Delete webhook ${w.url}`,
        onclick: async () => {
          if (!confirm(`Delete the webhook to ${w.url}?`)) return;
          try { await del(`/webhooks/${w.id}`); toast('Webhook deleted'); await drawList(list); } catch (e) { toast(errorText(e), 'error'); }
        },
      }, 'Delete') : null))))));
}

async function deliveries(main, id) {
  const hook = await get(`/webhooks/${encodeURIComponent(id)}`);
  const once = h('div', { id: 'once' });
  const log = h('div', {}, h('p.muted', {}, 'Loading…'));
  const canWrite = session.can('write');
  const refresh = async () => {
    try {
      const page = await get(`/webhooks/${encodeURIComponent(id)}/deliveries`, { limit: 50 });
      if (!page.data.length) return void fill(log, h('p.empty', {}, 'No deliveries yet: events appear here once sent.'));
      fill(log, h('table.list', { id: 'deliveries' },
        h('caption.sr-only', {}, 'Delivery attempts, newest first'),
        h('thead', {}, h('tr', {}, ['Time', 'Event', 'Attempt', 'Result', 'Duration', ''].map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', {}, page.data.map((d) => h('tr', { dataset: { id: d.id } },
          h('td', { 'data-label': 'Time' }, time(d.attempted_at)),
          h('td', { 'data-label': 'Event' }, d.event, h('br'), h('span.mono.muted', {}, d.event_id)),
          h('td', { 'data-label': 'Attempt' }, String(d.attempt)),
          h('td', { 'data-label': 'Result', class: d.status_code >= 200 && d.status_code < 300 ? 'ok' : 'error' },
            d.status_code ? `HTTP ${d.status_code}` : (d.error || 'no response')),
          h('td', { 'data-label': 'Duration' }, duration(d.duration_ms)),
          h('td', {}, canWrite ? h('button.link', {
            type: 'button', 'aria-label': `Resend ${d.event} ${d.event_id}`,
            onclick: async () => {
              try { await post(`/webhooks/${id}/deliveries/${d.id}/retry`, {}); toast('Resend queued: the attempt appears here once made'); } catch (e) { toast(errorText(e), 'error'); }
            },
          }, 'Resend') : null))))));
    } catch (e) {
      fill(log, h('p.error', { role: 'alert' }, errorText(e)));
    }
  };
  fill(main,
    pageTitle('Webhook deliveries', h('div.row', {}, link('/webhooks', 'All webhooks'))),
    h('p', {}, h('strong', {}, hook.url), ` · ${hook.events.join(', ')} · ${hook.enabled ? 'enabled' : 'disabled'}`),
    once,
    h('div.row', {},
      h('button.secondary', { type: 'button', id: 'refresh-deliveries', onclick: refresh }, 'Refresh'),
      canWrite ? h('button.secondary', {
        type: 'button', id: 'rotate-secret',
        onclick: async () => {
          try {
            const r = await post(`/webhooks/${id}/rotate-secret`, {});
            fill(once, secretOnce('New signing secret', r.secret, `Shown only this once. Until ${r.previous_secret_expires_at} deliveries are signed with both the new and the previous secret.`));
          } catch (e) { toast(errorText(e), 'error'); }
        },
      }, 'Rotate secret') : null,
      canWrite ? h('button.danger', {
        type: 'button',
        onclick: async () => {
          if (!confirm(`Delete the webhook to ${hook.url}?`)) return;
          try { await del(`/webhooks/${id}`); toast('Webhook deleted'); navigate('/webhooks'); } catch (e) { toast(errorText(e), 'error'); }
        },
      }, 'Delete webhook') : null),
    log);
  await refresh();
}
