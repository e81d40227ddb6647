// The Timeline tab: a Gantt chart of every attempt (nested attempts under their parent) over a
// labelled time axis, the waits (queue, human input, backoff, timers) as hatched bars, the
// critical path outlined, failures ringed and marked (every bar keeps a visible width, so a
// 0 ms failure still shows), and the latency breakdown from GET /v1/runs/{id}/timeline.

import { h, ms, json } from './ui.js';

const PARTS = [
  ['model_ms', 'model', '#5b8def'],
  ['tools_ms', 'tools', '#2da44e'],
  ['timers_ms', 'timers', '#8250df'],
  ['human_ms', 'human input', '#d29922'],
  ['backoff_ms', 'retry backoff', '#cf222e'],
  ['queue_ms', 'queue', '#6e7781'],
  ['paused_ms', 'paused', '#9a6700'],
  ['orchestrator_ms', 'orchestrator', '#1b7c83'],
];

function depth(span, byId) {
  let d = 0;
  for (let p = span.parent; p && byId.has(p) && d < 20; p = byId.get(p).parent) d++;
  return d;
}

/** A bar from `start` to `end`; CSS gives it a minimum width, and a bar too close to the
 * track's end for that width is moved left so it stays inside. */
function bar(t0, total, start, end, cls, label) {
  const left = Math.min(100, Math.max(0, ((new Date(start) - t0) / total) * 100));
  const width = Math.max(0, ((new Date(end) - new Date(start)) / total) * 100);
  return h('div', {
    class: `bar ${cls}`,
    style: { left: `min(${left}%, calc(100% - var(--bar-min)))`, width: `${Math.min(width, 100 - left)}%` },
    title: label,
  });
}

// Tick spacings in ms: "round" numbers of ms, s, min and h.
const STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10000, 15000, 30000,
  60000, 120000, 300000, 600000, 900000, 1800000, 3600000, 7200000, 10800000, 21600000, 43200000, 86400000];

/** The spacing that puts at most `most` ticks after 0 on a `total` ms axis. */
export function tickStep(total, most = 6) {
  return STEPS.find((step) => total / step <= most) || Math.ceil(total / most / 86400000) * 86400000;
}

/** A tick's label in the unit of its spacing: `250 ms`, `1.5 s`, `2 min`, `3 h`. */
export function tickLabel(v, step) {
  if (v === 0) return '0';
  if (step < 1000) return `${v} ms`;
  if (step < 60000) return `${v / 1000} s`;
  if (step < 3600000) return `${v / 60000} min`;
  return `${v / 3600000} h`;
}

/** The time axis above the tracks: ticks from the run's creation to `total` ms. */
function axis(total) {
  const step = tickStep(total);
  const ticks = [];
  for (let v = 0; v <= total; v += step) {
    ticks.push(h('span', { class: 'tick', style: { left: `${(v / total) * 100}%` } }, tickLabel(v, step)));
  }
  return [
    h('div', { class: 'label muted axis-title' }, 'time since created'),
    h('div', { class: 'axis', role: 'img', 'aria-label': `Time axis from 0 to ${ms(total)}, a tick every ${tickLabel(step, step)}` }, ticks),
    h('div'),
  ];
}

function breakdown(b) {
  const total = Math.max(1, b.total_ms);
  return h('section', {}, h('h3', {}, 'Where the time went'),
    h('div', { class: 'breakdown', role: 'img', 'aria-label': PARTS.map(([k, n]) => `${n} ${ms(b[k] || 0)}`).join(', ') },
      PARTS.map(([k, , color]) => h('span', { style: { width: `${((b[k] || 0) / total) * 100}%`, background: color } }))),
    h('div', { class: 'legend' }, PARTS.map(([k, n, color]) => h('span', {}, h('i', { style: { background: color } }), `${n} ${ms(b[k] || 0)}`))),
    h('p', { class: 'hint' }, `Total ${ms(b.total_ms)}; accounted ${ms(b.accounted_ms)}.`),
    b.worker_queue_ms ? h('p', { class: 'hint' }, `Of the tools’ time, ${ms(b.worker_queue_ms)} was worker tools’ tasks waiting for a worker.`) : null);
}

/** Renders a timeline document; `onPick(span)` opens an attempt's details. */
export function timelinePanel(t, onPick) {
  if (!t.spans.length && !t.waits.length) return h('div', { class: 'empty' }, h('p', {}, 'No attempts yet.'));
  const t0 = new Date(t.created_at);
  const total = Math.max(1, new Date(t.as_of) - t0);
  const byId = new Map(t.spans.map((sp) => [sp.id, sp]));
  const critical = new Set(t.critical_path.filter((p) => p.span).map((p) => p.span));
  const rows = [...axis(total)];
  for (const sp of t.spans) {
    const end = sp.end || t.as_of;
    const label = `${sp.path ? `${sp.path}/` : ''}${sp.step_id}${sp.attempt > 1 ? ` #${sp.attempt}` : ''}`;
    const tip = `${label} (${sp.kind}) ${sp.status} ${ms(sp.duration_ms)}${sp.error_code ? ` — ${sp.error_code}` : ''}`;
    rows.push(h('div', { class: 'label', style: { paddingLeft: `${depth(sp, byId) * 14}px` } },
      h('button', { type: 'button', class: 'ghost', style: { padding: '0 4px', border: 'none' }, onclick: () => onPick(sp), 'aria-label': `Details of ${tip}` }, label)));
    rows.push(h('div', { class: 'track' }, bar(t0, total, sp.start, end, `s-${sp.status}${critical.has(sp.id) ? ' critical' : ''}`, tip)));
    rows.push(h('div', { class: 'dur' }, ms(sp.duration_ms)));
  }
  for (const w of t.waits) {
    const kind = w.kind === 'worker' ? 'worker queue' : w.kind.replace('_', ' ');
    const label = `${kind}${w.step_id ? ` · ${w.step_id}` : ''}`;
    rows.push(h('div', { class: 'label muted' }, `wait: ${label}`));
    rows.push(h('div', { class: 'track' }, bar(t0, total, w.start, w.end || t.as_of, 'wait', `${label} ${ms(w.duration_ms)}`)));
    rows.push(h('div', { class: 'dur' }, ms(w.duration_ms)));
  }
  const tt = t.totals;
  return h('div', {},
    h('ul', { class: 'facts' },
      h('li', {}, 'duration ', h('b', {}, ms(t.duration_ms))),
      h('li', {}, 'critical path ', h('b', {}, ms(tt.critical_path_ms))),
      h('li', {}, 'attempts ', h('b', {}, tt.attempts)),
      h('li', {}, 'retries ', h('b', {}, tt.retries)),
      h('li', {}, 'model calls ', h('b', {}, tt.llm_calls)),
      h('li', {}, 'tool calls ', h('b', {}, tt.tool_calls))),
    h('div', { class: 'gantt', role: 'group', 'aria-label': 'Attempts over time; the critical path is outlined' }, rows),
    h('p', { class: 'hint' }, 'Bars outlined in orange are on the critical path; bars ringed in red and marked ✕ failed; hatched bars are waits. Every bar is drawn at least a few pixels wide, however short.'),
    breakdown(t.breakdown),
    t.decisions.length ? h('section', {}, h('h3', {}, 'Decisions'),
      h('ol', {}, t.decisions.map((d) => h('li', {}, h('strong', {}, d.kind), ` at seq ${d.seq}`, d.step_id ? ` (${d.step_id})` : '', h('details', {}, h('summary', {}, 'detail'), json(d.detail)))))) : null);
}
