// A plan review (`input_required` of kind `plan_review`): the plan version a model wrote, drawn
// as the Plan tab draws a plan before it runs, approved as it is, edited, or rejected with a
// reason for the planner.

import { api } from './api.js';
import { h, clear, json, errorBox, announce } from './ui.js';
import { planGraph, stepTable } from './graph.js';

/** The review form; `done` is called once an answer is accepted. */
export function reviewForm(runId, pending, done) {
  const status = h('div', { role: 'status' });
  const edit = h('textarea', { id: 'review-plan', name: 'plan', rows: '12' }, JSON.stringify(pending.plan, null, 2));
  const reason = h('input', { id: 'review-reason', name: 'reason', autocomplete: 'off' });
  const send = async (value, button) => {
    button.disabled = true;
    clear(status);
    try {
      await api(`/v1/runs/${encodeURIComponent(runId)}/input`, { method: 'POST', body: { step_id: pending.step_id, value } });
      announce('Review sent');
      done();
    } catch (err) {
      clear(status, errorBox(err));
      button.disabled = false;
    }
  };
  const button = (label, cls, value) => {
    const b = h('button', { type: 'button', class: cls, onclick: () => {
      let v;
      try { v = value(); } catch (err) { clear(status, errorBox(err)); return; }
      if (v) send(v, b);
    } }, label);
    return b;
  };
  return h('section', { class: 'panel ask', 'aria-labelledby': 'review-title', 'data-review': pending.step_id },
    h('h2', { id: 'review-title' }, `Review plan version ${pending.version}`),
    h('p', { class: 'prompt' }, pending.prompt),
    h('div', { class: 'graph-wrap' }, planGraph(pending.plan, new Map(), 'review')),
    h('details', {}, h('summary', {}, 'Steps as a table'), stepTable(pending.plan)),
    h('details', {}, h('summary', {}, 'Plan JSON'), json(pending.plan)),
    h('div', { class: 'actions' }, button('Approve', '', () => ({ decision: 'approve' }))),
    h('details', {}, h('summary', {}, 'Or edit it'),
      h('label', { for: 'review-plan' }, 'Edit the plan (JSON)'), edit,
      h('div', { class: 'actions' }, button('Run my edit', 'ghost', () => ({ decision: 'edit', plan: JSON.parse(edit.value) })))),
    h('label', { for: 'review-reason' }, 'Or reject it, with a reason for the planner'), reason,
    h('div', { class: 'actions' }, button('Reject', 'danger', () => {
      if (!reason.value.trim()) throw new Error('Give the planner a reason.');
      return { decision: 'reject', reason: reason.value.trim() };
    })),
    status);
}
