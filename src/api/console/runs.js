// The run list (the API's filters, a search over the inputs and cursor pagination, kept in the
// address so a view can be bookmarked; runs selected for a batch action), and the form that
// starts a run (a workflow's input as a form built from its input schema).

import { api, ApiError } from './api.js';
import { h, clear, runBadge, shortId, when, ms, elapsed, preview, loading, empty, errorBox, announce, TERMINAL } from './ui.js';
import { schemaForm } from './form.js';

const STATUSES = ['', 'queued', 'running', 'waiting_input', 'paused', 'succeeded', 'failed', 'cancelled', 'timed_out'];
const ORCHESTRATIONS = ['', 'simple', 'fixed', 'planner', 'reactive'];
/** `completion` of a finished run: `partial` is a run that succeeded with only part of its work. */
const COMPLETIONS = ['', 'success', 'partial', 'error', 'timeout', 'cancelled'];

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
    field('f-completion', 'Completion', select('f-completion', 'completion', COMPLETIONS, params.get('completion') || '')),
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
    for (const key of ['q', 'status', 'orchestration', 'completion', 'limit']) if (data.get(key)) next.set(key, data.get(key));
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

function runRow(run, selection) {
  const tokens = (run.usage?.prompt_tokens || 0) + (run.usage?.completion_tokens || 0);
  const pick = h('input', { type: 'checkbox', 'aria-label': `Select run ${run.id}`, 'data-select': run.id, checked: selection.has(run.id) });
  pick.addEventListener('change', () => selection.toggle(run.id, pick.checked));
  return h('tr', { 'data-run': run.id },
    h('td', {}, pick),
    h('td', {}, h('a', { href: `#/runs/${run.id}`, class: 'mono', 'aria-label': `Run ${run.id}` }, shortId(run.id))),
    h('td', {}, runBadge(run)),
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

/** `GET /v1/runs`. A server that does not filter on `completion` (a 422 naming it) is asked
 * again without it, and its page filtered here; `filteredHere` says so. */
async function listRuns(query, signal) {
  try {
    return await api(`/v1/runs?${query}`, { signal });
  } catch (err) {
    const wanted = query.get('completion');
    const refused = wanted && err instanceof ApiError && err.status === 422
      && (err.problem.errors || []).some((e) => e.pointer === '/query/completion');
    if (!refused) throw err;
    const rest = new URLSearchParams(query);
    rest.delete('completion');
    const page = await api(`/v1/runs?${rest}`, { signal });
    return { ...page, runs: page.runs.filter((r) => r.completion === wanted), filteredHere: page.runs.length };
  }
}

/** The runs ticked for a batch action; kept while the list reloads. */
function selectionOf(onChange) {
  const ids = new Set();
  return {
    has: (id) => ids.has(id),
    toggle: (id, on) => { if (on) ids.add(id); else ids.delete(id); onChange(); },
    clear: () => { ids.clear(); onChange(); },
    ids: () => [...ids],
  };
}

/** Each batch action: its button, the question asked first, the call for one run. */
const BATCH = [
  { label: 'Cancel selected', done: 'Cancelled', ask: (n) => `Cancel ${n} run(s)? Finished ones stay as they are.`,
    call: (id) => api(`/v1/runs/${id}/cancel`, { method: 'POST' }) },
  { label: 'Delete selected', done: 'Deleted', ask: (n) => `Delete ${n} run(s) with their history? This cannot be undone.`,
    call: (id) => api(`/v1/runs/${id}`, { method: 'DELETE' }) },
  { label: 'Re-run selected', done: 'Started again', ask: null,
    call: async (id) => {
      const run = await api(`/v1/runs/${id}`);
      if (!run.request) throw new Error('its request was not kept');
      return api('/v1/runs', { method: 'POST', body: run.request });
    } },
];

/** The bar above the list: how many runs are ticked, and the batch actions on them. */
function batchBar(selection, reload) {
  const count = h('span', { class: 'muted', 'data-selected-count': '' });
  const outcome = h('div', { role: 'status' });
  const buttons = BATCH.map((action) => {
    const b = h('button', { type: 'button', class: action.label.startsWith('Delete') ? 'danger' : 'ghost', onclick: async () => {
      const ids = selection.ids();
      if (!ids.length || (action.ask && !confirm(action.ask(ids.length)))) return;
      buttons.forEach((x) => { x.disabled = true; });
      const made = [];
      const failed = [];
      for (const id of ids) {
        try {
          const out = await action.call(id);
          if (out?.id) made.push(out.id);
        } catch (err) {
          failed.push([id, err.message || String(err)]);
        }
      }
      const ok = ids.length - failed.length;
      clear(outcome, h('div', { class: `panel${failed.length ? ' error-box' : ''}`, 'data-batch-done': action.done.toLowerCase() },
        h('p', {}, `${action.done} ${ok} of ${ids.length} run(s).`),
        made.length ? h('p', {}, 'New runs: ', made.map((id) => [h('a', { href: `#/runs/${id}`, class: 'mono', 'data-new-run': id }, shortId(id)), ' '])) : null,
        failed.length ? h('ul', {}, failed.map(([id, m]) => h('li', {}, h('code', {}, shortId(id)), ` ${m}`))) : null));
      announce(`${action.done} ${ok} of ${ids.length} runs`);
      selection.clear();
      reload();
    } }, action.label);
    return b;
  });
  const update = () => {
    const n = selection.ids().length;
    count.textContent = n ? `${n} selected` : 'Tick runs to act on several at once';
    buttons.forEach((b) => { b.disabled = n === 0; });
  };
  update();
  return { el: h('div', { class: 'batch' }, h('div', { class: 'actions', role: 'group', 'aria-label': 'Batch actions' }, count, buttons), outcome), update };
}

/** `#/runs?filters`: the list, newest first, a page at a time. */
export async function runsView(main, params, signal) {
  const go = (next) => { location.hash = `#/runs${next.toString() ? `?${next}` : ''}`; };
  const body = h('div');
  const usage = h('p', { class: 'hint', 'data-usage': '' });
  let bar = null;
  const selection = selectionOf(() => bar?.update());
  let timer = null;
  const load = async () => {
    clearTimeout(timer);
    if (!body.querySelector('table')) clear(body, loading('runs'));
    try {
      const page = await listRuns(query, signal);
      if (signal.aborted) return;
      renderPage(body, page, params, go, load, selection);
      bar.update();
      announce(`${page.runs.length} runs shown`);
      const live = page.runs.some((r) => !TERMINAL.has(r.status));
      if (live) timer = setTimeout(() => { if (!signal.aborted) load(); }, 3000);
    } catch (err) {
      if (!signal.aborted) clear(body, errorBox(err, load));
    }
  };
  bar = batchBar(selection, load);
  clear(main,
    h('div', { class: 'run-head' }, h('h1', {}, 'Runs'), h('a', { class: 'button', href: '#/new' }, 'New run')),
    usage, filterForm(params, go), bar.el, body);
  showUsage(usage, signal);
  const query = new URLSearchParams(params);
  if (!query.get('limit')) query.set('limit', '20');
  signal.addEventListener('abort', () => clearTimeout(timer), { once: true });
  await load();
}

function renderPage(body, page, params, go, reload, selection) {
  if (!page.runs.length) {
    const filtered = [...params.keys()].some((k) => k !== 'limit' && k !== 'cursor');
    clear(body, empty(filtered ? 'No run matches these filters.' : 'No runs yet.',
      filtered ? null : h('a', { class: 'button', href: '#/new' }, 'Start your first run')));
    return;
  }
  const all = h('input', { type: 'checkbox', 'aria-label': 'Select every run on this page', checked: page.runs.every((r) => selection.has(r.id)) });
  const rows = page.runs.map((r) => runRow(r, selection));
  all.addEventListener('change', () => {
    for (const box of body.querySelectorAll('input[data-select]')) {
      box.checked = all.checked;
      selection.toggle(box.dataset.select, all.checked);
    }
  });
  const table = h('table', {},
    h('caption', { class: 'sr-only' }, 'Runs, newest first'),
    h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, all), ['Run', 'Status', 'Orchestration', 'Input', 'Created', 'Duration', 'Tokens']
      .map((t, i) => h('th', { scope: 'col', class: i >= 5 ? 'num' : null }, t)))),
    h('tbody', {}, rows));
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
  const note = page.filteredHere != null
    ? h('p', { class: 'hint' }, `This server does not filter on completion: these are the matching runs among the ${page.filteredHere} of this page.`)
    : null;
  clear(body, note, table, nav);
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

/** Reads the new-run form into a POST /v1/runs body, or field errors; `input` reads the
 * input (the workflow's schema form, or the text box). */
function runRequest(form, input) {
  const data = new FormData(form);
  const errors = [];
  const [value, problem] = input();
  if (problem) errors.push({ pointer: '/input', message: problem });
  const body = { input: value };
  body.orchestration = data.get('orchestration');
  if (data.get('workflow')) body.workflow = data.get('workflow');
  for (const key of ['model', 'session_id', 'concurrency']) if (data.get(key)) body[key] = String(data.get(key));
  for (const key of ['plan', 'metadata', 'limits']) {
    const parsed = parseJsonField(form, key, errors);
    if (parsed !== undefined) body[key] = parsed;
  }
  if (data.get('review_plans')) body.review_plans = true;
  const priority = String(data.get('priority') || '').trim();
  if (priority) {
    const n = Number(priority);
    if (Number.isInteger(n) && n >= -1000 && n <= 1000) body.priority = n;
    else errors.push({ pointer: '/priority', message: 'must be a whole number from -1000 to 1000' });
  }
  const webhook = String(data.get('webhook') || '').trim();
  if (webhook) body.webhook = { url: webhook };
  return { body, errors };
}

/** A model alias in words: `default (offline)`, `fast (openai: gpt-4o-mini)`. */
function modelLabel(m) {
  const where = m.model && m.model !== m.provider ? `${m.provider}: ${m.model}` : m.provider;
  return where ? `${m.name} (${where})` : m.name;
}

/** The model field: a select of the aliases `GET /v1/models` lists, the server's default as
 * the empty choice; a text field when the list cannot be had. */
function modelField(models, wanted) {
  if (!models) return h('input', { id: 'n-model', name: 'model', value: wanted || null });
  const fallback = models.find((m) => m.default);
  return h('select', { id: 'n-model', name: 'model' },
    h('option', { value: '' }, `server default${fallback ? ` (${fallback.name})` : ''}`),
    models.map((m) => h('option', { value: m.name, selected: m.name === wanted }, modelLabel(m))));
}

/** The input: a form built from the chosen workflow's input schema (with a way to type JSON
 * instead), or a text box. `read()` gives [value, problem]. */
function inputArea(signal) {
  const area = h('div', { 'data-input-area': '' });
  let read = () => [undefined, 'is required'];
  const textBox = (note) => {
    const text = h('textarea', { id: 'n-input', name: 'input', required: true, rows: 4, placeholder: 'What is 17 * 23? Use a tool.' });
    const asJson = h('input', { type: 'checkbox', name: 'input_json' });
    clear(area, h('label', { for: 'n-input' }, 'Input'), text,
      h('label', { class: 'inline' }, asJson, 'The input is JSON (an object for a workflow’s input schema)'), note);
    read = () => {
      if (!asJson.checked) return [text.value, null];
      try { return [JSON.parse(text.value), null]; } catch (e) { return [undefined, `is not valid JSON: ${e.message}`]; }
    };
  };
  const schemaInput = (name, schema) => {
    const form = schemaForm(schema, 'Input');
    const other = h('button', { type: 'button', class: 'ghost', onclick: () => textBox(h('p', { class: 'hint' }, `The input of ${name} is checked against its input schema.`)) }, 'Type the input as JSON instead');
    clear(area, h('p', { class: 'hint' }, `The input of workflow `, h('code', {}, name), ', from its input schema:'), form.el, h('div', {}, other));
    read = form.read;
  };
  /** Shows the form for workflow `name` (the text box for none, or one without a schema);
   * `name@ref` shows the form of that version. */
  const show = async (name) => {
    if (!name) { textBox(null); return; }
    try {
      const [base, ref] = name.split('@');
      const detail = await api(`/v1/workflows/${encodeURIComponent(base)}${ref ? `/versions/${encodeURIComponent(ref)}` : ''}`, { signal });
      const schema = detail.definition?.input_schema;
      if (schema && typeof schema === 'object' && schema.properties) schemaInput(name, schema);
      else textBox(null);
    } catch (err) {
      if (!signal.aborted) textBox(errorBox(err));
    }
  };
  return { el: area, show, read: () => read() };
}

/** The options beyond the input: plan review, priority, the session and its policy, a webhook. */
function optionsGrid(params) {
  return h('div', { class: 'grid2' },
    h('div', {}, h('label', { for: 'n-session' }, 'Session id (optional)'), h('input', { id: 'n-session', name: 'session_id', value: params.get('session_id') || null, autocomplete: 'off' })),
    h('div', {}, h('label', { for: 'n-concurrency' }, 'If the session has a run in progress'),
      h('select', { id: 'n-concurrency', name: 'concurrency' }, [['', 'server default (run both)'], ['parallel', 'parallel: run both'], ['enqueue', 'enqueue: wait for it'], ['reject', 'reject: refuse this run'], ['interrupt', 'interrupt: cancel it']]
        .map(([v, t]) => h('option', { value: v }, t)))),
    h('div', {}, h('label', { for: 'n-priority' }, 'Priority (-1000 to 1000; higher leaves the queue first)'), h('input', { id: 'n-priority', name: 'priority', type: 'number', min: -1000, max: 1000, step: 1, placeholder: '0' })),
    h('div', {}, h('label', { for: 'n-webhook' }, 'Webhook URL (POSTed the run’s summary when it ends)'), h('input', { id: 'n-webhook', name: 'webhook', type: 'url', placeholder: 'https://example.com/hook', autocomplete: 'off' })),
    h('div', {}, h('label', { class: 'inline' }, h('input', { type: 'checkbox', name: 'review_plans', id: 'n-review' }), 'Review each plan a model writes before it runs')));
}

/** `#/new`: a form for POST /v1/runs; on success the run's page opens and follows it live. */
export async function newRunView(main, params, signal) {
  const [workflows, models] = await Promise.all([
    api('/v1/workflows', { signal }).catch(() => []),
    api('/v1/models', { signal }).catch(() => null),
  ]);
  if (signal.aborted) return;
  const status = h('div');
  const input = inputArea(signal);
  const wanted = params.get('workflow');
  // `name@3` or `name@production` (a registry's *Run this version*) runs that version.
  const pinned = wanted?.includes('@') ? wanted : null;
  const workflowSelect = h('select', { id: 'n-workflow', name: 'workflow' },
    h('option', { value: '' }, workflows.length ? '(none)' : 'no registered workflows'),
    pinned ? h('option', { value: pinned, selected: true }, pinned.replace(/@(\d+)$/, ' v$1').replace('@', ' at label ')) : null,
    workflows.map((w) => h('option', { value: w.name, selected: w.name === wanted }, w.name)));
  const orchestration = h('select', { id: 'n-orch', name: 'orchestration' }, ['auto', 'simple', 'fixed', 'planner', 'reactive']
    .map((o) => h('option', { value: o, selected: o === (params.get('orchestration') || (params.get('workflow') ? 'fixed' : 'auto')) }, o)));
  workflowSelect.addEventListener('change', () => {
    if (workflowSelect.value) orchestration.value = 'fixed';
    input.show(workflowSelect.value);
  });
  const form = h('form', { class: 'panel', 'aria-describedby': 'n-help' },
    h('p', { id: 'n-help', class: 'hint' }, 'Starts a run with POST /v1/runs. Only the input is required; orca picks an orchestration when you leave it on auto.'),
    input.el,
    h('div', { class: 'grid2' },
      h('div', {}, h('label', { for: 'n-orch' }, 'Orchestration'), orchestration),
      h('div', {}, h('label', { for: 'n-workflow' }, 'Workflow (for fixed)'), workflowSelect),
      h('div', {}, h('label', { for: 'n-model' }, 'Model alias'), modelField(models, params.get('model')))),
    optionsGrid(params),
    h('details', {}, h('summary', {}, 'Plan, limits and metadata'),
      h('label', { for: 'n-plan' }, 'Plan (JSON AgentPlan, optional)'), h('textarea', { id: 'n-plan', name: 'plan', rows: 6 }),
      h('label', { for: 'n-limits' }, 'Limits (JSON, optional)'), h('textarea', { id: 'n-limits', name: 'limits', rows: 2, placeholder: '{"max_steps": 20}' }),
      h('label', { for: 'n-meta' }, 'Metadata (JSON object, optional)'), h('textarea', { id: 'n-meta', name: 'metadata', rows: 2, placeholder: '{"team": "search"}' })),
    h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Start run')),
    status);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const { body, errors } = runRequest(form, input.read);
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
  await input.show(workflowSelect.value);
  if (signal.aborted) return;
  clear(main, h('h1', {}, 'New run'), form);
  form.querySelector('textarea, input')?.focus();
}
