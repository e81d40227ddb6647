// The run list (the API's filters, a search over the inputs and cursor pagination, kept in the
// address so a view can be bookmarked) and the form that starts a run.

import { api, ApiError } from './api.js';
import { h, clear, badge, shortId, when, ms, elapsed, preview, loading, empty, errorBox, announce, TERMINAL } from './ui.js';

const STATUSES = ['', 'queued', 'running', 'waiting_input', 'paused', 'succeeded', 'failed', 'cancelled', 'timed_out'];
const ORCHESTRATIONS = ['', 'simple', 'fixed', 'planner', 'reactive'];

function toLocalInput(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  const pad = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

function select(id, name, options, value) {
  return h('select', { id, name }, options.map((o) => h('option', { value: o, selected: o === value }, o ? o.replace('_', ' ') : 'any')));
}

function filterForm(params, go) {
  const field = (id, text, control) => h('div', {}, h('label', { for: id }, text), control);
  const form = h('form', { class: 'filters panel', 'aria-label': 'Filter runs', role: 'search' },
    field('f-q', 'Search inputs', h('input', { id: 'f-q', name: 'q', type: 'search', maxlength: 200, placeholder: 'text in the input', value: params.get('q') || '' })),
    field('f-status', 'Status', select('f-status', 'status', STATUSES, params.get('status') || '')),
    field('f-orch', 'Orchestration', select('f-orch', 'orchestration', ORCHESTRATIONS, params.get('orchestration') || '')),
    field('f-after', 'Created after', h('input', { id: 'f-after', name: 'created_after', type: 'datetime-local', value: toLocalInput(params.get('created_after')) })),
    field('f-before', 'Created before', h('input', { id: 'f-before', name: 'created_before', type: 'datetime-local', value: toLocalInput(params.get('created_before')) })),
    field('f-meta', 'Metadata (key=value, comma-separated)', h('input', { id: 'f-meta', name: 'metadata', placeholder: 'team=search', value: metadataText(params) })),
    field('f-limit', 'Per page', select('f-limit', 'limit', ['20', '50', '100', '200'], params.get('limit') || '20')),
    h('div', {}, h('button', { type: 'submit' }, 'Apply')),
    h('div', {}, h('button', { type: 'button', class: 'ghost', onclick: () => go(new URLSearchParams()) }, 'Reset')));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const data = new FormData(form);
    const next = new URLSearchParams();
    for (const key of ['q', 'status', 'orchestration', 'limit']) if (data.get(key)) next.set(key, data.get(key));
    for (const key of ['created_after', 'created_before']) {
      if (data.get(key)) next.set(key, new Date(data.get(key)).toISOString());
    }
    for (const pair of String(data.get('metadata') || '').split(',')) {
      const [k, ...v] = pair.split('=');
      if (k.trim() && v.length) next.set(`metadata.${k.trim()}`, v.join('=').trim());
    }
    go(next);
  });
  return form;
}

function metadataText(params) {
  return [...params].filter(([k]) => k.startsWith('metadata.')).map(([k, v]) => `${k.slice(9)}=${v}`).join(', ');
}

function runRow(run) {
  const tokens = (run.usage?.prompt_tokens || 0) + (run.usage?.completion_tokens || 0);
  return h('tr', {},
    h('td', {}, h('a', { href: `#/runs/${run.id}`, class: 'mono', 'aria-label': `Run ${run.id}` }, shortId(run.id))),
    h('td', {}, badge(run.status)),
    h('td', {}, run.orchestration || '—'),
    h('td', { class: 'truncate', title: preview(run.input, 2000) }, preview(run.input)),
    h('td', {}, when(run.created_at)),
    h('td', { class: 'num' }, ms(elapsed(run))),
    h('td', { class: 'num' }, tokens));
}

/** The tenant's usage against its quota, in a line (`GET /v1/usage`; 0 is no limit). */
async function showUsage(el, signal) {
  try {
    const { usage: u, quota: q } = await api('/v1/usage', { signal });
    const of = (n, limit) => (limit ? `${n} of ${limit}` : `${n}`);
    el.textContent = `Your usage: ${of(u.running_runs, q.running_runs)} in progress · `
      + `${of(u.runs_last_minute, q.runs_per_minute)} runs in the last minute · `
      + `${of(u.tokens_today, q.tokens_per_day)} tokens today (UTC)`;
  } catch {
    el.remove();
  }
}

/** `#/runs?filters`: the list, newest first, a page at a time. */
export async function runsView(main, params, signal) {
  const go = (next) => { location.hash = `#/runs${next.toString() ? `?${next}` : ''}`; };
  const body = h('div');
  const usage = h('p', { class: 'hint', 'data-usage': '' });
  clear(main,
    h('div', { class: 'run-head' }, h('h1', {}, 'Runs'), h('a', { class: 'button', href: '#/new' }, 'New run')),
    usage, filterForm(params, go), body);
  showUsage(usage, signal);
  const query = new URLSearchParams(params);
  if (!query.get('limit')) query.set('limit', '20');
  const load = async () => {
    clear(body, loading('runs'));
    try {
      const page = await api(`/v1/runs?${query}`, { signal });
      renderPage(body, page, params, go, load);
      announce(`${page.runs.length} runs shown`);
      const live = page.runs.some((r) => !TERMINAL.has(r.status));
      if (live && !signal.aborted) setTimeout(() => { if (!signal.aborted) load(); }, 3000);
    } catch (err) {
      if (!signal.aborted) clear(body, errorBox(err, load));
    }
  };
  await load();
}

function renderPage(body, page, params, go, reload) {
  if (!page.runs.length) {
    const filtered = [...params.keys()].some((k) => k !== 'limit' && k !== 'cursor');
    clear(body, empty(filtered ? 'No run matches these filters.' : 'No runs yet.',
      filtered ? null : h('a', { class: 'button', href: '#/new' }, 'Start your first run')));
    return;
  }
  const table = h('table', {},
    h('caption', { class: 'sr-only' }, 'Runs, newest first'),
    h('thead', {}, h('tr', {}, ['Run', 'Status', 'Orchestration', 'Input', 'Created', 'Duration', 'Tokens']
      .map((t, i) => h('th', { scope: 'col', class: i >= 5 ? 'num' : null }, t)))),
    h('tbody', {}, page.runs.map(runRow)));
  const nav = h('div', { class: 'actions' });
  if (params.get('cursor')) {
    nav.append(h('button', { type: 'button', class: 'ghost', onclick: () => history.back() }, 'Previous page'));
  }
  if (page.next_cursor) {
    nav.append(h('button', { type: 'button', class: 'ghost', onclick: () => {
      const next = new URLSearchParams(params);
      next.set('cursor', page.next_cursor);
      go(next);
    } }, 'Next page'));
  }
  nav.append(h('button', { type: 'button', class: 'ghost', onclick: reload }, 'Refresh'));
  clear(body, table, nav);
}

function parseJsonField(form, name, errors) {
  const text = String(new FormData(form).get(name) || '').trim();
  if (!text) return undefined;
  try {
    return JSON.parse(text);
  } catch (e) {
    errors.push({ pointer: `/${name}`, message: `is not valid JSON: ${e.message}` });
    return undefined;
  }
}

/** Reads the new-run form into a POST /v1/runs body, or field errors. */
function runRequest(form) {
  const data = new FormData(form);
  const errors = [];
  const text = String(data.get('input') || '');
  const body = { input: text };
  if (data.get('input_json')) {
    try { body.input = JSON.parse(text); } catch (e) { errors.push({ pointer: '/input', message: `is not valid JSON: ${e.message}` }); }
  }
  body.orchestration = data.get('orchestration');
  if (data.get('workflow')) body.workflow = data.get('workflow');
  for (const key of ['model', 'session_id']) if (data.get(key)) body[key] = String(data.get(key));
  for (const key of ['plan', 'metadata', 'limits']) {
    const value = parseJsonField(form, key, errors);
    if (value !== undefined) body[key] = value;
  }
  return { body, errors };
}

/** The model field: a select of the aliases `GET /v1/models` lists, the server's default as
 * the empty choice; a text field when the list cannot be had. */
function modelField(models, wanted) {
  if (!models) return h('input', { id: 'n-model', name: 'model', value: wanted || null });
  const fallback = models.find((m) => m.default);
  return h('select', { id: 'n-model', name: 'model' },
    h('option', { value: '' }, `server default${fallback ? ` (${fallback.name})` : ''}`),
    models.map((m) => h('option', { value: m.name, selected: m.name === wanted }, `${m.name} — ${m.provider} ${m.model}`)));
}

/** `#/new`: a form for POST /v1/runs; on success the run's page opens and follows it live. */
export async function newRunView(main, params, signal) {
  const [workflows, models] = await Promise.all([
    api('/v1/workflows', { signal }).catch(() => []),
    api('/v1/models', { signal }).catch(() => null),
  ]);
  if (signal.aborted) return;
  const status = h('div');
  const workflowSelect = h('select', { id: 'n-workflow', name: 'workflow' },
    h('option', { value: '' }, workflows.length ? '(none)' : 'no registered workflows'),
    workflows.map((w) => h('option', { value: w.name, selected: w.name === params.get('workflow') }, w.name)));
  const form = h('form', { class: 'panel', 'aria-describedby': 'n-help' },
    h('p', { id: 'n-help', class: 'hint' }, 'Starts a run with POST /v1/runs. Only the input is required; orca picks an orchestration when you leave it on auto.'),
    h('label', { for: 'n-input' }, 'Input'),
    h('textarea', { id: 'n-input', name: 'input', required: true, rows: 4, placeholder: 'What is 17 * 23? Use a tool.' }),
    h('label', { class: 'inline' }, h('input', { type: 'checkbox', name: 'input_json' }), 'The input is JSON (an object for a workflow’s input schema)'),
    h('div', { class: 'grid2' },
      h('div', {}, h('label', { for: 'n-orch' }, 'Orchestration'),
        h('select', { id: 'n-orch', name: 'orchestration' }, ['auto', 'simple', 'fixed', 'planner', 'reactive']
          .map((o) => h('option', { value: o, selected: o === (params.get('orchestration') || (params.get('workflow') ? 'fixed' : 'auto')) }, o)))),
      h('div', {}, h('label', { for: 'n-workflow' }, 'Workflow (for fixed)'), workflowSelect),
      h('div', {}, h('label', { for: 'n-model' }, 'Model alias'), modelField(models, params.get('model'))),
      h('div', {}, h('label', { for: 'n-session' }, 'Session id (optional)'), h('input', { id: 'n-session', name: 'session_id' }))),
    h('details', {}, h('summary', {}, 'Plan, limits and metadata'),
      h('label', { for: 'n-plan' }, 'Plan (JSON AgentPlan, optional)'), h('textarea', { id: 'n-plan', name: 'plan', rows: 6 }),
      h('label', { for: 'n-limits' }, 'Limits (JSON, optional)'), h('textarea', { id: 'n-limits', name: 'limits', rows: 2, placeholder: '{"max_steps": 20}' }),
      h('label', { for: 'n-meta' }, 'Metadata (JSON object, optional)'), h('textarea', { id: 'n-meta', name: 'metadata', rows: 2, placeholder: '{"team": "search"}' })),
    h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Start run')),
    status);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const { body, errors } = runRequest(form);
    if (errors.length) {
      clear(status, errorBox(new ApiError(0, { title: 'Some fields need fixing', errors })));
      return;
    }
    const button = form.querySelector('button[type=submit]');
    button.disabled = true;
    try {
      const run = await api('/v1/runs', { method: 'POST', body });
      location.hash = `#/runs/${run.id}`;
    } catch (err) {
      clear(status, errorBox(err));
      button.disabled = false;
    }
  });
  clear(main, h('h1', {}, 'New run'), form);
  form.querySelector('textarea').focus();
}

