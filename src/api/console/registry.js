// The registries: workflows (with a button that starts a run of one), agents, tools and LLM
// functions, each with its full definition one click away; the caller's own workflows and
// agents (not the shared ones, loaded from a directory) are edited in place as JSON and saved
// with PUT. Each workflow, agent, declared tool and declared function has its versions, diffs
// and labels (`versions.js`) a click away; `#/workflows/{name}` (and the like) opens them.

import { api } from './api.js';
import { h, clear, json, loading, empty, errorBox, announce } from './ui.js';
import { versionsPanel } from './versions.js';

const PAGES = {
  workflows: {
    title: 'Workflows',
    path: '/v1/workflows',
    none: 'No workflows registered. PUT /v1/workflows/{name}, or set workflows.dir, to add one.',
    columns: ['Name', 'Description', 'Version'],
    cells: (w) => [h('code', {}, w.name), w.description || '—', w.version ?? '—'],
    detail: (w) => `/v1/workflows/${encodeURIComponent(w.name)}`,
    editable: true,
    versions: { runnable: true },
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
    versions: {},
  },
  tools: {
    title: 'Tools',
    path: '/v1/tools',
    none: 'No tools are available.',
    columns: ['Name', 'Description'],
    cells: (t) => [h('code', {}, t.name), t.description || '—'],
    detail: null,
    // The list does not tell a declared tool from one orca started with; its detail does.
    versions: {
      versioned: async (t) => ((await api(`/v1/tools/${encodeURIComponent(t.name)}`)).http
        ? null : 'orca’s own tools keep no versions; tools declared through the API (PUT /v1/tools/{name}) do.'),
    },
  },
  functions: {
    title: 'Functions',
    path: '/v1/functions',
    none: 'No LLM functions.',
    columns: ['Name', 'Description', 'From'],
    cells: (f) => [h('code', {}, f.name), f.description || '—', f.declared ? 'yours' : f.builtin ? 'built in' : 'configured'],
    detail: (f) => `/v1/functions/${encodeURIComponent(f.name)}`,
    versions: {
      versioned: async (f) => (f.declared
        ? null : 'Configured functions keep no versions (they change in the configuration); functions declared through the API (PUT /v1/functions/{name}) do.'),
    },
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
  const versions = h('button', { type: 'button', class: 'ghost', 'aria-label': `Versions of ${item.name}`, 'aria-expanded': 'false', onclick: () => toggleVersions(page, item, tr, versions) }, 'Versions');
  tr.append(h('td', {}, more, page.action ? page.action(item) : null, ' ', versions, edit ? ' ' : null, edit));
  return tr;
}

/** Opens (or closes) a row's versions in a full-width row below it. */
function toggleVersions(page, item, tr, button) {
  const open = [...tr.parentElement.children].find((r) => r.dataset.versionsOf === item.name);
  if (open) { open.remove(); button.setAttribute('aria-expanded', 'false'); return; }
  const { versioned, runnable } = page.versions;
  const panel = versionsPanel(page.path.slice('/v1/'.length), item.name, { runnable, versioned: versioned && (() => versioned(item)) });
  const spot = h('tr', { 'data-versions-of': item.name }, h('td', { colspan: String(page.columns.length + 1) }, panel));
  // After the editor when one is open, so the two never interleave.
  (tr.nextElementSibling?.dataset.editing ? tr.nextElementSibling : tr).after(spot);
  button.setAttribute('aria-expanded', 'true');
}

/** `#/workflows`, `#/agents`, `#/tools`, `#/functions`; with a name (`#/workflows/{name}`), that entry's
 * versions open. */
export async function registryView(main, which, signal, name) {
  const page = PAGES[which];
  const body = h('div', {}, loading(page.title.toLowerCase()));
  clear(main, h('h1', {}, page.title), body);
  try {
    const items = await api(page.path, { signal });
    if (!items.length) { clear(body, empty(page.none)); return; }
    clear(body, h('table', {},
      h('caption', { class: 'sr-only' }, page.title),
      h('thead', {}, h('tr', {}, [...page.columns, ''].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, items.map((item) => row(page, item, () => registryView(main, which, signal, name))))));
    if (name) focusEntry(body, name);
  } catch (err) {
    if (!signal.aborted) clear(body, errorBox(err, () => registryView(main, which, signal, name)));
  }
}

/** Opens the versions of the entry `name` and scrolls to them; says so when there is none. */
function focusEntry(body, name) {
  const button = [...body.querySelectorAll('tr[data-item]')].find((r) => r.dataset.item === name)
    ?.querySelector('button[aria-expanded="false"][aria-label^="Versions of"]');
  if (!button) { body.prepend(errorBox(new Error(`There is no ${name} here (or it belongs to another tenant).`))); return; }
  button.click();
  button.closest('tr').nextElementSibling?.scrollIntoView({ block: 'start' });
}
