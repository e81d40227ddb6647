// Schedules: each with its timing, next tick and the runs its ticks started, and buttons to
// enable, disable or delete it. Creating one is `POST /v1/schedules` or `orca schedules create`.

import { api } from './api.js';
import { h, clear, json, loading, empty, errorBox, when, announce } from './ui.js';

function timing(s) {
  if (s.cron) return `cron ${s.cron} (${s.timezone})`;
  return `every ${s.interval_ms} ms`;
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

function row(s, reload) {
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
    h('td', {}, details(s), toggle, ' ', remove));
}

/** `#/schedules`. */
export async function schedulesView(main, signal) {
  const body = h('div', {}, loading('schedules'));
  clear(main, h('h1', {}, 'Schedules'), body);
  const reload = () => schedulesView(main, signal);
  try {
    const { schedules } = await api('/v1/schedules', { signal });
    if (!schedules.length) {
      clear(body, empty('No schedules. POST /v1/schedules, or `orca schedules create`, to start runs on a cron expression or an interval.'));
      return;
    }
    clear(body, h('table', {},
      h('caption', { class: 'sr-only' }, 'Schedules'),
      h('thead', {}, h('tr', {}, ['Name', 'Timing', 'Enabled', 'Next tick', 'Fired', ''].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, schedules.map((s) => row(s, reload)))));
  } catch (err) {
    if (!signal.aborted) clear(body, errorBox(err, reload));
  }
}
