// Workers and tasks (issue 47): the workers of the tenant that polled in the last five minutes
// (`GET /v1/workers`: queues, tools, last poll, tasks in flight) and the worker tools' tasks
// (`GET /v1/tasks`), newest first, filtered by status and queue, a page at a time, each with
// its run, attempts, worker, progress or error, and its arguments and output on demand.

import { api } from './api.js';
import { h, clear, json, loading, empty, errorBox, when, badge, preview, shortId } from './ui.js';

const STATUSES = ['queued', 'claimed', 'completed', 'failed', 'cancelled'];

function workersTable(workers) {
  if (!workers.length) {
    return empty('No worker polled in the last five minutes. Start one (examples/workers/python/worker.py, or any HTTP client of POST /v1/workers/poll).');
  }
  return h('table', { 'data-workers': '' },
    h('caption', { class: 'sr-only' }, 'Workers'),
    h('thead', {}, h('tr', {}, ['Worker', 'Queues', 'Tools', 'Last poll', 'In flight'].map((t) => h('th', { scope: 'col' }, t)))),
    h('tbody', {}, workers.map((w) => h('tr', { 'data-worker': w.worker_id },
      h('td', { class: 'mono' }, w.worker_id),
      h('td', { class: 'mono' }, w.queues.join(', ')),
      h('td', { class: 'mono' }, w.tools.length ? w.tools.join(', ') : 'any of the queue'),
      h('td', { class: 'mono' }, when(w.last_poll_at)),
      h('td', { 'data-in-flight': String(w.in_flight) }, String(w.in_flight))))));
}

/** What a task says now: its error, its last progress, or where it waits. */
function note(t) {
  if (t.error) return h('span', { class: 's-failed' }, `${t.error.code}: ${preview(t.error.message, 80)}`);
  if (t.status === 'claimed' && t.progress != null) return h('span', { 'data-progress': '' }, preview(t.progress, 80));
  if (t.status === 'claimed' && t.lease_expires_at) return h('span', { class: 'muted' }, `lease until ${when(t.lease_expires_at)}`);
  return '';
}

function taskRow(t) {
  const more = h('details', {}, h('summary', { 'aria-label': `Arguments and output of task ${t.id}` }, 'details'),
    h('h3', {}, 'Arguments'), json(t.arguments),
    t.output != null ? [h('h3', {}, 'Output'), json(t.output)] : null,
    t.progress != null ? [h('h3', {}, 'Last progress'), json(t.progress)] : null,
    h('p', { class: 'hint' }, 'idempotency key ', h('code', {}, t.idempotency_key)));
  return h('tr', { 'data-task': t.id, 'data-task-status': t.status },
    h('td', { class: 'mono', title: t.id }, shortId(t.id)),
    h('td', { class: 'mono' }, t.tool),
    h('td', { class: 'mono' }, t.queue),
    h('td', {}, badge(t.status)),
    h('td', { class: 'mono' }, `${t.attempt} of ${t.max_attempts}`),
    h('td', { class: 'mono' }, t.worker_id || '—'),
    h('td', {}, h('a', { href: `#/runs/${encodeURIComponent(t.run_id)}` }, shortId(t.run_id)), ' ',
      h('span', { class: 'mono muted' }, t.path ? `${t.path}/${t.step_id}` : t.step_id)),
    h('td', { class: 'mono' }, when(t.created_at)),
    h('td', {}, note(t), more));
}

export async function workersView(main, params, signal) {
  const status = h('select', { id: 'task-status', name: 'status' },
    h('option', { value: '' }, 'any'),
    STATUSES.map((s) => h('option', { value: s, selected: params.get('status') === s }, s)));
  const queue = h('input', { id: 'task-queue', name: 'queue', value: params.get('queue') || null, autocomplete: 'off', spellcheck: 'false', placeholder: 'every queue' });
  const filters = h('form', { class: 'panel filters', role: 'search', 'aria-label': 'Filter tasks' },
    h('div', { class: 'grid2' },
      h('div', {}, h('label', { for: 'task-status' }, 'Status'), status),
      h('div', {}, h('label', { for: 'task-queue' }, 'Queue'), queue)),
    h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Show tasks')));
  filters.addEventListener('submit', (e) => {
    e.preventDefault();
    const next = new URLSearchParams();
    if (status.value) next.set('status', status.value);
    if (queue.value.trim()) next.set('queue', queue.value.trim());
    const query = next.toString();
    location.hash = `#/workers${query ? `?${query}` : ''}`;
  });
  const workers = h('div', {}, loading('workers'));
  const tasks = h('div', {}, loading('tasks'));
  clear(main, h('div', { class: 'run-head' }, h('h1', {}, 'Workers and tasks'),
    h('button', { type: 'button', class: 'ghost', onclick: () => workersView(main, params, signal) }, 'Refresh')),
  h('h2', {}, 'Workers'), workers, h('h2', {}, 'Tasks'), filters, tasks);
  try {
    const answer = await api('/v1/workers', { signal });
    clear(workers, workersTable(answer.workers));
  } catch (err) {
    if (!signal.aborted) clear(workers, errorBox(err));
  }
  const query = new URLSearchParams({ limit: '50' });
  if (params.get('status')) query.set('status', params.get('status'));
  if (params.get('queue')) query.set('queue', params.get('queue'));
  const body = h('tbody');
  const more = h('div', { class: 'actions' });
  const page = async (cursor) => {
    if (cursor) query.set('cursor', cursor);
    const answer = await api(`/v1/tasks?${query}`, { signal });
    body.append(...answer.tasks.map(taskRow));
    clear(more, answer.next_cursor
      ? h('button', { type: 'button', class: 'ghost', onclick: () => page(answer.next_cursor).catch((err) => clear(more, errorBox(err))) }, 'More tasks')
      : null);
    return answer.tasks.length;
  };
  try {
    if (!(await page(null))) {
      clear(tasks, empty('No task matches. A run queues one each time it calls a worker tool (a tool declared with a queue).'));
      return;
    }
    clear(tasks, h('table', {},
      h('caption', { class: 'sr-only' }, 'Tasks'),
      h('thead', {}, h('tr', {}, ['Task', 'Tool', 'Queue', 'Status', 'Attempt', 'Worker', 'Run and step', 'Queued', ''].map((t) => h('th', { scope: 'col' }, t)))),
      body), more);
  } catch (err) {
    if (!signal.aborted) clear(tasks, errorBox(err, () => workersView(main, params, signal)));
  }
}
