// The registries: workflows (with a button that starts a run of one), agents and tools, each
// with its full definition one click away.

import { api } from './api.js';
import { h, clear, json, loading, empty, errorBox } from './ui.js';

const PAGES = {
  workflows: {
    title: 'Workflows',
    path: '/v1/workflows',
    none: 'No workflows registered. PUT /v1/workflows/{name}, or set workflows.dir, to add one.',
    columns: ['Name', 'Description', 'Version'],
    cells: (w) => [h('code', {}, w.name), w.description || '—', w.version ?? '—'],
    detail: (w) => `/v1/workflows/${encodeURIComponent(w.name)}`,
    action: (w) => h('a', { class: 'button ghost', href: `#/new?workflow=${encodeURIComponent(w.name)}` }, 'Run it'),
  },
  agents: {
    title: 'Agents',
    path: '/v1/agents',
    none: 'No agents registered. PUT /v1/agents/{name}, or set agents.dir, to add one.',
    columns: ['Name', 'Description', 'Kind'],
    cells: (a) => [h('code', {}, a.name), a.description || '—', a.kind || a.definition?.kind || 'model'],
    detail: (a) => `/v1/agents/${encodeURIComponent(a.name)}`,
  },
  tools: {
    title: 'Tools',
    path: '/v1/tools',
    none: 'No tools are available.',
    columns: ['Name', 'Description'],
    cells: (t) => [h('code', {}, t.name), t.description || '—'],
    detail: null,
  },
};

function row(page, item) {
  const cells = page.cells(item);
  const more = h('details', {}, h('summary', { 'aria-label': `Definition of ${item.name}` }, 'definition'));
  more.addEventListener('toggle', async () => {
    if (!more.open || more.dataset.loaded) return;
    more.dataset.loaded = '1';
    if (!page.detail) { more.append(h('h3', {}, 'Input schema'), json(item.input_schema)); return; }
    const spot = loading('the definition');
    more.append(spot);
    try {
      spot.replaceWith(json(await api(page.detail(item))));
    } catch (err) {
      spot.replaceWith(errorBox(err));
    }
  });
  return h('tr', {}, cells.map((c, i) => h('td', { class: i === 1 ? null : 'mono' }, c)),
    h('td', {}, more, page.action ? page.action(item) : null));
}

/** `#/workflows`, `#/agents`, `#/tools`. */
export async function registryView(main, which, signal) {
  const page = PAGES[which];
  const body = h('div', {}, loading(page.title.toLowerCase()));
  clear(main, h('h1', {}, page.title), body);
  try {
    const items = await api(page.path, { signal });
    if (!items.length) { clear(body, empty(page.none)); return; }
    clear(body, h('table', {},
      h('caption', { class: 'sr-only' }, page.title),
      h('thead', {}, h('tr', {}, [...page.columns, ''].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, items.map((item) => row(page, item)))));
  } catch (err) {
    if (!signal.aborted) clear(body, errorBox(err, () => registryView(main, which, signal)));
  }
}
