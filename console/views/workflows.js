// Workflows: list with state filter and keyset paging; "New workflow" opens the builder,
// and an account without workflows is offered starter templates.

import { get, session } from '../api.js';
import { h, fill, link, time, badge, pageTitle, errorText } from '../dom.js';
import { navigate } from '../app.js';
import { capabilities } from '../schema.js';
import { startersFor } from '../starters.js';

const STATES = ['', 'draft', 'active', 'paused'];

export async function render(main, params) {
  const state = STATES.includes(params.state) ? params.state : '';
  const cursor = params.cursor || '';
  const filter = h('select', {
    id: 'state-filter',
    onchange: () => navigate(`/workflows${filter.value ? `?state=${filter.value}` : ''}`),
  }, STATES.map((s) => h('option', { value: s, selected: s === state }, s || 'all states')));
  const actions = session.can('write')
    ? link('/workflows/new', 'New workflow')
    : h('p.muted', {}, 'This key can read only: creating workflows needs the write scope.');
  if (actions.tagName === 'A') actions.className = 'button primary';
  const body = h('div', {}, h('p.muted', {}, 'Loading…'));
  fill(main,
    pageTitle('Workflows', actions),
    h('div.toolbar', {}, h('label', { for: 'state-filter' }, 'State'), filter),
    body);

  let page;
  try {
    page = await get('/workflows', { state, cursor, limit: params.limit || 20 });
  } catch (e) {
    fill(body, h('p.error', { role: 'alert' }, errorText(e)));
    return;
  }
  if (!page.data.length) {
    // A first visit: a few workflows to start from, each opened in the builder.
    const starters = !state && !cursor && session.can('write') ? startersFor(await capabilities()) : [];
    fill(body, h('p.empty', {}, state ? `No ${state} workflows.` : 'No workflows yet.'),
      starters.length ? h('section', { 'aria-labelledby': 'starters-title', id: 'starters' },
        h('h2', { id: 'starters-title' }, 'Start from a template'),
        h('p.help', {}, 'Each opens in the builder, ready to run without a payload: change what you like, then create it.'),
        h('ul.starters', {}, starters.map((t) => h('li.card', { dataset: { template: t.key } },
          h('h3', {}, t.title),
          h('p', {}, t.text),
          h('a.button.secondary', { href: `/workflows/new?template=${t.key}`, 'data-link': true, 'aria-label': `Use this template: ${t.title}` }, 'Use this template'))))) : null);
    return;
  }
  const rows = page.data.map((wf) => h('tr', { dataset: { id: wf.id } },
    h('td', { 'data-label': 'Name' }, link(`/workflows/${encodeURIComponent(wf.id)}`, wf.name)),
    h('td.mono', { 'data-label': 'Id' }, wf.id),
    h('td', { 'data-label': 'State' }, badge(wf.state)),
    h('td', { 'data-label': 'Updated' }, time(wf.updated_at)),
    h('td', { 'data-label': 'Runs' }, link(`/workflows/${encodeURIComponent(wf.id)}/runs`, 'Runs'))));
  const query = new URLSearchParams();
  if (state) query.set('state', state);
  if (params.limit) query.set('limit', params.limit);
  const first = `/workflows${query.toString() ? `?${query}` : ''}`;
  if (page.next_cursor) query.set('cursor', page.next_cursor);
  fill(body,
    h('table.list', { id: 'workflows' },
      h('caption.sr-only', {}, 'Workflows, newest first'),
      h('thead', {}, h('tr', {}, ['Name', 'Id', 'State', 'Updated', ''].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, rows)),
    h('nav.pager', { 'aria-label': 'Pages' },
      cursor ? link(first, 'First page') : null,
      page.next_cursor ? link(`/workflows?${query}`, 'Next page') : null));
}
