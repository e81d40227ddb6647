// The Timeline tab: a Gantt chart of every attempt (nested attempts under their parent), the
// waits (queue, human input, backoff, timers) as hatched bars, the critical path outlined, and
// the latency breakdown from GET /v1/runs/{id}/timeline.

import { h, ms, json } from './ui.js';

const PARTS = [
  ['model_ms', 'model', '#5b8def'],
  ['tools_ms', 'tools', '#2da44e'],
  ['timers_ms', 'timers', '#8250df'],
  ['human_ms', 'human input', '#d29922'],
  ['backoff_ms', 'retry backoff', '#cf222e'],
  ['queue_ms', 'queue', '#6e7781'],
  ['orchestrator_ms', 'orchestrator', '#1b7c83'],
];

function depth(span, byId) {
  let d = 0;
  for (let p = span.parent; p && byId.has(p) && d < 20; p = byId.get(p).parent) d++;
  return d;
}

function bar(t0, total, start, end, cls, label) {
  const left = Math.max(0, ((new Date(start) - t0) / total) * 100);
  const width = Math.max(0.2, ((new Date(end) - new Date(start)) / total) * 100);
  return h('div', { class: `bar ${cls}`, style: { left: `${left}%`, width: `${Math.min(width, 100 - left)}%` }, title: label });
}

function breakdown(b) {
  const total = Math.max(1, b.total_ms);
  return h('section', {}, h('h3', {}, 'Where the time went'),
    h('div', { class: 'breakdown', role: 'img', 'aria-label': PARTS.map(([k, n]) => `${n} ${ms(b[k] || 0)}`).join(', ') },
      PARTS.map(([k, , color]) => h('span', { style: { width: `${((b[k] || 0) / total) * 100}%`, background: color } }))),
    h('div', { class: 'legend' }, PARTS.map(([k, n, color]) => h('span', {}, h('i', { style: { background: color } }), `${n} ${ms(b[k] || 0)}`))),
    h('p', { class: 'hint' }, `Total ${ms(b.total_ms)}; accounted ${ms(b.accounted_ms)}.`));
}

/** Renders a timeline document; `onPick(span)` opens an attempt's details. */
export function timelinePanel(t, onPick) {
  if (!t.spans.length && !t.waits.length) return h('div', { class: 'empty' }, h('p', {}, 'No attempts yet.'));
  const t0 = new Date(t.created_at);
  const total = Math.max(1, new Date(t.as_of) - t0);
  const byId = new Map(t.spans.map((sp) => [sp.id, sp]));
  const critical = new Set(t.critical_path.filter((p) => p.span).map((p) => p.span));
  const rows = [];
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
    const label = `${w.kind.replace('_', ' ')}${w.step_id ? ` · ${w.step_id}` : ''}`;
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
    h('p', { class: 'hint' }, 'Bars outlined in orange are on the critical path; hatched bars are waits.'),
    breakdown(t.breakdown),
    t.decisions.length ? h('section', {}, h('h3', {}, 'Decisions'),
      h('ol', {}, t.decisions.map((d) => h('li', {}, h('strong', {}, d.kind), ` at seq ${d.seq}`, d.step_id ? ` (${d.step_id})` : '', h('details', {}, h('summary', {}, 'detail'), json(d.detail)))))) : null);
}
