// The console's entry point: a hash router (#/runs, #/runs/{id}[/tab], #/new, #/workflows[/{name}],
// #/agents[/{name}], #/tools[/{name}], #/functions[/{name}], #/schedules, #/workers, #/sessions[/{id}]), the navigation's current-page marks and the API-key dialog.
// Every view gets an AbortSignal that fires when the user leaves it, which ends its streams
// and timers.

import { apiKey, setApiKey } from './api.js';
import { h, clear, empty } from './ui.js';
import { runsView, newRunView } from './runs.js';
import { runView } from './run.js';
import { registryView } from './registry.js';
import { schedulesView } from './schedules.js';
import { workersView } from './workers.js';
import { sessionView, sessionsView } from './sessions.js';

let current = null;

function parse(hash) {
  const raw = hash.replace(/^#\/?/, '');
  const [path, query = ''] = raw.split('?');
  return { parts: path.split('/').filter(Boolean).map(decodeURIComponent), params: new URLSearchParams(query) };
}

function markNav(section) {
  for (const a of document.querySelectorAll('[data-nav]')) {
    if (a.dataset.nav === section) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
}

async function route() {
  current?.abort();
  current = new AbortController();
  const { signal } = current;
  const main = document.getElementById('main');
  const { parts, params } = parse(location.hash);
  const [section = 'runs', id, tab] = parts;
  markNav(section === 'runs' && id ? 'runs' : section);
  const titles = { runs: id ? `Run ${id.slice(0, 8)}` : 'Runs', new: 'New run', workflows: id ? `Workflow ${id}` : 'Workflows', agents: id ? `Agent ${id}` : 'Agents', tools: id ? `Tool ${id}` : 'Tools', functions: id ? `Function ${id}` : 'Functions', schedules: 'Schedules', workers: 'Workers and tasks', sessions: id ? `Session ${id}` : 'Sessions' };
  document.title = `${titles[section] || 'Not found'} · orca console`;
  if (section === 'runs' && id) await runView(main, id, tab, signal);
  else if (section === 'runs') await runsView(main, params, signal);
  else if (section === 'new') await newRunView(main, params, signal);
  else if (section === 'schedules') await schedulesView(main, signal);
  else if (section === 'workers') await workersView(main, params, signal);
  else if (section === 'sessions' && id) await sessionView(main, id, signal);
  else if (section === 'sessions') await sessionsView(main, params, signal);
  else if (PAGE_SECTIONS.has(section)) await registryView(main, section, signal, id);
  else clear(main, h('h1', {}, 'Not found'), empty('This console has no such page.', h('a', { href: '#/runs' }, 'Go to the runs')));
  if (!signal.aborted && document.activeElement === document.body) main.focus({ preventScroll: true });
}

const PAGE_SECTIONS = new Set(['workflows', 'agents', 'tools', 'functions']);

function keyDialog() {
  const dialog = document.getElementById('key-dialog');
  const input = document.getElementById('key-input');
  const open = () => {
    input.value = apiKey();
    dialog.returnValue = '';
    if (!dialog.open) dialog.showModal();
    input.focus();
  };
  document.getElementById('key-button').addEventListener('click', open);
  window.addEventListener('orca:unauthorized', open);
  dialog.addEventListener('close', () => {
    if (dialog.returnValue === 'save') setApiKey(input.value.trim(), document.getElementById('key-remember').checked);
    else if (dialog.returnValue === 'clear') setApiKey('', false);
    else return;
    route();
  });
}

window.addEventListener('hashchange', route);
keyDialog();
if (!location.hash) history.replaceState(null, '', '#/runs');
route();
