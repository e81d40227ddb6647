// The plan as a graph (steps left to right by dependency depth, branch edges dashed, the
// children of sequential/parallel/loop steps listed inside their box), every plan version
// with its trigger, and a diff between a version and the one before it.

import { h, s, clear, json } from './ui.js';

const W = 190;
const GAP_X = 60;
const GAP_Y = 18;
const LINE = 16;

function layers(steps) {
  const byId = new Map(steps.map((st) => [st.id, st]));
  const level = new Map();
  const visit = (id, seen = new Set()) => {
    if (level.has(id)) return level.get(id);
    if (seen.has(id)) return 0;
    seen.add(id);
    const deps = (byId.get(id)?.depends_on || []).filter((d) => byId.has(d));
    const l = deps.length ? 1 + Math.max(...deps.map((d) => visit(d, seen))) : 0;
    level.set(id, l);
    return l;
  };
  steps.forEach((st) => visit(st.id));
  const columns = [];
  for (const st of steps) (columns[level.get(st.id)] ||= []).push(st);
  return columns;
}

function children(step) {
  const kids = step.input?.steps;
  return Array.isArray(kids) ? kids : [];
}

function boxHeight(step) {
  const n = Math.min(children(step).length, 6);
  return 44 + (n ? n * LINE + 6 : 0);
}

function branchTargets(step) {
  if (step.kind !== 'branch') return new Set();
  return new Set([...(step.input?.then || []), ...(step.input?.else || [])]);
}

/** The SVG of one plan; `status` maps a top-level step id to its latest status; `name`
 * prefixes the ids inside it, so two graphs can share a page. */
export function planGraph(plan, status = new Map(), name = 'graph') {
  const steps = Array.isArray(plan?.steps) ? plan.steps : [];
  const columns = layers(steps);
  const pos = new Map();
  let height = 0;
  columns.forEach((col, c) => {
    let y = 10;
    for (const st of col) {
      const hgt = boxHeight(st);
      pos.set(st.id, { x: 10 + c * (W + GAP_X), y, h: hgt });
      y += hgt + GAP_Y;
    }
    height = Math.max(height, y);
  });
  const width = 20 + columns.length * (W + GAP_X) - GAP_X;
  const running = steps.filter((st) => status.get(st.id) === 'running').map((st) => st.id);
  const svg = s('svg', { class: 'graph', width, height: Math.max(height, 60), viewBox: `0 0 ${width} ${Math.max(height, 60)}`, role: 'img', 'aria-labelledby': `${name}-title` },
    s('title', { id: `${name}-title` }, `Plan graph: ${steps.length} steps${running.length ? `; running: ${running.join(', ')}` : ''}`),
    s('defs', {}, s('marker', { id: `${name}-arrow`, viewBox: '0 0 10 10', refX: '10', refY: '5', markerWidth: '7', markerHeight: '7', orient: 'auto-start-reverse' },
      s('path', { d: 'M 0 0 L 10 5 L 0 10 z', class: 'arrow' }))));
  for (const st of steps) {
    const to = pos.get(st.id);
    for (const dep of st.depends_on || []) {
      const from = pos.get(dep);
      if (!from) continue;
      const branch = branchTargets(steps.find((x) => x.id === dep) || {}).has(st.id);
      const x1 = from.x + W; const y1 = from.y + 22; const x2 = to.x; const y2 = to.y + 22;
      const mid = (x1 + x2) / 2;
      svg.append(s('path', { class: `edge${branch ? ' branch' : ''}`, d: `M ${x1} ${y1} C ${mid} ${y1}, ${mid} ${y2}, ${x2 - 2} ${y2}`, 'marker-end': `url(#${name}-arrow)` }));
    }
  }
  for (const st of steps) svg.append(node(st, pos.get(st.id), status.get(st.id)));
  return svg;
}

function node(step, p, status) {
  const g = s('g', { class: `node s-${status || 'pending'}`, transform: `translate(${p.x},${p.y})`, 'data-step': step.id },
    s('rect', { width: W, height: p.h, rx: 7 }),
    s('text', { x: 10, y: 19, 'font-weight': '600' }, `${status === 'running' ? '▶ ' : ''}${clip(step.id, 24)}`),
    s('text', { x: 10, y: 35, class: 'kind' }, clip(`${step.kind}${what(step)}${status ? ` · ${status.replace('_', ' ')}` : ''}`, 34)));
  const kids = children(step);
  kids.slice(0, 6).forEach((k, i) => {
    const label = i === 5 && kids.length > 6 ? `+ ${kids.length - 5} more` : `↳ ${clip(k.id, 18)} (${k.kind})`;
    g.append(s('text', { x: 14, y: 54 + i * LINE, class: 'kind' }, label));
  });
  return g;
}

/** What a step calls, after its kind: ` fs.read` for a tool, the agent or function it names. */
function what(step) {
  const i = step.input || {};
  const name = i.tool || i.agent || i.function;
  return typeof name === 'string' ? ` ${name}` : '';
}

function clip(text, n) {
  const t = String(text);
  return t.length > n ? `${t.slice(0, n - 1)}…` : t;
}

/** A table of the same steps, for screen readers and for copying. */
export function stepTable(plan) {
  const steps = Array.isArray(plan?.steps) ? plan.steps : [];
  return h('table', {},
    h('caption', { class: 'sr-only' }, 'Plan steps and their dependencies'),
    h('thead', {}, h('tr', {}, ['Step', 'Kind', 'Depends on', 'Children'].map((t) => h('th', { scope: 'col' }, t)))),
    h('tbody', {}, steps.map((st) => h('tr', {},
      h('td', { class: 'mono' }, st.id), h('td', {}, st.kind),
      h('td', { class: 'mono' }, (st.depends_on || []).join(', ') || '—'),
      h('td', { class: 'mono' }, children(st).map((k) => k.id).join(', ') || '—')))));
}

/** A line diff (longest common subsequence) of two JSON documents, pretty-printed. */
export function jsonDiff(before, after) {
  const a = JSON.stringify(before, null, 2).split('\n');
  const b = JSON.stringify(after, null, 2).split('\n');
  if (a.length * b.length > 4_000_000) return h('p', { class: 'muted' }, 'These plans are too large to compare here.');
  const dp = Array.from({ length: a.length + 1 }, () => new Uint32Array(b.length + 1));
  for (let i = a.length - 1; i >= 0; i--) {
    for (let j = b.length - 1; j >= 0; j--) {
      dp[i][j] = a[i] === b[j] ? dp[i + 1][j + 1] + 1 : Math.max(dp[i + 1][j], dp[i][j + 1]);
    }
  }
  const out = h('div', { class: 'diff', role: 'region', 'aria-label': 'Plan diff', tabindex: '0' });
  let i = 0; let j = 0;
  while (i < a.length || j < b.length) {
    if (i < a.length && j < b.length && a[i] === b[j]) { out.append(h('div', {}, `  ${a[i]}`)); i++; j++; }
    else if (j < b.length && (i >= a.length || dp[i][j + 1] >= dp[i + 1][j])) { out.append(h('div', { class: 'add' }, `+ ${b[j]}`)); j++; }
    else { out.append(h('div', { class: 'del' }, `- ${a[i]}`)); i++; }
  }
  return out;
}

function stepSummary(before, after) {
  const ids = (p) => new Map((p?.steps || []).map((st) => [st.id, JSON.stringify(st)]));
  const a = ids(before); const b = ids(after);
  const added = [...b.keys()].filter((k) => !a.has(k));
  const removed = [...a.keys()].filter((k) => !b.has(k));
  const changed = [...b.keys()].filter((k) => a.has(k) && a.get(k) !== b.get(k));
  const part = (label, list) => (list.length ? h('li', {}, `${label}: `, h('code', {}, list.join(', '))) : null);
  const items = [part('added', added), part('removed', removed), part('changed', changed)].filter(Boolean);
  return items.length ? h('ul', {}, items) : h('p', { class: 'muted' }, 'The steps are the same; settings or output changed.');
}

function trigger(v) {
  const t = v.trigger;
  const rows = [
    ['made because', typeof v.reason === 'string' ? v.reason : JSON.stringify(v.reason)],
    t?.step_id ? ['at step', t.step_id] : null,
    t?.error ? ['error', `${t.error.code}: ${t.error.message}`] : null,
    v.strategy ? ['strategy', v.strategy] : null,
    v.restored_version ? ['restored version', `v${v.restored_version}`] : null,
    v.explanation ? ['explanation', v.explanation] : null,
  ].filter(Boolean);
  return h('dl', { class: 'facts' }, rows.map(([k, val]) => h('div', {}, h('dt', { class: 'muted' }, k), h('dd', { style: { margin: 0 } }, h('b', {}, val)))));
}

function serverDiff(diff) {
  const part = (label, list) => (list?.length ? h('li', {}, `${label}: `, h('code', {}, list.join(', '))) : null);
  const items = [part('added', diff.added), part('removed', diff.removed), part('changed', diff.changed)].filter(Boolean);
  return items.length ? h('ul', {}, items) : h('p', { class: 'muted' }, 'The steps are the same; settings or output changed.');
}

/** The Plan tab: version buttons, the trigger, the graph, a step table and the diff. */
export function planPanel(versions, status, selected, onSelect) {
  if (!versions.length) return h('div', { class: 'empty' }, h('p', {}, 'No plan yet. A plan appears once the run has one.'));
  const current = versions.find((v) => v.version === selected) || versions[versions.length - 1];
  const previous = versions.filter((v) => v.version < current.version).pop();
  const picker = h('div', { class: 'versions', role: 'group', 'aria-label': 'Plan versions' },
    versions.map((v) => h('button', { type: 'button', class: 'ghost', 'aria-pressed': String(v.version === current.version), onclick: () => onSelect(v.version) }, `v${v.version}`)));
  const latestStatus = current.version === versions[versions.length - 1].version ? status : new Map();
  return h('div', {},
    picker,
    h('h3', {}, `Version ${current.version}`),
    trigger(current),
    h('div', { class: 'graph-wrap' }, planGraph(current.plan, latestStatus)),
    h('details', {}, h('summary', {}, 'Steps as a table'), stepTable(current.plan)),
    previous ? h('section', {}, h('h3', {}, `Changes from v${previous.version}`),
      current.diff ? serverDiff(current.diff) : stepSummary(previous.plan, current.plan),
      jsonDiff(previous.plan, current.plan)) : null,
    h('details', {}, h('summary', {}, 'Plan JSON'), json(current.plan)));
}
