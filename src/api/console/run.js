// The run page: follows the live event stream (or replays a finished run's history) into one
// state object, and renders it as a header, the human-input form when the run waits, and tabs
// for the activity transcript, the plan graph and versions, the timeline, the step attempts
// and the raw events; its family (forks) and the form that forks it are in `family.js`.

import { api, followEvents, ApiError } from './api.js';
import { h, clear, badge, runBadge, shortId, when, ms, elapsed, json, preview, loading, empty, errorBox, announce, throttle, TERMINAL } from './ui.js';
import { schemaForm } from './form.js';
import { planPanel } from './graph.js';
import { timelinePanel } from './timeline.js';
import { parentFact, familyPanel, forkPanel } from './family.js';
import { reviewForm } from './review.js';
import { definitionsFact } from './versions.js';

/** Coalesces calls into one per animation frame. */
function frame(fn) {
  let queued = false;
  return () => {
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => { queued = false; fn(); });
  };
}

/** How often a live run's duration is redrawn, and (in ticks) its open timeline fetched. */
const TICK_MS = 200;
const TIMELINE_EVERY = 10;

const TABS = [['activity', 'Activity'], ['plan', 'Plan'], ['timeline', 'Timeline'], ['steps', 'Steps'], ['events', 'Events']];

/** The page's state; usage is summed from the events, so a replay counts up as it goes. */
function freshState(run) {
  run.usage = { prompt_tokens: 0, completion_tokens: 0, llm_calls: 0, tool_calls: 0 };
  return {
    run, events: [], plans: [], topStatus: new Map(), entries: [], byCall: new Map(), pending: null,
    stream: 'connecting', selectedVersion: null,
  };
}

const stepKey = (ev) => (ev.path ? `${ev.path}/${ev.step_id}` : ev.step_id || '');

/** Folds one event into the state; returns the transcript entry it touched, if any. */
function apply(st, ev) {
  st.events.push(ev);
  const d = ev.data || {};
  const run = st.run;
  switch (ev.kind) {
    case 'status':
      run.status = d.status;
      if (d.status !== 'waiting_input') st.pending = null;
      if (d.status === 'running' && !run.started_at) run.started_at = ev.ts;
      if (d.status === 'paused') return note(st, 'note', d.message || 'paused');
      // A worker's progress on a task: the status stays `running`.
      if (d.progress) return note(st, 'note', d.message || 'progress');
      return null;
    case 'plan':
      st.plans = st.plans.filter((p) => p.version !== d.version).concat([{ version: d.version, reason: d.reason, plan: d.plan }]);
      run.plan_version = d.version;
      return null;
    case 'step':
      if (!ev.path) st.topStatus.set(d.step_id, d.status === 'running' ? 'running' : d.status);
      if (d.status === 'failed') return note(st, 'fail', `${stepKey(ev)} failed: ${d.error?.code || ''} ${d.error?.message || ''}`);
      return null;
    case 'token':
    case 'json_partial':
      return text(st, ev, d.text || '');
    case 'tool_call': {
      run.usage.tool_calls += 1;
      const entry = { type: 'tool', key: stepKey(ev), tool: d.tool, args: d.arguments, call: d.call_id };
      st.entries.push(entry);
      st.byCall.set(d.call_id, entry);
      return entry;
    }
    case 'tool_result': {
      const entry = st.byCall.get(d.call_id);
      if (!entry) return null;
      Object.assign(entry, 'error' in d ? { error: d.error } : { output: d.output }, { done: true });
      return entry;
    }
    case 'input_required':
      st.pending = { step_id: d.step_id || ev.step_id, prompt: d.prompt, schema: d.schema, kind: d.kind, plan: d.plan, version: d.plan_version };
      st.topStatus.set(ev.step_id, 'waiting');
      return null;
    case 'handoff':
      return note(st, 'note', `handoff ${d.from} → ${d.to}${d.reason ? `: ${d.reason}` : ''}`);
    case 'speaker':
      return note(st, 'note', `round ${d.round}: ${d.agent} speaks`);
    case 'usage':
      run.usage.prompt_tokens += d.prompt_tokens || 0;
      run.usage.completion_tokens += d.completion_tokens || 0;
      run.usage.llm_calls += 1;
      return null;
    case 'error':
      return note(st, 'fail', `${d.step_id ? `${d.step_id}: ` : ''}${d.code}: ${d.message}`);
    case 'final':
      Object.assign(run, {
        status: d.status, completion: d.completion, output: d.output, error: d.error || null,
        completion_reason: d.completion_reason || null, step_counts: d.step_counts || null,
      });
      if (d.usage) run.usage = { ...run.usage, ...d.usage };
      if (!run.finished_at) run.finished_at = ev.ts;
      st.pending = null;
      return null;
    default:
      return null;
  }
}

function note(st, type, textValue) {
  const entry = { type, text: textValue };
  st.entries.push(entry);
  return entry;
}

function text(st, ev, piece) {
  const key = stepKey(ev);
  const last = st.entries[st.entries.length - 1];
  if (last && last.type === 'text' && last.key === key && last.kind === ev.kind) {
    last.text += piece;
    return last;
  }
  const entry = { type: 'text', key, kind: ev.kind, text: piece };
  st.entries.push(entry);
  return entry;
}

function entryView(entry) {
  if (entry.type === 'text') {
    entry.node = h('div', { class: `text${entry.kind === 'json_partial' ? ' mono' : ''}` }, entry.text);
    return h('div', { class: 'entry' }, h('div', { class: 'who' }, h('span', {}, entry.kind === 'json_partial' ? 'structured output' : 'model'), h('code', {}, entry.key)), entry.node);
  }
  if (entry.type === 'tool') return toolView(entry);
  return h('div', { class: `entry ${entry.type === 'fail' ? 'fail' : 'note'}` }, h('div', { class: 'text' }, entry.text));
}

/** A tool call in one line (the tool, its arguments and its result, clipped); the full JSON of
 * both a click away. */
function toolView(entry) {
  const failed = 'error' in entry;
  const result = !entry.done ? h('span', { class: 'muted' }, 'running…')
    : h('span', { class: `mono${failed ? ' bad' : ''}` }, failed ? `error ${preview(entry.error?.message ?? entry.error, 60)}` : preview(entry.output, 60));
  const more = h('details', {},
    h('summary', { 'aria-label': `Tool call ${entry.tool} ${entry.call || ''}`.trim() },
      h('span', { class: 'who' }, 'tool'), h('code', {}, entry.tool), h('span', { class: 'mono args' }, preview(entry.args, 60)), ' → ', result,
      entry.key ? h('code', { class: 'muted step' }, entry.key) : null),
    h('div', { class: 'pair' }, h('div', {}, h('strong', {}, 'arguments'), json(entry.args)),
      entry.done ? h('div', {}, h('strong', {}, failed ? 'error' : 'result'), json(failed ? entry.error : entry.output)) : null));
  return h('div', { class: `entry tool${failed ? ' fail' : ''}` }, more);
}

function facts(run) {
  const u = run.usage || {};
  const item = (label, value) => h('li', {}, `${label} `, h('b', {}, value));
  return h('ul', { class: 'facts' },
    item('orchestration', run.selected?.orchestration || run.orchestration || '—'),
    item('created', when(run.created_at)),
    h('li', {}, 'duration ', h('b', { 'data-fact': 'duration' }, ms(elapsed(run)))),
    item('plan version', run.plan_version ?? '—'),
    item('tokens', `${u.prompt_tokens || 0} in / ${u.completion_tokens || 0} out`),
    item('model calls', u.llm_calls ?? '—'),
    item('tool calls', u.tool_calls ?? '—'),
    run.session_id ? h('li', {}, 'session ', h('a', { href: `#/sessions/${encodeURIComponent(run.session_id)}`, 'data-fact': 'session' }, run.session_id)) : null,
    run.request?.concurrency ? h('li', {}, 'if its session is busy ', h('b', { 'data-fact': 'concurrency' }, run.request.concurrency)) : null,
    run.request?.priority ? h('li', {}, 'priority ', h('b', { 'data-fact': 'priority' }, run.request.priority)) : null,
    parentFact(run),
    definitionsFact(run),
    run.schedule ? h('li', {}, 'schedule ', h('a', { href: '#/schedules', 'data-fact': 'schedule' }, run.schedule.id.slice(0, 8)), ` (tick ${when(run.schedule.fire_at)})`) : null,
    run.completion ? item('completion', run.completion) : null,
    run.completion_reason ? item('because', run.completion_reason) : null,
    run.step_counts ? item('steps', stepCounts(run.step_counts)) : null);
}

/** The run's completion webhook: where it goes, its state and every attempt, loaded when opened. */
function webhookPanel(id) {
  const panel = h('details', { 'data-webhook': id }, h('summary', {}, 'Webhook'));
  panel.addEventListener('toggle', async () => {
    if (!panel.open) return;
    const spot = loading('the webhook');
    panel.querySelector('.webhook-body')?.remove();
    panel.append(spot);
    try {
      const d = await api(`/v1/runs/${encodeURIComponent(id)}/webhook`);
      spot.replaceWith(h('div', { class: 'webhook-body' },
        h('p', {}, h('b', { 'data-webhook-state': d.state }, d.state), ' → ', h('code', {}, d.url)),
        d.attempts.length ? h('ol', {}, d.attempts.map((a) => h('li', { class: 'mono' }, when(a.at), ' · ',
          a.status_code != null ? `HTTP ${a.status_code}` : a.error, ` · ${ms(a.duration_ms)}`))) : h('p', { class: 'muted' }, 'Sent once the run ends.')));
    } catch (err) {
      spot.replaceWith(errorBox(err));
    }
  });
  return panel;
}

/** Why a run ended short: a failure in a red box; a run that succeeded in part in a box of its
 * own, so it never reads as a failed or a plain successful run. */
function endBox(run) {
  if (run.completion !== 'partial') {
    return errorBox(new ApiError(0, { title: `The run ${run.status.replace('_', ' ')}`, detail: run.error.message, code: run.error.code }));
  }
  return h('div', { class: 'panel partial-box', role: 'status', 'data-partial': run.id },
    h('strong', {}, 'The run succeeded only in part'),
    h('p', {}, 'Its output holds what the steps that completed produced; ', run.step_counts ? stepCounts(run.step_counts) : 'some steps did not complete', '.'),
    h('p', {}, 'What did not complete: ', run.error.message),
    run.error.code ? h('p', { class: 'hint' }, 'code: ', h('code', {}, run.error.code)) : null);
}

/** `{completed, failed, skipped}` in words. */
function stepCounts(c) {
  return `${c.completed} completed / ${c.failed} failed / ${c.skipped} skipped`;
}

/** `#/runs/{id}[/tab]`. */
export async function runView(main, id, tab, signal) {
  clear(main, loading('the run'));
  let run;
  try {
    run = await api(`/v1/runs/${encodeURIComponent(id)}`, { signal });
  } catch (err) {
    if (signal.aborted) return;
    if (err instanceof ApiError && err.status === 404) {
      clear(main, h('h1', {}, 'Run not found'), empty(`No run ${id} here (or it belongs to another tenant).`, h('a', { href: '#/runs' }, 'Back to the runs')));
      return;
    }
    clear(main, h('h1', {}, 'Run'), errorBox(err, () => runView(main, id, tab, signal)));
    return;
  }
  new RunPage(main, run, TABS.some(([t]) => t === tab) ? tab : 'activity', signal).start();
}

class RunPage {
  constructor(main, run, tab, signal) {
    this.main = main;
    this.id = run.id;
    this.st = freshState(run);
    this.tab = tab;
    this.signal = signal;
    this.header = h('div');
    this.ask = h('div');
    this.panel = h('div', { role: 'tabpanel', id: 'run-panel', tabindex: '0' });
    this.transcript = h('div', { class: 'transcript', 'aria-live': 'off' });
    this.refreshHeader = frame(() => this.renderHeader());
    this.refreshPanel = throttle(() => this.renderPanel(), 1000);
    // The clock: the duration counts several times a second while the run is running or
    // waiting for input (no event arrives while it waits), and a live run's timeline, whose
    // open attempts and waits end "now", is fetched again every few seconds.
    let ticks = 0;
    const tick = setInterval(() => {
      if (TERMINAL.has(this.st.run.status) || this.st.stream === 'replay') return;
      this.tickDuration();
      if (++ticks % TIMELINE_EVERY === 0 && this.tab === 'timeline') this.refreshPanel();
    }, TICK_MS);
    signal.addEventListener('abort', () => clearInterval(tick), { once: true });
  }

  /** Rewrites the duration fact alone, so a tick never disturbs the rest of the header. */
  tickDuration() {
    const el = this.head?.facts.querySelector('[data-fact="duration"]');
    if (el) el.textContent = ms(elapsed(this.st.run));
  }

  async start() {
    clear(this.main, this.header, this.ask, this.tabs(), this.panel);
    this.renderHeader();
    this.renderPanel();
    try {
      const how = await followEvents(this.id, {
        signal: this.signal,
        onEvent: (ev) => this.onEvent(ev),
        onState: (state) => { this.st.stream = state; this.refreshHeader(); },
      });
      if (how === 'final') { this.st.stream = 'finished'; this.renderAll(); }
    } catch (err) {
      if (!this.signal.aborted) clear(this.ask, errorBox(err));
    }
  }

  onEvent(ev) {
    const before = this.st.run.status;
    const entry = apply(this.st, ev);
    if (entry && this.tab === 'activity') this.showEntry(entry);
    if (ev.kind === 'input_required' || ev.kind === 'final' || (ev.kind === 'status' && before !== this.st.run.status)) {
      this.renderAsk();
      announce(`Run ${this.st.run.status.replace('_', ' ')}`);
    }
    this.refreshHeader();
    if (this.tab !== 'activity' && ['plan', 'step', 'final', 'status'].includes(ev.kind)) this.refreshPanel();
    if (this.tab === 'activity' && ev.kind === 'final') this.renderPanel();
  }

  showEntry(entry) {
    this.placeholder?.remove();
    if (entry.type === 'text' && entry.node && entry.node.isConnected) {
      entry.node.textContent = entry.text;
      return;
    }
    const view = entryView(entry);
    if (entry.view?.querySelector('details')?.open) view.querySelector('details').open = true;
    if (entry.view && entry.view.isConnected) entry.view.replaceWith(view);
    else this.transcript.append(view);
    entry.view = view;
  }

  renderAll() {
    this.renderHeader();
    this.renderAsk();
    this.renderPanel();
  }

  /** The header's parts that change (status, stream state, figures); the rest stays put, so
   * an open disclosure or a focused button survives the stream's updates. */
  renderHeader() {
    const run = this.st.run;
    const live = !TERMINAL.has(run.status);
    if (!this.head) this.buildHeader();
    const streamText = { live: 'following live', reconnecting: 'reconnecting…', connecting: 'connecting…', finished: 'finished', replay: 'replaying' }[this.st.stream] || this.st.stream;
    clear(this.head.status, runBadge(run));
    this.head.stream.className = `stream-state ${this.st.stream === 'live' && live ? 'live' : ''}`;
    this.head.stream.textContent = streamText;
    clear(this.head.facts, facts(run));
    const mode = this.st.stream === 'replay' ? 'replay' : live ? 'live' : 'done';
    if (this.head.mode !== mode) {
      this.head.mode = mode;
      clear(this.head.controls, mode === 'live'
        ? h('span', { class: 'actions', style: { marginTop: '0' } }, this.pauseButton(), this.cancelButton())
        : this.replayControls(mode === 'replay'));
    }
    if (this.head.pause) this.head.pause.textContent = run.status === 'paused' ? 'Resume' : 'Pause';
  }

  buildHeader() {
    const run = this.st.run;
    this.head = { status: h('span', { id: 'run-status' }), stream: h('span'), controls: h('span'), facts: h('div'), notice: h('div'), mode: null };
    const again = run.request ? h('button', {
      type: 'button', class: 'ghost', title: 'Start a new run with this run’s request', onclick: () => this.runAgain(again),
    }, 'Run again') : null;
    clear(this.header,
      h('p', {}, h('a', { href: '#/runs' }, '← Runs')),
      h('div', { class: 'run-head' }, h('h1', { title: run.id }, `Run ${shortId(run.id)}`), this.head.status, this.head.stream, this.head.controls, again),
      this.head.notice,
      this.head.facts,
      h('details', {}, h('summary', {}, 'Input and metadata'), h('h3', {}, 'Input'), json(run.input), h('h3', {}, 'Metadata'), json(run.metadata || {}), h('p', { class: 'hint mono' }, run.id)),
      run.request?.webhook ? webhookPanel(run.id) : null,
      familyPanel(run),
      forkPanel(run));
  }

  /** Starts a new run with this run's request (GET /v1/runs/{id} gives it) and opens it. */
  async runAgain(button) {
    button.disabled = true;
    clear(this.head.notice);
    try {
      const run = await api('/v1/runs', { method: 'POST', body: this.st.run.request });
      location.hash = `#/runs/${run.id}`;
    } catch (err) {
      clear(this.head.notice, errorBox(err));
      button.disabled = false;
    }
  }

  /** Pause (no step starts; the run is `paused` once running ones finish) or Resume. */
  pauseButton() {
    const button = h('button', { type: 'button', class: 'ghost', 'data-pause': this.id, onclick: async () => {
      const what = this.st.run.status === 'paused' ? 'resume' : 'pause';
      button.disabled = true;
      clear(this.head.notice);
      try {
        await api(`/v1/runs/${this.id}/${what}`, { method: 'POST' });
        announce(what === 'pause' ? 'Pausing: running steps finish first' : 'Resuming');
      } catch (err) {
        clear(this.head.notice, errorBox(err));
      }
      button.disabled = false;
    } }, 'Pause');
    this.head.pause = button;
    return button;
  }

  cancelButton() {
    const box = h('span', { class: 'actions', style: { marginTop: '0' } });
    const ask = h('button', { type: 'button', class: 'danger', onclick: () => {
      clear(box, h('span', {}, 'Cancel this run?'),
        h('button', { type: 'button', class: 'danger', onclick: () => this.cancel(box) }, 'Yes, cancel it'),
        h('button', { type: 'button', class: 'ghost', onclick: () => { clear(box, ask); ask.focus(); } }, 'No'));
      box.querySelector('button').focus();
    } }, 'Cancel run');
    box.append(ask);
    return box;
  }

  async cancel(box) {
    try {
      await api(`/v1/runs/${this.id}/cancel`, { method: 'POST' });
      clear(box, h('span', { class: 'muted' }, 'Cancelling…'));
    } catch (err) {
      clear(box, errorBox(err));
    }
  }

  replayControls(playing) {
    const speed = h('select', { id: 'replay-speed', 'aria-label': 'Replay speed' }, ['1', '4', '20'].map((x) => h('option', { value: x, selected: x === '4' }, `${x}×`)));
    return h('span', { class: 'actions', style: { marginTop: '0' } },
      h('button', { type: 'button', class: 'ghost', disabled: playing, onclick: () => this.replay(Number(speed.value)) }, 'Replay'), speed);
  }

  /** Plays the stored events back in time order, scaled, gaps capped at 400 ms. */
  async replay(speed) {
    const events = this.st.events.slice();
    const run = { ...this.st.run, status: 'queued', output: null, error: null, completion: null, completion_reason: null, step_counts: null, finished_at: null };
    this.st = { ...freshState(run), stream: 'replay' };
    clear(this.transcript);
    this.switchTab('activity');
    this.renderAll();
    announce('Replaying the run');
    let prev = events.length ? new Date(events[0].ts) : null;
    for (const ev of events) {
      if (this.signal.aborted) return;
      const gap = Math.min(400, Math.max(0, new Date(ev.ts) - prev)) / speed;
      prev = new Date(ev.ts);
      if (gap >= 4) await new Promise((r) => setTimeout(r, gap));
      this.onEvent(ev);
    }
    this.st.stream = 'finished';
    this.renderAll();
    announce('Replay finished');
  }

  renderAsk() {
    const run = this.st.run;
    const pending = this.st.pending;
    if (pending && run.status === 'waiting_input' && pending.kind === 'plan_review') {
      clear(this.ask, reviewForm(this.id, pending, () => clear(this.ask, h('p', { class: 'panel', role: 'status' }, 'Review sent; the run goes on.'))));
    } else if (pending && run.status === 'waiting_input') {
      clear(this.ask, this.inputForm(pending));
    } else if (TERMINAL.has(run.status)) {
      clear(this.ask, run.error ? endBox(run) : null);
    } else {
      clear(this.ask);
    }
  }

  inputForm(pending) {
    const form = schemaForm(pending.schema);
    const status = h('div');
    const el = h('form', { class: 'panel ask', 'aria-labelledby': 'ask-title' },
      h('h2', { id: 'ask-title' }, 'This run is waiting for your answer'),
      h('p', { class: 'prompt' }, pending.prompt),
      h('p', { class: 'hint' }, 'Step ', h('code', {}, pending.step_id)),
      form.el, h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Send answer')), status);
    el.addEventListener('submit', async (e) => {
      e.preventDefault();
      const [value, problem] = form.read();
      if (problem) { clear(status, errorBox(new ApiError(0, { title: 'The answer needs fixing', detail: problem }))); return; }
      el.querySelector('button[type=submit]').disabled = true;
      try {
        await api(`/v1/runs/${this.id}/input`, { method: 'POST', body: { step_id: pending.step_id, value } });
        clear(this.ask, h('p', { class: 'panel', role: 'status' }, 'Answer sent; the run goes on.'));
      } catch (err) {
        clear(status, errorBox(err));
        el.querySelector('button[type=submit]').disabled = false;
      }
    });
    return el;
  }

  tabs() {
    const list = h('div', { role: 'tablist', 'aria-label': 'Run views' });
    for (const [key, label] of TABS) {
      list.append(h('button', {
        type: 'button', role: 'tab', id: `tab-${key}`, 'aria-controls': 'run-panel',
        'aria-selected': String(key === this.tab), tabindex: key === this.tab ? '0' : '-1',
        onclick: () => this.switchTab(key),
      }, label));
    }
    list.addEventListener('keydown', (e) => {
      const i = TABS.findIndex(([t]) => t === this.tab);
      const step = { ArrowRight: 1, ArrowLeft: -1 }[e.key];
      if (!step) return;
      e.preventDefault();
      const next = TABS[(i + step + TABS.length) % TABS.length][0];
      this.switchTab(next);
      document.getElementById(`tab-${next}`).focus();
    });
    this.tabList = list;
    return list;
  }

  switchTab(key) {
    this.tab = key;
    for (const b of this.tabList.querySelectorAll('[role=tab]')) {
      const on = b.id === `tab-${key}`;
      b.setAttribute('aria-selected', String(on));
      b.tabIndex = on ? 0 : -1;
    }
    this.panel.setAttribute('aria-labelledby', `tab-${key}`);
    history.replaceState(null, '', `#/runs/${this.id}${key === 'activity' ? '' : `/${key}`}`);
    delete this.panel.dataset.view;
    clear(this.panel);
    this.renderPanel();
  }

  /** Re-renders the open tab, keeping which disclosures the user opened and which control
   * had the focus (found again by its accessible name). */
  async renderPanel() {
    const open = [...this.panel.querySelectorAll('details')].map((d) => d.open);
    const active = document.activeElement;
    const focused = active && active !== this.panel && this.panel.contains(active) ? active.getAttribute('aria-label') : null;
    await this.drawPanel();
    this.panel.querySelectorAll('details').forEach((d, i) => { if (open[i]) d.open = true; });
    if (focused && !this.panel.contains(document.activeElement)) {
      [...this.panel.querySelectorAll('[aria-label]')].find((el) => el.getAttribute('aria-label') === focused)?.focus({ preventScroll: true });
    }
  }

  drawPanel() {
    if (!['timeline', 'steps', 'plan'].includes(this.tab)) delete this.panel.dataset.view;
    const views = {
      activity: () => this.activity(),
      plan: () => this.planTab(),
      timeline: () => this.fetched('timeline', (t) => timelinePanel(t, (span) => this.openAttempt(span))),
      steps: () => this.fetched('steps', (rows) => this.stepsTable(rows)),
      events: () => this.eventsTable(),
    };
    return views[this.tab]();
  }

  activity() {
    const run = this.st.run;
    clear(this.transcript);
    for (const entry of this.st.entries) this.showEntry(entry);
    const done = TERMINAL.has(run.status);
    this.placeholder = this.st.entries.length ? null
      : h('p', { class: 'muted' }, done ? 'This run produced no model text or tool calls.' : 'Waiting for the first model token or tool call…');
    clear(this.panel,
      done ? h('section', { class: 'panel', 'aria-labelledby': 'out-title' }, h('h2', { id: 'out-title' }, 'Output'),
        typeof run.output === 'string' ? h('div', { class: 'output', id: 'run-output' }, run.output) : h('div', { id: 'run-output' }, json(run.output))) : null,
      h('h2', {}, 'Activity'),
      this.placeholder,
      this.transcript);
  }

  planTab() {
    const sorted = (list) => [...list].sort((a, b) => a.version - b.version);
    return this.fetched('plans', (versions) => planPanel(sorted(versions.length ? versions : this.st.plans), this.st.topStatus, this.st.selectedVersion, (v) => {
      this.st.selectedVersion = v;
      this.renderPanel();
    }), 'plan');
  }

  /** Loads `/v1/runs/{id}/{what}` and renders it; keeps the last good view while reloading. */
  async fetched(what, render, tab = what) {
    if (this.panel.dataset.view !== what) {
      clear(this.panel, loading(what));
      this.panel.dataset.view = what;
    }
    try {
      const data = await api(`/v1/runs/${this.id}/${what}`, { signal: this.signal });
      if (this.tab !== tab) return;
      clear(this.panel, render(data));
      if (this.openKey) this.expand(this.openKey);
    } catch (err) {
      if (!this.signal.aborted && this.tab === tab) clear(this.panel, errorBox(err, () => this.renderPanel()));
    }
  }

  openAttempt(span) {
    this.openKey = `${span.path ? `${span.path}/` : ''}${span.step_id}#${span.attempt}`;
    this.switchTab('steps');
  }

  expand(key) {
    const row = this.panel.querySelector(`[data-key="${CSS.escape(key)}"] details`);
    if (row) { row.open = true; row.scrollIntoView({ block: 'center' }); row.querySelector('summary').focus(); }
    this.openKey = null;
  }

  stepsTable(rows) {
    if (!rows.length) return empty('No step has started yet.');
    return h('table', {},
      h('caption', { class: 'sr-only' }, 'Step attempts'),
      h('thead', {}, h('tr', {}, ['Step', 'Kind', 'Attempt', 'Status', 'Plan', 'Started', 'Duration', 'Details'].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, rows.map((r) => {
        const key = `${r.path ? `${r.path}/` : ''}${r.step_id}#${r.attempt}`;
        return h('tr', { 'data-key': key },
          h('td', { class: 'mono' }, r.path ? `${r.path}/${r.step_id}` : r.step_id),
          h('td', {}, r.kind), h('td', { class: 'num' }, r.attempt), h('td', {}, badge(r.status)),
          h('td', { class: 'num' }, `v${r.plan_version}`), h('td', {}, when(r.started_at)), h('td', { class: 'num' }, ms(r.duration_ms)),
          h('td', {}, h('details', {}, h('summary', {}, 'input, output, error'),
            h('h3', {}, 'Input'), json(r.input), h('h3', {}, 'Output'), json(r.output),
            r.error ? [h('h3', {}, 'Error'), json(r.error)] : null)));
      })));
  }

  eventsTable() {
    const kinds = ['all', ...new Set(this.st.events.map((e) => e.kind))];
    const pick = h('select', { id: 'ev-kind' }, kinds.map((k) => h('option', { value: k, selected: k === (this.eventKind || 'all') }, k)));
    pick.addEventListener('change', () => { this.eventKind = pick.value; this.eventsTable(); document.getElementById('ev-kind').focus(); });
    const shown = this.st.events.filter((e) => !this.eventKind || this.eventKind === 'all' || e.kind === this.eventKind);
    const last = shown.slice(-500);
    clear(this.panel,
      h('div', { class: 'filters' }, h('div', {}, h('label', { for: 'ev-kind' }, 'Kind'), pick)),
      h('p', { class: 'hint' }, `${shown.length} events${shown.length > last.length ? `; the last ${last.length} are shown` : ''}.`),
      last.length ? h('table', {},
        h('caption', { class: 'sr-only' }, 'Events'),
        h('thead', {}, h('tr', {}, ['seq', 'time', 'kind', 'step', 'data'].map((t) => h('th', { scope: 'col' }, t)))),
        h('tbody', {}, last.map((e) => h('tr', {},
          h('td', { class: 'num' }, e.seq), h('td', {}, new Date(e.ts).toLocaleTimeString()), h('td', {}, e.kind),
          h('td', { class: 'mono' }, stepKey(e) || '—'), h('td', { class: 'mono truncate', title: preview(e.data, 4000) }, preview(e.data, 160)))))) : empty('No events yet.'));
  }
}
