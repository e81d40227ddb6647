// The console's only door to orca: the public /v1 API, with the API key when one is set.
// Errors are problem+json documents turned into ApiError; the event stream is read with
// fetch (EventSource cannot send an Authorization header) and resumes with Last-Event-ID.

const KEY = 'orca.apiKey';

export function apiKey() {
  return sessionStorage.getItem(KEY) || localStorage.getItem(KEY) || '';
}

export function setApiKey(key, remember) {
  sessionStorage.removeItem(KEY);
  localStorage.removeItem(KEY);
  if (key) (remember ? localStorage : sessionStorage).setItem(KEY, key);
}

export class ApiError extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
    this.code = problem.code || 'error';
  }
}

function headers(extra) {
  const out = { accept: 'application/json', ...extra };
  const key = apiKey();
  if (key) out.authorization = `Bearer ${key}`;
  return out;
}

async function failure(res) {
  let problem = {};
  try {
    problem = await res.json();
  } catch {
    problem = {};
  }
  if (res.status === 401) window.dispatchEvent(new CustomEvent('orca:unauthorized'));
  return new ApiError(res.status, { title: res.statusText || `HTTP ${res.status}`, ...problem });
}

/** Calls the API; resolves with the parsed body, rejects with ApiError. */
export async function api(path, { method = 'GET', body, signal } = {}) {
  const init = { method, headers: headers(body === undefined ? {} : { 'content-type': 'application/json' }), signal };
  if (body !== undefined) init.body = JSON.stringify(body);
  let res;
  try {
    res = await fetch(path, init);
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, { title: 'orca did not answer', detail: `${e.message || e}. Is the server still running?`, code: 'unreachable' });
  }
  if (!res.ok) throw await failure(res);
  if (res.status === 204) return null;
  const type = res.headers.get('content-type') || '';
  return type.includes('json') ? res.json() : res.text();
}

const sleep = (ms, signal) => new Promise((resolve) => {
  const t = setTimeout(resolve, ms);
  signal?.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
});

function parseBlock(block) {
  const data = [];
  for (const line of block.split('\n')) {
    if (line.startsWith('data:')) data.push(line.slice(line.startsWith('data: ') ? 6 : 5));
  }
  if (!data.length) return null;
  try {
    return JSON.parse(data.join('\n'));
  } catch {
    return null;
  }
}

async function readStream(res, state, onEvent) {
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return false;
    buf = (buf + value).replace(/\r\n?/g, '\n');
    let cut;
    while ((cut = buf.indexOf('\n\n')) >= 0) {
      const event = parseBlock(buf.slice(0, cut));
      buf = buf.slice(cut + 2);
      if (!event || event.seq <= state.last) continue;
      state.last = event.seq;
      onEvent(event);
      if (event.kind === 'final') return true;
    }
  }
}

/**
 * Follows a run's event stream from `after` until its `final` event, reconnecting with
 * Last-Event-ID when the connection drops. `onState` hears 'live' and 'reconnecting'.
 * Resolves 'final' or 'aborted'; rejects with ApiError on a 4xx (unknown run, bad key).
 */
export async function followEvents(runId, { after = 0, onEvent, onState = () => {}, signal }) {
  const state = { last: after };
  let delay = 300;
  while (!signal.aborted) {
    try {
      const extra = { accept: 'text/event-stream' };
      if (state.last > 0) extra['last-event-id'] = String(state.last);
      const res = await fetch(`/v1/runs/${encodeURIComponent(runId)}/events`, { headers: headers(extra), signal });
      if (!res.ok) {
        const err = await failure(res);
        if (res.status < 500 && res.status !== 429) throw err;
      } else {
        onState('live');
        if (await readStream(res, state, onEvent)) return 'final';
      }
    } catch (e) {
      if (signal.aborted) return 'aborted';
      if (e instanceof ApiError) throw e;
    }
    onState('reconnecting');
    await sleep(delay, signal);
    delay = Math.min(delay * 2, 5000);
  }
  return 'aborted';
}
