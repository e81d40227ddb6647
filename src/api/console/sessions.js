// The sessions (`#/sessions`: the one with the newest run first, a page at a time) and a
// session (`#/sessions/{id}`): its variables (set, change or delete one), its runs and the
// turns its next run is given.

import { api } from './api.js';
import { h, clear, json, loading, empty, errorBox, when, badge, announce, shortId } from './ui.js';

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

/** A run's status badge, and its completion beside it when that is not the usual one. */
function statusOf(run) {
  const usual = { succeeded: 'success', failed: 'error', timed_out: 'timeout', cancelled: 'cancelled' }[run.status];
  const unusual = usual && run.completion && run.completion !== usual;
  return [badge(run.status), unusual ? h('span', { class: 'muted', 'data-completion': run.completion }, ` (${run.completion})`) : null];
}

function sessionRow(s) {
  const last = s.last_run;
  return h('tr', { 'data-session': s.id },
    h('td', {}, h('a', { href: `#/sessions/${encodeURIComponent(s.id)}`, class: 'mono' }, s.id)),
    h('td', { class: 'num' }, s.run_count),
    h('td', { class: 'num' }, s.variable_count),
    h('td', {}, last ? statusOf(last) : '—'),
    h('td', {}, last ? h('a', { href: `#/runs/${encodeURIComponent(last.id)}`, class: 'mono', 'aria-label': `Run ${last.id}` }, shortId(last.id)) : '—'),
    h('td', {}, s.last_run_at ? when(s.last_run_at) : '—'),
    h('td', {}, s.first_run_at ? when(s.first_run_at) : '—'));
}

/** `#/sessions?cursor=…`: the caller's sessions, the one with the newest run first. */
export async function sessionsView(main, params, signal) {
  const body = h('div', {}, loading('sessions'));
  clear(main, h('h1', {}, 'Sessions'), body);
  const load = async () => {
    const query = new URLSearchParams({ limit: '50' });
    if (params.get('cursor')) query.set('cursor', params.get('cursor'));
    try {
      const page = await api(`/v1/sessions?${query}`, { signal });
      if (!page.sessions.length) {
        clear(body, empty('No sessions yet: a run started with a session_id makes one.'));
        return;
      }
      const nav = h('div', { class: 'actions' });
      if (params.get('cursor')) nav.append(h('button', { type: 'button', class: 'ghost', onclick: () => history.back() }, 'Previous page'));
      if (page.next_cursor) {
        nav.append(h('a', { class: 'button ghost', href: `#/sessions?cursor=${encodeURIComponent(page.next_cursor)}` }, 'Next page'));
      }
      nav.append(h('button', { type: 'button', class: 'ghost', onclick: load }, 'Refresh'));
      clear(body, h('table', { 'data-sessions': '' },
        h('caption', { class: 'sr-only' }, 'Sessions, the one with the newest run first'),
        h('thead', {}, h('tr', {}, ['Session', 'Runs', 'Variables', 'Last run', 'Run', 'Last run at', 'First run at']
          .map((t, i) => h('th', { scope: 'col', class: i === 1 || i === 2 ? 'num' : null }, t)))),
        h('tbody', {}, page.sessions.map(sessionRow))), nav);
      announce(`${page.sessions.length} sessions shown`);
    } catch (err) {
      if (!signal.aborted) clear(body, errorBox(err, load));
    }
  };
  await load();
}

/** `#/sessions/{id}`. */
export async function sessionView(main, id, signal) {
  const body = h('div', {}, loading('the session'));
  clear(main, h('p', {}, h('a', { href: '#/sessions' }, '← Sessions')), h('h1', {}, `Session ${id}`), body);
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
        h('a', { href: `#/runs/${encodeURIComponent(r.id)}` }, r.id), ' ', statusOf(r), ' ', when(r.created_at)))) : empty('No runs in this session yet.'),
      h('h2', {}, 'History'),
      history.summary ? h('p', {}, `Summary of ${history.summary.turns} earlier turn(s): ${history.summary.text}`) : null,
      history.turns.length ? h('ol', { 'data-history': id }, history.turns.map((t) => h('li', {}, h('h3', {}, 'In'), turnValue(t.input), h('h3', {}, 'Out'), turnValue(t.output))))
        : h('p', { class: 'muted' }, 'No turns yet: a succeeded run of the session becomes one.'));
  } catch (err) {
    if (!signal.aborted) clear(body, errorBox(err, reload));
  }
}
