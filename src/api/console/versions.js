// Definitions as code (issue 45) in the console: a workflow's, agent's, declared tool's or function's
// version history, the diff between any two of its versions, its labels and the control that
// moves one (moving a label back is the rollback), a run of one version of a workflow; and on
// a run's page, the version of every definition the run used. Only the public
// /v1/{kind}/{name}/versions, /diff and /labels are read and written here.

import { api } from './api.js';
import { h, clear, when, preview, loading, empty, errorBox, announce } from './ui.js';

/** The registry page of each kind a run's `definitions` names. */
const PAGES = { workflow: 'workflows', agent: 'agents', tool: 'tools', function: 'functions' };

const at = (kind, name) => `/v1/${kind}/${encodeURIComponent(name)}`;

/** An id fragment from a name (names may hold `.`, which a label's `for` takes but CSS does not). */
const slug = (name) => name.replace(/[^a-zA-Z0-9_-]/g, '_');

/** One RFC 6902 operation as a line: `replace /description → "Quote…"`, `remove /steps/2`. */
export function opLine(op) {
  const from = op.from ? ` (from ${op.from})` : '';
  // As JSON, so a string reads quoted and never passes for an object.
  const value = 'value' in op ? ` → ${preview(JSON.stringify(op.value), 200)}` : '';
  return `${op.op} ${op.path || '/'}${from}${value}`;
}

function chip(text, cls) {
  return h('span', { class: cls ? `chip ${cls}` : 'chip', 'data-label': cls ? null : text }, text);
}

/** The history as a table, newest first: a workflow's versions each with *Run this version*,
 * which opens the new-run form on `name@N` (the one way the console starts a run). */
function historyTable(kind, name, list, runnable) {
  return h('table', { 'data-history': name },
    h('caption', { class: 'sr-only' }, `Versions of ${name}`),
    h('thead', {}, h('tr', {}, ['Version', 'Created', 'Author', 'Message', 'Labels', ''].map((t) => h('th', { scope: 'col' }, t)))),
    h('tbody', {}, list.versions.map((v) => h('tr', { 'data-version': v.version },
      h('td', { class: 'mono' }, `v${v.version}`, v.version === list.latest_version ? [' ', chip('latest', 'latest')] : null),
      h('td', {}, when(v.created_at)),
      h('td', { class: 'mono', title: v.key || null }, v.author || v.key || '—'),
      h('td', {}, v.message || '—'),
      h('td', {}, v.labels.length ? v.labels.map((l) => chip(l)) : '—'),
      h('td', {}, runnable ? h('a', {
        class: 'button ghost', href: `#/new?workflow=${encodeURIComponent(`${name}@${v.version}`)}`,
        'aria-label': `Run ${name} version ${v.version}`,
      }, 'Run this version') : null)))));
}

function versionSelect(id, list, selected) {
  return h('select', { id }, list.versions.map((v) => h('option', { value: v.version, selected: v.version === selected },
    `v${v.version}${v.version === list.latest_version ? ' (latest)' : ''}`)));
}

/** Two selects (previous → latest at first) and the RFC 6902 operations between them. */
function diffPart(kind, name, list) {
  if (list.versions.length < 2) return h('p', { class: 'hint' }, 'One version only: nothing to compare yet.');
  const id = `vd-${slug(name)}`;
  const from = versionSelect(`${id}-from`, list, list.versions[1].version);
  const to = versionSelect(`${id}-to`, list, list.latest_version);
  const out = h('div', { 'data-diff': name });
  let asked = 0;
  const show = async () => {
    const mine = ++asked;
    clear(out, loading('the diff'));
    try {
      const d = await api(`${at(kind, name)}/diff?from=${from.value}&to=${to.value}`);
      if (mine !== asked) return;
      clear(out, d.changes.length
        ? h('div', { class: 'diff', role: 'region', tabindex: '0', 'aria-label': `Changes from v${d.from} to v${d.to}` },
          d.changes.map((op) => h('div', { class: { add: 'add', remove: 'del' }[op.op] || null, 'data-op': op.op, title: JSON.stringify(op.value) ?? null }, opLine(op))))
        : h('p', { class: 'hint' }, `v${d.from} and v${d.to} are the same.`));
    } catch (err) {
      if (mine === asked) clear(out, errorBox(err, show));
    }
  };
  from.addEventListener('change', show);
  to.addEventListener('change', show);
  show();
  return h('div', {},
    h('div', { class: 'filters' },
      h('div', {}, h('label', { for: from.id }, 'From'), from),
      h('div', {}, h('label', { for: to.id }, 'To'), to)),
    out);
}

/** The labels, and the form that points one (new or existing) at a version: PUT …/labels/{label}.
 * A shared definition's labels follow the server's directory, so it has no form. */
function labelsPart(kind, name, list, reload) {
  const labels = Object.entries(list.labels);
  const now = labels.length
    ? h('p', { 'data-labels': name }, labels.map(([l, v]) => h('span', { class: 'chip', 'data-label-at': l }, `${l} → v${v}`)))
    : h('p', { class: 'hint', 'data-labels': name }, 'No labels yet. A run names one as `workflow: "name@label"`.');
  if (list.shared) return h('div', {}, now, h('p', { class: 'hint' }, 'Loaded from the server’s directory: its labels change with that directory.'));
  const id = `vl-${slug(name)}`;
  const label = h('input', { id: `${id}-label`, name: 'label', required: true, list: `${id}-known`, autocomplete: 'off', placeholder: 'production' });
  const version = versionSelect(`${id}-version`, list, list.latest_version);
  const move = h('button', { type: 'submit' }, 'Move label');
  const problem = h('div');
  const form = h('form', { 'data-move-label': name },
    h('div', { class: 'filters' },
      h('div', {}, h('label', { for: label.id }, 'Label'), label,
        h('datalist', { id: `${id}-known` }, labels.map(([l]) => h('option', { value: l })))),
      h('div', {}, h('label', { for: version.id }, 'Points at'), version),
      h('div', {}, move)),
    h('p', { class: 'hint' }, 'Runs that name the label start on the version it points at; moving it back is the rollback. Runs already going keep theirs.'),
    problem);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    clear(problem);
    move.disabled = true;
    try {
      const done = await api(`${at(kind, name)}/labels/${encodeURIComponent(label.value.trim())}`, { method: 'PUT', body: { version: Number(version.value) } });
      announce(`Label ${done.label} now points at v${done.version}${done.previous ? ` (was v${done.previous})` : ''}.`);
      reload();
    } catch (err) {
      clear(problem, errorBox(err));
      move.disabled = false;
    }
  });
  return h('div', {}, now, form);
}

/**
 * The "Versions" part of a definition's detail. `kind` is `workflows`, `agents`, `tools` or `functions`;
 * `runnable` adds *Run this version* (workflows); `versioned`, when given, is asked first and
 * answers a sentence when the definition keeps no versions (a tool orca started with).
 */
export function versionsPanel(kind, name, { runnable = false, versioned } = {}) {
  const body = h('div', {}, loading('the versions'));
  const load = async () => {
    clear(body, loading('the versions'));
    try {
      const none = versioned ? await versioned() : null;
      if (none) { clear(body, empty(none)); return; }
      const list = await api(`${at(kind, name)}/versions`);
      clear(body,
        historyTable(kind, name, list, runnable),
        h('h3', {}, 'Diff'), diffPart(kind, name, list),
        h('h3', {}, 'Labels'), labelsPart(kind, name, list, load));
    } catch (err) {
      clear(body, errorBox(err, load));
    }
  };
  load();
  return h('section', { class: 'panel', 'data-versions': name, 'aria-label': `Versions of ${name}` },
    h('h2', {}, 'Versions of ', h('code', {}, name)), body);
}

/** The run page's fact: `workflow publish-report v2 · agent billing v1 (shared)`, each a link
 * to its registry page (which opens its versions); null for a run that used none. */
export function definitionsFact(run) {
  const used = run.definitions || [];
  if (!used.length) return null;
  const one = (d) => {
    const text = `${d.name} v${d.version}`;
    const page = PAGES[d.kind];
    return [`${d.kind} `, page ? h('a', { href: `#/${page}/${encodeURIComponent(d.name)}`, title: d.digest }, text) : h('b', { title: d.digest }, text),
      d.shared ? ' (shared)' : null];
  };
  return h('li', { 'data-fact': 'definitions' }, used.map((d, i) => [i ? ' · ' : null, one(d)]));
}
