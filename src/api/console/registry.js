// The registries: workflows (with a button that starts a run of one), agents and tools, each
// with its full definition one click away; the caller's own workflows and agents (not the
// shared ones, loaded from a directory) are edited in place as JSON and saved with PUT.

import { api } from './api.js';
import { h, clear, json, loading, empty, errorBox, announce } from './ui.js';

const PAGES = {
  workflows: {
    title: 'Workflows',
    path: '/v1/workflows',
    none: 'No workflows registered. PUT /v1/workflows/{name}, or set workflows.dir, to add one.',
    columns: ['Name', 'Description', 'Version'],
    cells: (w) => [h('code', {}, w.name), w.description || '—', w.version ?? '—'],
    detail: (w) => `/v1/workflows/${encodeURIComponent(w.name)}`,
    editable: true,
    action: (w) => h('a', { class: 'button ghost', href: `#/new?workflow=${encodeURIComponent(w.name)}` }, 'Run it'),
  },
  agents: {
    title: 'Agents',
    path: '/v1/agents',
    none: 'No agents registered. PUT /v1/agents/{name}, or set agents.dir, to add one.',
    columns: ['Name', 'Description', 'Kind'],
    cells: (a) => [h('code', {}, a.name), a.description || '—', a.kind || a.definition?.kind || 'model'],
    detail: (a) => `/v1/agents/${encodeURIComponent(a.name)}`,
    editable: true,
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

/** The editor of one definition: its JSON, saved with PUT (the server checks it in full; its
 * 422 lists every problem). `done` reloads the page. */
function editor(page, item, close, done) {
  const id = `edit-${item.name.replace(/[^a-zA-Z0-9_-]/g, '_')}`;
  const text = h('textarea', { id, rows: 14, spellcheck: 'false' });
  const problem = h('div');
  const save = h('button', { type: 'submit' }, 'Save');
  const form = h('form', { class: 'panel', 'data-editor': item.name },
    h('label', { for: id }, `Definition of ${item.name} (JSON)`), text,
    h('div', { class: 'actions' }, save, h('button', { type: 'button', class: 'ghost', onclick: close }, 'Cancel')), problem);
  api(page.detail(item)).then((d) => { text.value = JSON.stringify(d.definition, null, 2); text.focus(); },
    (err) => clear(problem, errorBox(err)));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    clear(problem);
    let body;
    try { body = JSON.parse(text.value); } catch (err) { clear(problem, errorBox(new Error(`The definition is not valid JSON: ${err.message}`))); return; }
    save.disabled = true;
    try {
      await api(page.detail(item), { method: 'PUT', body });
      announce(`${item.name} saved.`);
      done();
    } catch (err) {
      clear(problem, errorBox(err));
      save.disabled = false;
    }
  });
  return form;
}

function row(page, item, reload) {
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
  const tr = h('tr', { 'data-item': item.name }, cells.map((c, i) => h('td', { class: i === 1 ? null : 'mono' }, c)));
  const edit = page.editable && !item.shared ? h('button', { type: 'button', class: 'ghost', 'aria-label': `Edit ${item.name}`, onclick: () => {
    if (tr.nextElementSibling?.dataset.editing) return;
    const spot = h('tr', { 'data-editing': item.name });
    const close = () => { spot.remove(); edit.focus(); };
    spot.append(h('td', { colspan: String(page.columns.length + 1) }, editor(page, item, close, reload)));
    tr.after(spot);
  } }, 'Edit') : null;
  tr.append(h('td', {}, more, page.action ? page.action(item) : null, edit ? ' ' : null, edit));
  return tr;
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
      h('tbody', {}, items.map((item) => row(page, item, () => registryView(main, which, signal))))));
  } catch (err) {
    if (!signal.aborted) clear(body, errorBox(err, () => registryView(main, which, signal)));
  }
}
