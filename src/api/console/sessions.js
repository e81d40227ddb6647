// A session (`#/sessions/{id}`): its variables (set, change or delete one), its runs and the
// turns its next run is given.

import { api } from './api.js';
import { h, clear, json, loading, empty, errorBox, when, badge, announce } from './ui.js';

function variablesTable(id, variables, reload) {
  const names = Object.keys(variables);
  const path = `/v1/sessions/${encodeURIComponent(id)}`;
  const change = async (vars) => {
    await api(path, { method: 'PATCH', body: { variables: vars } });
    reload();
  };
  const rows = names.map((name) => h('tr', { 'data-variable': name },
    h('td', { class: 'mono' }, name), h('td', {}, json(variables[name])),
    h('td', {}, h('button', { type: 'button', class: 'ghost', 'aria-label': `Delete ${name}`, onclick: () => change({ [name]: null }).catch((e) => alert(e.message)) }, 'Delete'))));
  const name = h('input', { id: 'var-name', name: 'name', required: true, pattern: '[A-Za-z0-9_\\-]{1,64}', autocomplete: 'off' });
  const value = h('input', { id: 'var-value', name: 'value', required: true, autocomplete: 'off' });
  const problem = h('div');
  const form = h('form', { class: 'inline-form', onsubmit: async (e) => {
    e.preventDefault();
    let parsed;
    try { parsed = JSON.parse(value.value); } catch { parsed = value.value; }
    try {
      await change({ [name.value]: parsed });
      announce(`Variable ${name.value} set.`);
    } catch (err) {
      clear(problem, errorBox(err));
    }
  } },
  h('label', { for: 'var-name' }, 'Name'), name,
  h('label', { for: 'var-value' }, 'Value (JSON or text)'), value,
  h('button', { type: 'submit' }, 'Set'), problem);
  return [
    names.length ? h('table', {}, h('caption', { class: 'sr-only' }, 'Variables'),
      h('thead', {}, h('tr', {}, ['Name', 'Value', ''].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, rows)) : h('p', { class: 'muted' }, 'No variables.'),
    form,
  ];
}

/** A turn's input or output: a message as text, anything else as JSON. */
function turnValue(value) {
  return typeof value === 'string' ? h('div', { class: 'turn' }, value) : json(value);
}

/** `#/sessions/{id}`. */
export async function sessionView(main, id, signal) {
  const body = h('div', {}, loading('the session'));
  clear(main, h('p', {}, h('a', { href: '#/runs' }, '← Runs')), h('h1', {}, `Session ${id}`), body);
  const reload = () => sessionView(main, id, signal);
  const path = `/v1/sessions/${encodeURIComponent(id)}`;
  try {
    let session;
    try {
      session = await api(path, { signal });
    } catch (err) {
      if (err.status !== 404) throw err;
      session = { id, variables: {}, runs: [], run_count: 0, summary: null };
    }
    const history = session.run_count ? await api(`${path}/history`, { signal }) : { turns: [], summary: null };
    clear(body,
      h('h2', {}, 'Variables'), variablesTable(id, session.variables, reload),
      h('h2', {}, `Runs (${session.run_count})`),
      session.runs.length ? h('ul', { 'data-session-runs': id }, session.runs.map((r) => h('li', { class: 'mono' },
        h('a', { href: `#/runs/${encodeURIComponent(r.id)}` }, r.id), ' ', badge(r.status), ' ', when(r.created_at)))) : empty('No runs in this session yet.'),
      h('h2', {}, 'History'),
      history.summary ? h('p', {}, `Summary of ${history.summary.turns} earlier turn(s): ${history.summary.text}`) : null,
      history.turns.length ? h('ol', { 'data-history': id }, history.turns.map((t) => h('li', {}, h('h3', {}, 'In'), turnValue(t.input), h('h3', {}, 'Out'), turnValue(t.output))))
        : h('p', { class: 'muted' }, 'No turns yet: a succeeded run of the session becomes one.'));
  } catch (err) {
    if (!signal.aborted) clear(body, errorBox(err, reload));
  }
}
