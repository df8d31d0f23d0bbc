// Events: the account's posted events (newest first, filtered by name, keyset paging)
// and one event with its payload and the runs it started, resumed and cancelled.

import { get } from '../api.js';
import { h, fill, link, time, json, pageTitle, errorText } from '../dom.js';
import { navigate } from '../app.js';

export async function render(main, params) {
  if (params.eventId) return detail(main, params.eventId);
  return list(main, params);
}

async function list(main, params) {
  const name = params.name || '';
  const cursor = params.cursor || '';
  const filter = h('input', { type: 'text', id: 'event-name-filter', value: name, placeholder: 'order.paid' });
  const form = h('form.toolbar', {
    onsubmit: (e) => {
      e.preventDefault();
      const n = filter.value.trim();
      navigate(`/events${n ? `?name=${encodeURIComponent(n)}` : ''}`);
    },
  }, h('label', { for: 'event-name-filter' }, 'Name'), filter, h('button.secondary', { type: 'submit' }, 'Filter'));
  const body = h('div', {}, h('p.muted', {}, 'Loading…'));
  fill(main,
    pageTitle('Events'),
    h('p.help', {}, 'Events posted to POST /v1/events: each starts a run of every active workflow subscribed to its name, completes waiting steps and cancels runs as their workflows say.'),
    form,
    body);
  let page;
  try {
    page = await get('/events', { name, cursor, limit: params.limit || 20 });
  } catch (e) {
    fill(body, h('p.error', { role: 'alert' }, errorText(e)));
    return;
  }
  if (!page.data.length) {
    fill(body, h('p.empty', {}, name ? `No events named ${name}.` : 'No events yet.'));
    return;
  }
  const rows = page.data.map((ev) => h('tr', { dataset: { id: ev.id } },
    h('td.mono', { 'data-label': 'Id' }, link(`/events/${encodeURIComponent(ev.id)}`, ev.id)),
    h('td', { 'data-label': 'Name' }, ev.name),
    h('td', { 'data-label': 'Received' }, time(ev.received_at)),
    h('td', { 'data-label': 'Runs' }, `${ev.runs.length} started · ${ev.resumed.length} resumed · ${ev.cancelled.length} cancelled`)));
  const query = new URLSearchParams();
  if (name) query.set('name', name);
  const first = `/events${query.toString() ? `?${query}` : ''}`;
  if (page.next_cursor) query.set('cursor', page.next_cursor);
  fill(body,
    h('table.list', { id: 'events' },
      h('caption.sr-only', {}, 'Events, newest first'),
      h('thead', {}, h('tr', {}, ['Id', 'Name', 'Received', 'Runs'].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, rows)),
    h('nav.pager', { 'aria-label': 'Pages' },
      cursor ? link(first, 'First page') : null,
      page.next_cursor ? link(`/events?${query}`, 'Next page') : null));
}

async function detail(main, id) {
  let ev;
  try {
    ev = await get(`/events/${encodeURIComponent(id)}`);
  } catch (e) {
    fill(main, pageTitle(`Event ${id}`), h('p.error', { role: 'alert' }, errorText(e)));
    return;
  }
  const runs = (title, ids, listId) => [
    h('h2', {}, `${title} (${ids.length})`),
    ids.length
      ? h('ul', { id: listId }, ids.map((r) => h('li', {}, link(`/runs/${encodeURIComponent(r)}`, r))))
      : h('p.muted', {}, 'None.'),
  ];
  fill(main,
    pageTitle(`Event ${ev.id}`),
    h('p', {}, link('/events', 'All events')),
    h('dl.summary', {},
      h('dt', {}, 'Name'), h('dd', { id: 'event-name' }, ev.name),
      h('dt', {}, 'Received'), h('dd', {}, time(ev.received_at)),
      h('dt', {}, 'Payload'), h('dd', {}, json(ev.payload))),
    runs('Runs started', ev.runs, 'event-runs'),
    runs('Runs resumed', ev.resumed, 'event-resumed'),
    runs('Runs cancelled', ev.cancelled, 'event-cancelled'));
}
