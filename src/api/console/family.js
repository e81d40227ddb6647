// Time travel on the run page: where a fork came from, the family tree of forks around a run,
// the form that forks it (from a checkpoint or before a step, with another input or plan), and
// for a reactive run in progress the way back to an earlier plan version.

import { api } from './api.js';
import { h, clear, shortId, runBadge, loading, errorBox, announce, TERMINAL } from './ui.js';

/** How far up and down the tree the panel follows links. */
const MAX_DEPTH = 6;

/** The `forked from` fact of a fork; null for a run that is no fork. */
export function parentFact(run) {
  const p = run.parent;
  if (!p) return null;
  return h('li', {}, 'forked from ', h('a', { href: `#/runs/${p.run_id}`, 'data-fact': 'parent' }, shortId(p.run_id)),
    ` at checkpoint ${p.checkpoint}${p.before_step ? `, before ${p.before_step}` : ''}`);
}

/** A panel that loads when opened. */
function lazyPanel(title, attrs, load) {
  const panel = h('details', attrs, h('summary', {}, title));
  panel.addEventListener('toggle', async () => {
    if (!panel.open) return;
    panel.querySelector('.lazy-body')?.remove();
    const spot = loading(title.toLowerCase());
    panel.append(spot);
    try {
      spot.replaceWith(h('div', { class: 'lazy-body' }, await load()));
    } catch (err) {
      spot.replaceWith(errorBox(err));
    }
  });
  return panel;
}

/** The run's family: from its first ancestor down, every fork, the run itself in bold. */
export function familyPanel(run) {
  return lazyPanel('Family', { 'data-family': run.id }, async () => {
    let root = run;
    for (let i = 0; root.parent && i < MAX_DEPTH; i++) root = await api(`/v1/runs/${encodeURIComponent(root.parent.run_id)}`);
    return tree(root, run.id, 0);
  });
}

async function tree(node, current, depth) {
  const page = depth < MAX_DEPTH ? await api(`/v1/runs?parent_id=${encodeURIComponent(node.id)}&limit=200`) : { runs: [] };
  const forks = await Promise.all(page.runs.reverse().map((r) => tree(r, current, depth + 1)));
  const name = node.id === current
    ? h('b', { 'aria-current': 'page' }, shortId(node.id))
    : h('a', { href: `#/runs/${node.id}` }, shortId(node.id));
  const from = node.parent ? ` from checkpoint ${node.parent.checkpoint}` : ' (the original)';
  return h('ul', { class: 'family' }, h('li', { 'data-family-run': node.id }, name, ' ', runBadge(node), from, forks));
}

/** What a checkpoint holds, in a few words. */
function holds(c) {
  const s = c.state || {};
  if (s.kind === 'conversation') return `conversation, round ${s.round}`;
  const done = Object.keys(s.steps || {}).concat(Object.keys(s.children || {}));
  return done.length ? `after ${done.slice(-3).join(', ')}${done.length > 3 ? ', …' : ''}` : 'nothing finished';
}

/** Reads a text field as JSON when it parses as JSON, as text otherwise; empty is absent. */
function jsonOrText(value, textAllowed) {
  const v = value.trim();
  if (!v) return undefined;
  try { return JSON.parse(v); } catch { if (textAllowed) return v; throw new Error('the plan is not valid JSON'); }
}

/** Forks the run (and, for a reactive run in progress, takes it back to a version). */
export function forkPanel(run) {
  return lazyPanel('Fork or go back', { 'data-fork': run.id }, async () => {
    const checkpoints = await api(`/v1/runs/${encodeURIComponent(run.id)}/checkpoints?limit=1000`);
    const from = h('select', { id: 'fork-from', name: 'checkpoint' },
      h('option', { value: '' }, 'the latest checkpoint'),
      checkpoints.slice().reverse().map((c) => h('option', { value: String(c.id) }, `checkpoint ${c.id}: ${holds(c)}`)),
      h('option', { value: '0' }, 'the beginning'));
    const step = h('input', { id: 'fork-step', name: 'before_step', autocomplete: 'off', placeholder: 'e.g. outer/each[1]/ask' });
    const input = h('textarea', { id: 'fork-input', name: 'input', rows: '2' });
    const plan = h('textarea', { id: 'fork-plan', name: 'plan', rows: '3' });
    const problem = h('div');
    const form = h('form', { class: 'stack-form', onsubmit: async (e) => {
      e.preventDefault();
      clear(problem);
      try {
        const body = {};
        if (step.value.trim()) body.before_step = step.value.trim();
        else if (from.value !== '') body.checkpoint = Number(from.value);
        const newInput = jsonOrText(input.value, true);
        if (newInput !== undefined) body.input = newInput;
        const newPlan = jsonOrText(plan.value, false);
        if (newPlan !== undefined) body.plan = newPlan;
        const fork = await api(`/v1/runs/${encodeURIComponent(run.id)}/fork`, { method: 'POST', body });
        announce('Forked.');
        location.hash = `#/runs/${fork.id}`;
      } catch (err) {
        clear(problem, errorBox(err));
      }
    } },
    h('label', { for: 'fork-from' }, 'Start from'), from,
    h('label', { for: 'fork-step' }, 'Or before step (its id or path)'), step,
    h('label', { for: 'fork-input' }, 'Another input (JSON or text; empty keeps it)'), input,
    h('label', { for: 'fork-plan' }, 'Another plan (JSON; empty keeps it)'), plan,
    h('p', { class: 'hint' }, 'What finished before the start is kept and not run again; the rest runs in the new run.'),
    h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Fork')), problem);
    return [form, goBack(run)];
  });
}

/** For a reactive run in progress past version 1: back to an earlier version, no model asked. */
function goBack(run) {
  if (run.orchestration !== 'reactive' || TERMINAL.has(run.status) || !(run.plan_version > 1)) return null;
  const version = h('select', { id: 'back-to', name: 'restore_version' },
    Array.from({ length: run.plan_version - 1 }, (_, i) => h('option', { value: String(i + 1) }, `version ${i + 1}`)));
  const said = h('div', { role: 'status' });
  return h('form', { class: 'inline-form', onsubmit: async (e) => {
    e.preventDefault();
    try {
      await api(`/v1/runs/${encodeURIComponent(run.id)}/replan`, { method: 'POST', body: { restore_version: Number(version.value) } });
      clear(said, h('p', { 'data-went-back': version.value }, `Asked: the run goes back to plan version ${version.value}.`));
    } catch (err) {
      clear(said, errorBox(err));
    }
  } },
  h('label', { for: 'back-to' }, 'Go back to plan'), version,
  h('button', { type: 'submit', class: 'ghost' }, 'Go back'), said);
}
