// Schedules: each with its timing, next tick and the runs its ticks started, and buttons to
// edit, enable, disable or delete it; a form creates one (`POST /v1/schedules`) or edits one
// (`PATCH /v1/schedules/{id}`, sending only what changed).

import { api, ApiError } from './api.js';
import { h, clear, json, loading, empty, errorBox, when, announce } from './ui.js';

function timing(s) {
  if (s.cron) return `cron ${s.cron} (${s.timezone})`;
  return `every ${interval(s.interval_ms)}`;
}

// An interval in the largest unit that divides it: "2 h", "90 s", "1500 ms".
function interval(ms) {
  for (const [unit, size] of [['d', 86400000], ['h', 3600000], ['min', 60000], ['s', 1000]]) {
    if (ms >= size && ms % size === 0) return `${ms / size} ${unit}`;
  }
  return `${ms} ms`;
}

function details(s) {
  const more = h('details', {}, h('summary', { 'aria-label': `Ticks and runs of ${s.name || s.id}` }, 'ticks and runs'));
  more.addEventListener('toggle', async () => {
    if (!more.open || more.dataset.loaded) return;
    more.dataset.loaded = '1';
    const spot = loading('the fires');
    more.append(
      h('h3', {}, 'Next ticks'),
      s.next_fire_times.length ? h('ul', {}, s.next_fire_times.map((t) => h('li', { class: 'mono' }, when(t)))) : h('p', { class: 'muted' }, 'None while disabled.'),
      h('h3', {}, 'Latest ticks'), spot,
      h('h3', {}, 'Run body'), json(s.run));
    try {
      const { fires } = await api(`/v1/schedules/${encodeURIComponent(s.id)}/fires`);
      spot.replaceWith(fires.length
        ? h('ul', { 'data-fires': s.id }, fires.map((f) => h('li', { class: 'mono' }, when(f.fire_at), ' → ',
          f.run_id ? h('a', { href: `#/runs/${encodeURIComponent(f.run_id)}` }, f.run_id) : `not started: ${f.error}`)))
        : h('p', { class: 'muted' }, 'No tick has fired yet.'));
    } catch (err) {
      spot.replaceWith(errorBox(err));
    }
  });
  return more;
}

function row(s, reload, edit) {
  const act = async (what, call) => {
    try {
      await call();
      announce(`Schedule ${s.name || s.id} ${what}.`);
      reload();
    } catch (err) {
      alert(err.message);
    }
  };
  const path = `/v1/schedules/${encodeURIComponent(s.id)}`;
  const toggle = h('button', { type: 'button', class: 'ghost', onclick: () => act(s.enabled ? 'disabled' : 'enabled',
    () => api(path, { method: 'PATCH', body: { enabled: !s.enabled } })) }, s.enabled ? 'Disable' : 'Enable');
  const remove = h('button', { type: 'button', class: 'ghost', onclick: () => {
    if (confirm(`Delete schedule ${s.name || s.id}? The runs it started stay.`)) act('deleted', () => api(path, { method: 'DELETE' }));
  } }, 'Delete');
  return h('tr', { 'data-schedule': s.id },
    h('td', {}, s.name || h('code', {}, s.id.slice(0, 8))),
    h('td', { class: 'mono' }, timing(s)),
    h('td', { 'data-enabled': String(s.enabled) }, s.enabled ? 'on' : 'off'),
    h('td', { class: 'mono' }, s.next_fire_at ? when(s.next_fire_at) : '—'),
    h('td', { class: 'mono' }, String(s.fire_count),
      s.last_run_id ? [' · last ', h('a', { href: `#/runs/${encodeURIComponent(s.last_run_id)}` }, 'run')] : null),
    h('td', {}, details(s), h('button', { type: 'button', class: 'ghost', 'aria-label': `Edit ${s.name || s.id}`, onclick: () => edit(s) }, 'Edit'), ' ', toggle, ' ', remove));
}

const RUN_TEMPLATE = { input: 'Summarise what changed today.', orchestration: 'auto' };

/** The schedule form: creates one (`s` absent) or edits `s`. `done` reloads the page. */
function scheduleForm(s, done, cancel) {
  const isCron = s ? Boolean(s.cron) : true;
  const field = (id, text, control) => h('div', {}, h('label', { for: id }, text), control);
  const name = h('input', { id: 'sch-name', name: 'name', maxlength: 200, value: s?.name || null, autocomplete: 'off' });
  const kind = h('select', { id: 'sch-kind', name: 'kind' },
    h('option', { value: 'cron', selected: isCron }, 'on a cron expression'),
    h('option', { value: 'interval', selected: !isCron }, 'at an interval'));
  const cron = h('input', { id: 'sch-cron', name: 'cron', value: s?.cron || '0 9 * * 1-5', autocomplete: 'off', spellcheck: 'false' });
  const zone = h('input', { id: 'sch-zone', name: 'timezone', value: s?.cron ? s.timezone : (Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC'), autocomplete: 'off' });
  const every = h('input', { id: 'sch-every', name: 'interval_s', type: 'number', min: 1, step: 'any', value: s?.interval_ms ? String(s.interval_ms / 1000) : '3600' });
  const missed = h('select', { id: 'sch-missed', name: 'missed' },
    [['skip', 'skip them'], ['catch_up_one', 'fire the latest once']].map(([v, t]) => h('option', { value: v, selected: (s?.missed || 'skip') === v }, t)));
  const run = h('textarea', { id: 'sch-run', name: 'run', rows: 5 }, JSON.stringify(s?.run || RUN_TEMPLATE, null, 2));
  const cronPart = h('div', { class: 'grid2' }, field('sch-cron', 'Cron expression (minute hour day month weekday)', cron), field('sch-zone', 'Time zone (IANA)', zone));
  const everyPart = h('div', {}, field('sch-every', 'Every (seconds, at least 1)', every));
  const showKind = () => { cronPart.hidden = kind.value !== 'cron'; everyPart.hidden = kind.value === 'cron'; };
  kind.addEventListener('change', showKind);
  showKind();
  const problem = h('div');
  const form = h('form', { class: 'panel', 'data-schedule-form': s ? s.id : 'new', 'aria-labelledby': 'sch-title' },
    h('h2', { id: 'sch-title' }, s ? `Edit schedule ${s.name || s.id.slice(0, 8)}` : 'New schedule'),
    h('div', { class: 'grid2' }, field('sch-name', 'Name (optional)', name), field('sch-kind', 'Runs', kind)),
    cronPart, everyPart,
    field('sch-missed', 'Ticks missed while orca was down', missed),
    field('sch-run', 'Run body (JSON, as POST /v1/runs takes it)', run),
    h('div', { class: 'actions' }, h('button', { type: 'submit' }, s ? 'Save schedule' : 'Create schedule'),
      h('button', { type: 'button', class: 'ghost', onclick: cancel }, 'Cancel')),
    problem);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    clear(problem);
    let body;
    try {
      body = scheduleBody(s, { name: name.value.trim(), kind: kind.value, cron: cron.value.trim(), timezone: zone.value.trim(), every: every.value, missed: missed.value, run: run.value });
    } catch (err) {
      clear(problem, errorBox(err));
      return;
    }
    try {
      const saved = await api(s ? `/v1/schedules/${encodeURIComponent(s.id)}` : '/v1/schedules', { method: s ? 'PATCH' : 'POST', body });
      announce(`Schedule ${saved.name || saved.id} ${s ? 'saved' : 'created'}.`);
      done();
    } catch (err) {
      clear(problem, errorBox(err));
    }
  });
  return form;
}

/** The form's values as a POST body, or (editing `s`) a PATCH body of what changed. */
function scheduleBody(s, v) {
  const wrong = (pointer, message) => new ApiError(0, { title: 'Some fields need fixing', errors: [{ pointer, message }] });
  let run;
  try { run = JSON.parse(v.run); } catch (e) { throw wrong('/run', `is not valid JSON: ${e.message}`); }
  const timing = v.kind === 'cron' ? { cron: v.cron, timezone: v.timezone || 'UTC' } : { interval_ms: Math.round(Number(v.every) * 1000) };
  if (v.kind !== 'cron' && !(timing.interval_ms > 0)) throw wrong('/interval_ms', 'give the interval in seconds');
  const body = { run, missed: v.missed, ...timing };
  if (v.name) body.name = v.name;
  if (!s) return body;
  // Editing: a timing sent again would count the ticks from now, so only a changed one is sent.
  const same = v.kind === 'cron' ? s.cron === timing.cron && s.timezone === timing.timezone : s.interval_ms === timing.interval_ms;
  if (same) { delete body.cron; delete body.timezone; delete body.interval_ms; }
  return body;
}

/** `#/schedules`. */
export async function schedulesView(main, signal) {
  const body = h('div', {}, loading('schedules'));
  const editor = h('div');
  const reload = () => schedulesView(main, signal);
  const open = (s) => {
    clear(editor, scheduleForm(s, reload, () => clear(editor)));
    editor.querySelector('input').focus();
  };
  clear(main, h('div', { class: 'run-head' }, h('h1', {}, 'Schedules'),
    h('button', { type: 'button', onclick: () => open(null) }, 'New schedule')), editor, body);
  try {
    const { schedules } = await api('/v1/schedules', { signal });
    if (!schedules.length) {
      clear(body, empty('No schedules yet. Create one with New schedule (or POST /v1/schedules, or `orca schedules create`) to start runs on a cron expression or at an interval.'));
      return;
    }
    clear(body, h('table', {},
      h('caption', { class: 'sr-only' }, 'Schedules'),
      h('thead', {}, h('tr', {}, ['Name', 'Timing', 'Enabled', 'Next tick', 'Fired', ''].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, schedules.map((s) => row(s, reload, open)))));
  } catch (err) {
    if (!signal.aborted) clear(body, errorBox(err, reload));
  }
}
