// Drives the orca console in the system's headless Chromium against a running orca.
// Started by tests/it/console.rs, which starts the server and checks what this script did
// through the API afterwards.
//
//   node tests/browser/console.mjs <scenario> <base-url> <screenshot-dir> [key or run id]
//
// Scenarios: `partial` (a run that succeeded in part is marked and filtered), `batch` (runs
// ticked on the list are cancelled, run again and deleted), `options` (every New run option
// and a plan reviewed as a graph), `highlight` (a live run's running step on the plan graph), `registry` (a
// workflow and an agent edited in place),
// `runs` (a streamed run appears live, a human-input run is answered from the
// form, a waiting run is cancelled, a finished run replays, the plan, timeline, steps, list and registries render),
// `plans` (a re-planned run's versions, trigger and diff), `versions` (a workflow's versions,
// their diff, a label moved to v1 and a run of v1), `key` (the console asks for the
// API key and works once given the right one) and `papercuts` (CJK font fallbacks, a waiting
// run's duration ticking, the timeline's axis and 0 ms failures, Run again, the model list,
// the search box; its argument is JSON naming the runs the test made), `tasks` (the workers
// and tasks page: a worker, a claimed task's progress, the status filter, a task's run).
// Prints one JSON line per finding; exits 1 on the first failed expectation.

import { chromium } from 'playwright-core';
import { accessSync, constants, mkdirSync } from 'node:fs';
import { join } from 'node:path';

const [scenario, base, shots, arg] = process.argv.slice(2);
// CHROMIUM, else the usual places (the same list as .ci/setup's).
const CHROMIUM = [process.env.CHROMIUM, '/usr/bin/chromium', '/usr/bin/chromium-browser',
  '/usr/bin/google-chrome', '/usr/bin/google-chrome-stable', '/snap/bin/chromium']
  .find((path) => {
    try { return path && (accessSync(path, constants.X_OK), true); } catch { return false; }
  });
if (!CHROMIUM) {
  console.log(JSON.stringify({ failed: 'no Chromium: run `bash .ci/setup`, or set CHROMIUM=/path/to/chrome' }));
  process.exit(1);
}
const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];
const PATIENCE = 20_000;

mkdirSync(shots, { recursive: true });
const report = (fields) => console.log(JSON.stringify(fields));
function expect(cond, message) {
  if (!cond) throw new Error(message);
}

async function shot(page, name) {
  await page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
  report({ screenshot: name });
}

/** Every visible form control has an accessible name (a label or aria-label). */
async function labelled(page, where) {
  const unlabelled = await page.evaluate(() => [...document.querySelectorAll('input, select, textarea')]
    .filter((el) => el.offsetParent !== null && el.type !== 'hidden')
    .filter((el) => !(el.labels && el.labels.length) && !el.getAttribute('aria-label'))
    .map((el) => el.outerHTML.slice(0, 80)));
  expect(unlabelled.length === 0, `${where}: controls without a label: ${unlabelled.join(' | ')}`);
}

const status = (page) => page.locator('#run-status').innerText();

async function waitStatus(page, wanted) {
  await page.waitForFunction((w) => document.querySelector('#run-status')?.innerText.trim() === w, wanted, { timeout: PATIENCE });
}

function runIdOf(page) {
  const m = /#\/runs\/([0-9a-f-]{36})/.exec(page.url());
  expect(m, `not on a run page: ${page.url()}`);
  return m[1];
}

/**
 * A run whose model streams slowly and holds its reply part-way until `release` (the scripted
 * model's URL) is posted: its text must appear while the run is still running.
 */
async function liveRun(page, release) {
  await page.goto(`${base}/#/new`);
  await labelled(page, 'new run');
  await shot(page, 'new-run');
  await page.getByLabel('Input', { exact: true }).fill('What is 6 times 7? Use a tool.');
  await page.getByLabel('Orchestration').selectOption('simple');
  await page.getByRole('button', { name: 'Start run' }).click();
  await page.waitForURL(/#\/runs\/[0-9a-f-]{36}/, { timeout: PATIENCE });
  const runId = runIdOf(page);
  await page.evaluate(() => { window.sameDocument = true; });
  const call = page.locator('.entry.tool', { hasText: 'math.calculate' });
  await call.waitFor({ timeout: PATIENCE });
  // A tool call is one line (tool, arguments, result); its JSON opens on a click.
  await call.filter({ hasText: '42' }).waitFor({ timeout: PATIENCE });
  const line = await call.boundingBox();
  expect(line.height <= 40, `a tool call takes ${line.height}px, not one line`);
  expect((await call.innerText()).includes('6 * 7'), 'the tool call does not show its arguments');
  await call.locator('summary').click();
  await call.locator('pre.json', { hasText: '"result": 42' }).waitFor({ timeout: PATIENCE });
  // Text on screen while the run is still running: the stream is live, not a replay at the end.
  const partial = await page.waitForFunction(() => {
    const text = [...document.querySelectorAll('.entry .text')].map((e) => e.textContent).join('');
    const running = document.querySelector('#run-status')?.innerText.trim() === 'running';
    return running && text.length > 0 ? text : null;
  }, null, { timeout: PATIENCE, polling: 20 });
  const partialText = await partial.jsonValue();
  await shot(page, 'run-live');
  const released = await fetch(release, { method: 'POST' });
  expect(released.ok, `the scripted model did not take the release: ${released.status}`);
  await waitStatus(page, 'succeeded');
  const output = await page.locator('#run-output').innerText();
  // The model held its reply part-way until the release: what was on screen meanwhile is a
  // strict beginning of the output, on any machine.
  expect(partialText.length < output.length, `the text seen while running (${partialText.length} chars) is not a part of the output (${output.length})`);
  const words = (t) => t.replace(/\s+/g, ' ').trim();
  expect(words(output).startsWith(words(partialText)), 'the live text does not begin the output');
  expect(await page.evaluate(() => window.sameDocument === true), 'the page reloaded');
  const facts = await page.locator('.facts').innerText();
  expect(facts.includes('because the model answered'), `the run's reason is not shown: ${facts}`);
  report({ ok: 'live', run_id: runId, partial: partialText, output });
  return runId;
}

/** A workflow that asks a human: answered through the schema-rendered form. */
async function humanRun(page) {
  await page.goto(`${base}/#/new?workflow=approve-spend`);
  expect(await page.getByLabel('Orchestration').inputValue() === 'fixed', 'a workflow link does not pick fixed');
  // The workflow's input is a form built from its input schema, not a text box.
  await page.getByLabel('amount (required)').fill('120');
  await labelled(page, 'workflow input');
  await page.getByRole('button', { name: 'Start run' }).click();
  await page.waitForURL(/#\/runs\/[0-9a-f-]{36}/, { timeout: PATIENCE });
  const runId = runIdOf(page);
  const form = page.locator('form.ask');
  await form.waitFor({ timeout: PATIENCE });
  expect((await form.innerText()).includes('Approve spending 120'), 'the prompt is not shown');
  await labelled(page, 'input form');
  await shot(page, 'run-input');
  // The server's 422 (a note shorter than the schema allows) is shown, and nothing is lost.
  await form.getByLabel(/approved/).check();
  await form.getByLabel(/note/).fill('ok');
  await form.getByRole('button', { name: 'Send answer' }).click();
  await form.locator('.error-box').waitFor({ timeout: PATIENCE });
  expect(await status(page) === 'waiting input', 'a refused answer changed the status');
  await form.getByLabel(/note/).fill('approved for Q3');
  await form.getByRole('button', { name: 'Send answer' }).click();
  await waitStatus(page, 'succeeded');
  expect((await page.locator('#run-output').innerText()).includes('approved for Q3'), 'the answer is not in the output');
  const facts = await page.locator('.facts').innerText();
  expect(/steps \d+ completed \/ 0 failed \/ \d+ skipped/.test(facts), `the step counts are not shown: ${facts}`);
  report({ ok: 'human', run_id: runId });
  return runId;
}

/** A run waiting for input is cancelled from its page, after a confirmation. */
async function cancelRun(page) {
  await page.goto(`${base}/#/new?workflow=approve-spend`);
  // The JSON box is still there for those who want it.
  await page.getByRole('button', { name: 'Type the input as JSON instead' }).click();
  await page.getByLabel('Input', { exact: true }).fill('{"amount": 5}');
  await page.getByLabel(/The input is JSON/).check();
  await page.getByRole('button', { name: 'Start run' }).click();
  await page.locator('form.ask').waitFor({ timeout: PATIENCE });
  const runId = runIdOf(page);
  await page.getByRole('button', { name: 'Cancel run' }).click();
  await page.getByRole('button', { name: 'Yes, cancel it' }).click();
  await waitStatus(page, 'cancelled');
  expect(await page.locator('form.ask').count() === 0, 'the input form outlived the run');
  report({ ok: 'cancel', run_id: runId });
}

/** A finished run opened fresh shows its history, replays it, and its other tabs render. */
async function finishedRun(page, liveId, humanId) {
  await page.goto(`${base}/#/runs/${liveId}`);
  await waitStatus(page, 'succeeded');
  // The whole history has arrived once the stream says so.
  await page.waitForFunction(() => document.querySelector('.stream-state')?.innerText.includes('finished'), null, { timeout: PATIENCE });
  const output = await page.locator('#run-output').innerText();
  expect((await page.locator('.transcript').innerText()).includes(output.slice(0, 20)), 'the history is not shown');
  // At 1× the replay keeps the run's own pace (the model's text took over a second).
  await page.getByLabel('Replay speed').selectOption('1');
  await page.getByRole('button', { name: 'Replay' }).click();
  await page.waitForFunction(() => document.querySelector('.stream-state')?.innerText.includes('replaying')
    && document.querySelector('#run-status')?.innerText.trim() === 'running', null, { timeout: PATIENCE, polling: 20 });
  await waitStatus(page, 'succeeded');
  expect(await page.locator('#run-output').innerText() === output, 'the replay ends with another output');
  report({ ok: 'replay' });

  await page.goto(`${base}/#/runs/${humanId}/plan`);
  await page.locator('.graph .node').first().waitFor({ timeout: PATIENCE });
  expect(await page.locator('.graph .node').count() === 3, 'the plan graph does not show the 3 steps');
  await shot(page, 'plan');
  // Keyboard: arrows move between tabs.
  await page.getByRole('tab', { name: 'Plan' }).focus();
  await page.keyboard.press('ArrowRight');
  expect(await page.getByRole('tab', { name: 'Timeline' }).getAttribute('aria-selected') === 'true', 'ArrowRight did not select the next tab');
  await page.locator('.gantt .bar').first().waitFor({ timeout: PATIENCE });
  expect(await page.locator('.gantt .bar:not(.wait)').count() >= 3, 'the timeline lacks attempts');
  expect(await page.locator('.gantt .bar.critical').count() >= 1, 'no critical path is marked');
  await shot(page, 'timeline');
  await page.getByRole('tab', { name: 'Steps' }).click();
  const row = page.locator('tr[data-key="approve#1"]');
  await row.waitFor({ timeout: PATIENCE });
  await row.locator('summary').click();
  expect((await row.innerText()).includes('approved for Q3'), 'the attempt output is not shown');
  await shot(page, 'steps');
  report({ ok: 'tabs' });
}

async function listsAndRegistries(page) {
  await page.goto(`${base}/#/runs`);
  await page.locator('tbody tr').first().waitFor({ timeout: PATIENCE });
  expect(await page.locator('tbody tr').count() === 3, 'the list does not show the three runs');
  await page.locator('[data-usage]', { hasText: 'runs in the last minute' }).waitFor({ timeout: PATIENCE });
  await labelled(page, 'runs');
  await shot(page, 'runs');
  await page.getByLabel('Orchestration').selectOption('fixed');
  await page.getByRole('button', { name: 'Apply' }).click();
  await page.waitForFunction(() => document.querySelectorAll('tbody tr').length === 2, null, { timeout: PATIENCE });
  expect(page.url().includes('orchestration=fixed'), 'the filter is not in the address');
  await page.getByLabel(/Metadata/).fill('team=nobody');
  await page.getByRole('button', { name: 'Apply' }).click();
  await page.getByText('No run matches these filters.').waitFor({ timeout: PATIENCE });
  await page.goto(`${base}/#/workflows`);
  await page.getByText('approve-spend').waitFor({ timeout: PATIENCE });
  await shot(page, 'workflows');
  await page.goto(`${base}/#/tools`);
  await page.getByText('math.calculate').waitFor({ timeout: PATIENCE });
  await page.goto(`${base}/#/agents`);
  await page.getByText('No agents registered').waitFor({ timeout: PATIENCE });
  report({ ok: 'lists' });
}

/** A run planned twice: both versions, the trigger of the second and what it changed. */
async function plansScenario(page) {
  await page.goto(`${base}/#/runs/${arg}/plan`);
  const versions = page.getByRole('group', { name: 'Plan versions' });
  await versions.getByRole('button', { name: 'v2' }).waitFor({ timeout: PATIENCE });
  expect(await versions.getByRole('button').count() === 2, 'not two plan versions');
  const text = await page.locator('#run-panel').innerText();
  for (const wanted of ['step_failed', 'file_not_found', 'alternative', 'added: recover']) {
    expect(text.includes(wanted), `the v2 page lacks "${wanted}"`);
  }
  expect(await page.locator('.diff .add').count() > 0 && await page.locator('.diff .del').count() > 0, 'no line diff');
  await shot(page, 'plan-versions');
  await versions.getByRole('button', { name: 'v1' }).click();
  await page.waitForFunction(() => document.querySelectorAll('.graph .node').length === 5, null, { timeout: PATIENCE });
  expect(!(await page.locator('#run-panel').innerText()).includes('Changes from'), 'v1 has no earlier version to compare');
  report({ ok: 'plans' });
}

/** The text of a run page's `duration` fact. */
const durationText = (page) => page.evaluate(() => [...document.querySelectorAll('.facts li')]
  .find((li) => li.textContent.startsWith('duration '))?.querySelector('b')?.textContent ?? null);

/** The body, the transcript and the monospace text name CJK fonts before the generic family. */
async function fontsCheck(page, runId) {
  await page.goto(`${base}/#/runs/${runId}`);
  await waitStatus(page, 'succeeded');
  await page.locator('.entry .text').first().waitFor({ timeout: PATIENCE });
  const families = await page.evaluate(() => Object.fromEntries(
    [['body', 'body'], ['transcript', '.entry .text'], ['json', 'pre.json'], ['code', '.entry .who code']]
      .map(([name, sel]) => [name, getComputedStyle(document.querySelector(sel)).fontFamily])));
  for (const [name, family] of Object.entries(families)) {
    const generic = name === 'body' || name === 'transcript' ? 'sans-serif' : 'monospace';
    for (const font of ['Noto Sans CJK KR', 'Source Han Sans', 'Apple SD Gothic Neo', 'PingFang SC', 'Microsoft YaHei']) {
      const at = family.indexOf(font);
      expect(at >= 0 && at < family.lastIndexOf(generic), `the ${name} font stack lacks ${font} before ${generic}: ${family}`);
    }
  }
  report({ ok: 'fonts', families });
}

/** A waiting run's duration goes on counting, several times a second, on the page and on its
 * timeline (no event comes while it waits). */
async function tickingCheck(page, runId) {
  await page.goto(`${base}/#/runs/${runId}`);
  await waitStatus(page, 'waiting input');
  await page.locator('form.ask').waitFor({ timeout: PATIENCE });
  const before = await durationText(page);
  expect(before && before !== '—', `no duration on a waiting run: ${before}`);
  // Reads a few hundred ms apart differ: four different values within 4 s (1.5 s on an idle
  // machine; a loaded CI machine's browser is slower to draw).
  const seen = await page.waitForFunction(() => {
    const now = [...document.querySelectorAll('.facts li')].find((el) => el.textContent.startsWith('duration '))?.querySelector('b')?.textContent;
    window.durations = window.durations || new Set();
    if (now) window.durations.add(now);
    return window.durations.size >= 4 ? [...window.durations] : null;
  }, null, { timeout: 4_000, polling: 50 }).then((h) => h.jsonValue(), () => null);
  expect(seen, `the duration of a waiting run stood still or crept: ${await page.evaluate(() => [...(window.durations || [])].join(', '))}`);
  // The timeline tab's duration (and its open wait) goes on too.
  await page.getByRole('tab', { name: 'Timeline' }).click();
  const timelineDuration = (was) => {
    const now = [...document.querySelectorAll('#run-panel .facts li')]
      .find((el) => el.textContent.startsWith('duration '))?.querySelector('b')?.textContent;
    return now && now !== was ? now : null;
  };
  const first = await (await page.waitForFunction(timelineDuration, null, { timeout: PATIENCE })).jsonValue();
  const later = await page.waitForFunction(timelineDuration, first, { timeout: 5_000, polling: 100 })
    .then((h) => h.jsonValue(), () => null);
  expect(later, `the timeline of a waiting run stood still at ${first}`);
  report({ ok: 'ticking', seen, timeline: [first, later] });
}

/** The timeline has a labelled time axis, and a 0 ms failure is a visible, marked bar. */
async function axisCheck(page, runId) {
  await page.goto(`${base}/#/runs/${runId}/timeline`);
  await page.locator('.gantt .axis .tick').first().waitFor({ timeout: PATIENCE });
  const labels = await page.locator('.gantt .axis .tick').allInnerTexts();
  expect(labels.length >= 3, `too few ticks: ${labels.join(', ')}`);
  expect(labels.every((l) => /^(0|\d+(\.\d+)? (ms|s|min|h))$/.test(l.trim())), `tick labels without a unit: ${labels.join(', ')}`);
  expect(labels.slice(1).every((l) => l.trim() !== '0'), `ticks repeat 0: ${labels.join(', ')}`);
  expect(await page.getByRole('img', { name: /^Time axis/ }).count() === 1, 'the axis has no accessible name');
  // The panel is drawn again as the run's events arrive: measure once a drawing has settled
  // (a bar caught between two drawings has no box yet). If none ever has, the checks below say so.
  const settled = () => page.waitForFunction(() => {
    const failed = [...document.querySelectorAll('.gantt .bar.s-failed')];
    return failed.length > 0 && failed.every((b) => b.getBoundingClientRect().width >= 5);
  }, null, { timeout: 10_000 }).then(() => true, () => false);
  // Under a loaded CI machine a drawing was twice seen to stay at 0 px (never locally): the
  // page is loaded once more before the checks below, which say what was drawn if it recurs.
  if (!(await settled())) {
    await page.reload();
    await page.locator('.gantt .bar.s-failed').first().waitFor({ timeout: PATIENCE });
    await settled();
  }
  const bars = await page.locator('.gantt .bar.s-failed').evaluateAll((els) => els.map((el) => {
    const box = el.getBoundingClientRect();
    const track = el.parentElement.getBoundingClientRect();
    const css = getComputedStyle(el);
    return {
      width: box.width, right: box.right, trackRight: track.right, title: el.title,
      ring: css.boxShadow, marker: getComputedStyle(el, '::after').content,
      // Said when the width check fails, to tell why.
      drawn: `${el.style.cssText} → ${css.width} (min ${css.minWidth}, ${css.display}); track ${track.width}px`,
    };
  }));
  expect(bars.length >= 1, 'no failed bar');
  for (const bar of bars) {
    expect(/ failed \d+ ms/.test(bar.title), `not a failure's bar: ${bar.title}`);
    expect(bar.width >= 5, `a 0 ms failure is a ${bar.width}px sliver: ${bar.drawn}`);
    expect(bar.right <= bar.trackRight + 0.5, 'the failed bar leaves its track');
    expect(bar.ring !== 'none' && bar.marker.includes('✕'), `the failed bar is not marked: ${bar.ring} ${bar.marker}`);
  }
  await shot(page, 'timeline-axis');
  report({ ok: 'axis', labels, bars });
}

/** A finished run's duration stopped at its finished_at (seconds before this page opened). */
async function stoppedCheck(page, runId) {
  await page.goto(`${base}/#/runs/${runId}`);
  await waitStatus(page, 'succeeded');
  const { shown, took } = await page.evaluate(async (id) => {
    const run = await (await fetch(`/v1/runs/${id}`)).json();
    const text = [...document.querySelectorAll('.facts li')].find((li) => li.textContent.startsWith('duration ')).querySelector('b').textContent;
    return { shown: text, took: new Date(run.finished_at) - new Date(run.created_at) };
  }, runId);
  const m = /^([\d.]+) (ms|s)$/.exec(shown);
  expect(m && Math.abs(Number(m[1]) * (m[2] === 's' ? 1000 : 1) - took) <= 10, `a finished run shows ${shown}, not the ${took} ms it took`);
  report({ ok: 'stopped', shown, took });
}

/** Run again starts a new run with this one's request and opens it. */
async function againCheck(page, runId) {
  await page.goto(`${base}/#/runs/${runId}`);
  await waitStatus(page, 'succeeded');
  const button = page.getByRole('button', { name: 'Run again' });
  expect(await button.count() === 1, 'no Run again button');
  await button.click();
  await page.waitForURL((url) => /#\/runs\/[0-9a-f-]{36}$/.test(url.hash) && !url.hash.includes(runId), { timeout: PATIENCE });
  const again = runIdOf(page);
  await waitStatus(page, 'succeeded');
  expect((await page.locator('h1').innerText()).includes(again.slice(0, 8)), 'the new run is not shown');
  await shot(page, 'run-again');
  report({ ok: 'again', run_id: again });
}

/** The model field lists the server's aliases, the server's default first as the empty choice. */
async function modelCheck(page) {
  await page.goto(`${base}/#/new`);
  await page.locator('#n-input').waitFor({ timeout: PATIENCE });
  const select = page.locator('select#n-model');
  expect(await select.count() === 1, 'the model field is not a list');
  await labelled(page, 'new run');
  const options = await select.locator('option').evaluateAll((els) => els.map((o) => [o.value, o.textContent]));
  expect(options[0][0] === '' && options[0][1].startsWith('server default'), `the first choice is not the server default: ${options[0]}`);
  const aliases = options.slice(1).map(([v]) => v);
  const labels = options.slice(1).map(([, t]) => t);
  expect(labels.includes('alpha-large (offline)') && labels.every((t) => !/offline offline|—/.test(t)), `model labels: ${labels}`);
  expect(JSON.stringify(aliases) === JSON.stringify(['alpha-large', 'default', 'offline', 'zeta-small']), `aliases: ${aliases}`);
  await page.getByLabel('Input', { exact: true }).fill('hello there');
  await page.getByLabel('Orchestration').selectOption('simple');
  await page.getByLabel('Model alias').selectOption('zeta-small');
  await page.getByRole('button', { name: 'Start run' }).click();
  await page.waitForURL(/#\/runs\/[0-9a-f-]{36}$/, { timeout: PATIENCE });
  const runId = runIdOf(page);
  await waitStatus(page, 'succeeded');
  report({ ok: 'model', run_id: runId, options });
}

/** The search box puts `q` in the address and lists the runs whose input has the text. */
async function searchCheck(page) {
  await page.goto(`${base}/#/runs`);
  await page.locator('tbody tr').first().waitFor({ timeout: PATIENCE });
  await labelled(page, 'runs');
  expect(await page.getByLabel('Search inputs').count() === 1, 'no search box');
  // The new page's table, not this one, must be read after searching.
  await page.evaluate(() => { document.querySelector('tbody').dataset.before = 'search'; });
  await page.getByLabel('Search inputs').fill('100%');
  await page.getByRole('button', { name: 'Apply' }).click();
  await page.waitForFunction(() => document.querySelector('tbody:not([data-before])'), null, { timeout: PATIENCE });
  expect(new URL(page.url()).hash.includes('q=100%25'), `the search is not in the address: ${page.url()}`);
  expect(await page.getByLabel('Search inputs').inputValue() === '100%', 'the search box lost its text');
  const rows = await page.locator('tbody tr').evaluateAll((trs) => trs.map((tr) => ({
    id: tr.querySelector('a').getAttribute('href').replace('#/runs/', ''),
    input: tr.querySelector('td.truncate').getAttribute('title'),
  })));
  expect(rows.every((r) => r.input.includes('100%')), `a row without 100%: ${JSON.stringify(rows)}`);
  await shot(page, 'search');
  report({ ok: 'search', run_ids: rows.map((r) => r.id) });
}

async function papercutsScenario(page) {
  const runs = JSON.parse(arg);
  await fontsCheck(page, runs.first);
  await tickingCheck(page, runs.waiting);
  await stoppedCheck(page, runs.first);
  await axisCheck(page, runs.failed);
  await againCheck(page, runs.first);
  await modelCheck(page);
  await searchCheck(page);
}

async function keyScenario(page) {
  await page.goto(`${base}/`);
  const dialog = page.getByRole('dialog', { name: 'API key' });
  await dialog.waitFor({ timeout: PATIENCE });
  await shot(page, 'api-key');
  await dialog.getByLabel('Key', { exact: true }).fill('not-the-key');
  await dialog.getByRole('button', { name: 'Save' }).click();
  await dialog.waitFor({ timeout: PATIENCE });
  await page.locator('.error-box').first().waitFor({ timeout: PATIENCE });
  await dialog.getByLabel('Key', { exact: true }).fill(arg);
  await dialog.getByRole('button', { name: 'Save' }).click();
  await page.getByText('No runs yet.').waitFor({ timeout: PATIENCE });
  expect(!(await dialog.isVisible()), 'the dialog stayed open with the right key');
  report({ ok: 'key' });
}

/** A schedule that has fired: its row, its ticks' runs (one opened, which names the
 * schedule), then Disable, and Delete of another one after a confirmation. */
async function schedulesScenario(page) {
  const [id, other] = arg.split(',');
  page.on('dialog', (d) => d.accept());
  await page.goto(`${base}/#/schedules`);
  const row = page.locator(`tr[data-schedule="${id}"]`);
  await row.waitFor({ timeout: PATIENCE });
  await labelled(page, 'schedules');
  await row.getByText('ticks and runs').click();
  const firstRun = page.locator(`ul[data-fires="${id}"] a`).first();
  await firstRun.waitFor({ timeout: PATIENCE });
  await shot(page, 'schedules');
  await firstRun.click();
  await page.locator('[data-fact="schedule"]').waitFor({ timeout: PATIENCE });
  await page.goto(`${base}/#/schedules`);
  await row.getByRole('button', { name: 'Disable' }).click();
  await page.locator(`tr[data-schedule="${id}"] td[data-enabled="false"]`).waitFor({ timeout: PATIENCE });
  await page.locator(`tr[data-schedule="${other}"]`).getByRole('button', { name: 'Delete' }).click();
  await page.locator(`tr[data-schedule="${other}"]`).waitFor({ state: 'detached', timeout: PATIENCE });
  // Created from the form: a cron schedule in a time zone, its run body as JSON.
  await page.getByRole('button', { name: 'New schedule' }).click();
  const form = page.locator('form[data-schedule-form="new"]');
  await labelled(page, 'new schedule');
  await form.getByLabel('Name (optional)').fill('weekday mornings');
  await form.getByLabel('Runs', { exact: true }).selectOption('cron');
  await form.getByLabel(/Cron expression/).fill('30 8 * * 1-5');
  await form.getByLabel('Time zone (IANA)').fill('Europe/Paris');
  await form.getByLabel(/Run body/).fill('{"input": "morning report", "orchestration": "simple"}');
  // A wrong expression is the server's 422, shown in the form.
  await form.getByLabel(/Cron expression/).fill('30 8 * *');
  await form.getByRole('button', { name: 'Create schedule' }).click();
  await form.locator('.error-box', { hasText: 'cron' }).waitFor({ timeout: PATIENCE });
  await form.getByLabel(/Cron expression/).fill('30 8 * * 1-5');
  await form.getByRole('button', { name: 'Create schedule' }).click();
  const made = page.locator('tr[data-schedule]', { hasText: 'weekday mornings' });
  await made.waitFor({ timeout: PATIENCE });
  // Edited: another name and an interval.
  await made.getByRole('button', { name: 'Edit weekday mornings' }).click();
  const edit = page.locator('form[data-schedule-form]:not([data-schedule-form="new"])');
  expect(await edit.getByLabel(/Cron expression/).inputValue() === '30 8 * * 1-5', 'the edit form lost the cron expression');
  await edit.getByLabel('Name (optional)').fill('every two hours');
  await edit.getByLabel('Runs', { exact: true }).selectOption('interval');
  await edit.getByLabel(/Every/).fill('7200');
  await edit.getByRole('button', { name: 'Save schedule' }).click();
  await page.locator('tr[data-schedule]', { hasText: 'every two hours' }).locator('td', { hasText: 'every 2 h' }).waitFor({ timeout: PATIENCE });
  await shot(page, 'schedules-edited');
  report({ ok: 'schedules' });
}

/** A finished run's completion webhook: its state and attempts, opened from the run page. */
async function webhookScenario(page) {
  await page.goto(`${base}/#/runs/${arg}`);
  await page.locator(`details[data-webhook="${arg}"] summary`).click();
  await page.locator('[data-webhook-state="delivered"]').waitFor({ timeout: PATIENCE });
  await shot(page, 'webhook');
  report({ ok: 'webhook' });
}

/** A session's page, opened from one of its runs: its runs, and a variable set in the form. */
async function sessionScenario(page) {
  await page.goto(`${base}/#/runs/${arg}`);
  expect(await page.locator('[data-fact="concurrency"]').innerText() === 'enqueue', 'the run page does not show its session policy');
  await page.locator('[data-fact="session"]').click();
  await page.locator('ul[data-session-runs] a').first().waitFor({ timeout: PATIENCE });
  // A turn's text input is shown as text, not as a JSON string.
  const said = await page.locator('ol[data-history] li').first().locator('.turn').first().innerText();
  expect(said === 'x', `the history shows the input as ${JSON.stringify(said)}`);
  await labelled(page, 'session');
  await page.getByLabel('Name').fill('topic');
  await page.getByLabel('Value (JSON or text)').fill('{"animal": "cats"}');
  await page.getByRole('button', { name: 'Set' }).click();
  await page.locator('tr[data-variable="topic"]').waitFor({ timeout: PATIENCE });
  await page.getByRole('button', { name: 'Delete n' }).click();
  await page.locator('tr[data-variable="n"]').waitFor({ state: 'detached', timeout: PATIENCE });
  await shot(page, 'session');
  report({ ok: 'session' });
}

/** Time travel: a fork's page names its parent and shows the family tree; the parent's page
 * forks it from checkpoint 1 with another input; a reactive run goes back to version 1. */
async function forkScenario(page) {
  const [parent, fork, reactive] = arg.split(',');
  await page.goto(`${base}/#/runs/${fork}`);
  await page.locator('[data-fact="parent"]').waitFor({ timeout: PATIENCE });
  await page.locator(`details[data-family="${fork}"] summary`).click();
  await page.locator(`li[data-family-run="${parent}"] [aria-current="page"]`).waitFor({ timeout: PATIENCE });
  await shot(page, 'family');
  await page.locator('[data-fact="parent"]').click();
  await page.locator(`details[data-fork="${parent}"] summary`).waitFor({ timeout: PATIENCE });
  await page.locator(`details[data-fork="${parent}"] summary`).click();
  await page.getByLabel('Start from').selectOption('1');
  await labelled(page, 'fork');
  await page.getByLabel('Another input (JSON or text; empty keeps it)').fill('{"n": 5}');
  await page.getByRole('button', { name: 'Fork', exact: true }).click();
  await page.waitForURL((url) => !url.hash.includes(parent), { timeout: PATIENCE });
  await page.locator('[data-fact="parent"]').waitFor({ timeout: PATIENCE });
  const made = page.url().split('#/runs/')[1];
  await page.goto(`${base}/#/runs/${reactive}`);
  await page.locator(`details[data-fork="${reactive}"] summary`).click();
  await page.getByLabel('Go back to plan').selectOption('1');
  await page.getByRole('button', { name: 'Go back' }).click();
  await page.locator('[data-went-back="1"]').waitFor({ timeout: PATIENCE });
  await shot(page, 'fork');
  report({ ok: 'fork', made });
}

/** A run waiting for an answer: Pause, answer it, it is paused; Resume, it finishes. */
async function pauseScenario(page) {
  await page.goto(`${base}/#/runs/${arg}`);
  const button = page.locator(`[data-pause="${arg}"]`);
  await button.waitFor({ timeout: PATIENCE });
  expect((await button.innerText()).trim() === 'Pause', 'a running run offers Pause');
  await button.click();
  // The answer goes only once the pause is stored (the button is enabled again when its POST
  // has been answered): sent first, it would let `next` start before the pause.
  await page.waitForFunction((id) => document.querySelector(`[data-pause="${id}"]`)?.disabled === false, arg, { timeout: PATIENCE });
  await page.locator('textarea[name="answer"]').fill('"yes"');
  await page.getByRole('button', { name: 'Send answer' }).click();
  await waitStatus(page, 'paused');
  await page.waitForFunction((id) => document.querySelector(`[data-pause="${id}"]`)?.innerText.trim() === 'Resume', arg, { timeout: PATIENCE });
  await shot(page, 'paused');
  await button.click();
  await waitStatus(page, 'succeeded');
  report({ ok: 'pause' });
}

/** A plan waiting for review: the plan is shown; an empty rejection is refused; Approve runs it. */
async function reviewScenario(page) {
  await page.goto(`${base}/#/runs/${arg}`);
  const review = page.locator('section[data-review]');
  await review.waitFor({ timeout: PATIENCE });
  await labelled(page, 'review');
  // The plan under review is drawn as the Plan tab draws it, its JSON folded away.
  await review.locator('.graph .node[data-step="one"]').waitFor({ timeout: PATIENCE });
  expect((await review.locator('.graph .node').textContent()).includes('tool math.calculate'), 'the graph does not show what the step calls');
  expect(!(await review.locator('pre.json').isVisible()), 'the plan under review is raw JSON');
  await review.getByRole('button', { name: 'Reject' }).click();
  await review.getByText('Give the planner a reason.').waitFor({ timeout: PATIENCE });
  await shot(page, 'review');
  await review.getByRole('button', { name: 'Approve' }).click();
  await waitStatus(page, 'succeeded');
  report({ ok: 'review' });
}

/** A run that succeeded in part is marked so on the list and its page, and found by a filter. */
async function partialScenario(page) {
  const { partial, plain } = JSON.parse(arg);
  await page.goto(`${base}/#/runs`);
  const badgeOf = (id) => page.locator(`tr[data-run="${id}"] .badge`).innerText();
  await page.locator(`tr[data-run="${partial}"]`).waitFor({ timeout: PATIENCE });
  expect(await badgeOf(partial) === 'succeeded · partial', `the partial run's badge reads ${await badgeOf(partial)}`);
  expect(await badgeOf(plain) === 'succeeded', `the plain run's badge reads ${await badgeOf(plain)}`);
  await labelled(page, 'runs');
  await page.evaluate(() => { document.querySelector('tbody').dataset.before = 'filter'; });
  await page.getByLabel('Completion').selectOption('partial');
  await page.getByRole('button', { name: 'Apply' }).click();
  await page.waitForFunction(() => document.querySelector('tbody:not([data-before])'), null, { timeout: PATIENCE });
  expect(page.url().includes('completion=partial'), `the filter is not in the address: ${page.url()}`);
  const shown = await page.locator('tbody tr').evaluateAll((trs) => trs.map((tr) => tr.dataset.run));
  expect(JSON.stringify(shown) === JSON.stringify([partial]), `the partial filter shows ${shown}`);
  await shot(page, 'runs-partial');
  await page.locator(`tr[data-run="${partial}"] a`).click();
  await page.locator('.partial-box').waitFor({ timeout: PATIENCE });
  expect((await status(page)).trim() === 'succeeded · partial', `the run page's badge reads ${await status(page)}`);
  const box = await page.locator('.partial-box').innerText();
  expect(box.includes('The run succeeded only in part') && box.includes('1 completed / 1 failed'), `the partial box says: ${box}`);
  expect(await page.locator('.error-box').count() === 0, 'a partial run shows an error box');
  expect(!(await page.locator('main').innerText()).includes('The run succeeded\n'), 'a partial run is titled a success');
  await shot(page, 'run-partial');
  report({ ok: 'partial', shown });
}

/** Runs ticked on the list: two waiting ones cancelled, a finished one run again, then deleted. */
async function batchScenario(page) {
  const { waiting, done } = JSON.parse(arg);
  page.on('dialog', (d) => d.accept());
  await page.goto(`${base}/#/runs`);
  const tick = (id) => page.locator(`input[data-select="${id}"]`).check();
  await page.locator(`tr[data-run="${done}"]`).waitFor({ timeout: PATIENCE });
  await labelled(page, 'runs');
  expect(await page.getByRole('button', { name: 'Cancel selected' }).isDisabled(), 'a batch action is offered with nothing ticked');
  for (const id of waiting) await tick(id);
  await page.getByText('2 selected').waitFor({ timeout: PATIENCE });
  await page.getByRole('button', { name: 'Cancel selected' }).click();
  await page.locator('[data-batch-done="cancelled"]', { hasText: 'Cancelled 2 of 2 run(s).' }).waitFor({ timeout: PATIENCE });
  for (const id of waiting) {
    await page.waitForFunction((i) => document.querySelector(`tr[data-run="${i}"] .badge`)?.innerText === 'cancelled', id, { timeout: PATIENCE });
  }
  await tick(done);
  await page.getByRole('button', { name: 'Re-run selected' }).click();
  const made = page.locator('[data-batch-done="started again"] [data-new-run]');
  await made.waitFor({ timeout: PATIENCE });
  const again = await made.getAttribute('data-new-run');
  await page.locator(`tr[data-run="${again}"]`).waitFor({ timeout: PATIENCE });
  await shot(page, 'runs-batch');
  await tick(done);
  await page.getByRole('button', { name: 'Delete selected' }).click();
  await page.locator('[data-batch-done="deleted"]', { hasText: 'Deleted 1 of 1 run(s).' }).waitFor({ timeout: PATIENCE });
  await page.locator(`tr[data-run="${done}"]`).waitFor({ state: 'detached', timeout: PATIENCE });
  report({ ok: 'batch', again });
}

/** The New run form sets review, priority, session, its policy and a webhook; the plan
 * under review is drawn as a graph and approved. */
async function optionsScenario(page) {
  await page.goto(`${base}/#/new`);
  await page.locator('#n-input').waitFor({ timeout: PATIENCE });
  await labelled(page, 'new run');
  await page.getByLabel('Input', { exact: true }).fill('read notes.txt then write a summary');
  await page.getByLabel('Orchestration').selectOption('planner');
  await page.getByLabel('Review each plan a model writes before it runs').check();
  await page.getByLabel(/^Priority/).fill('7');
  await page.getByLabel('Session id (optional)').fill('options-1');
  await page.getByLabel('If the session has a run in progress').selectOption('enqueue');
  await page.getByLabel(/^Webhook URL/).fill(arg);
  await shot(page, 'new-run-options');
  await page.getByRole('button', { name: 'Start run' }).click();
  await page.waitForURL(/#\/runs\/[0-9a-f-]{36}/, { timeout: PATIENCE });
  const runId = runIdOf(page);
  const review = page.locator('section[data-review]');
  await review.locator('.graph .node').first().waitFor({ timeout: PATIENCE });
  expect(!(await review.locator('pre.json').isVisible()), 'the plan under review is raw JSON');
  await shot(page, 'review-graph');
  await review.getByRole('button', { name: 'Approve' }).click();
  await page.waitForFunction(() => !['waiting input', 'running', 'queued'].includes(document.querySelector('#run-status')?.innerText.trim()), null, { timeout: PATIENCE });
  report({ ok: 'options', run_id: runId });
}

/** A live run's plan graph marks the step running now, and stops once it ends. */
async function highlightScenario(page) {
  await page.goto(`${base}/#/runs/${arg}/plan`);
  const running = page.locator('.graph .node.s-running');
  await page.locator('.graph .node.s-running[data-step="hold"]').waitFor({ timeout: PATIENCE });
  expect(await running.count() === 1, 'not one step marked running');
  expect((await running.textContent()).startsWith('▶'), 'the running step is not marked ▶');
  const fills = await page.evaluate(() => Object.fromEntries(['hold', 'then'].map((id) => [id,
    getComputedStyle(document.querySelector(`.graph .node[data-step="${id}"] rect`)).fill])));
  expect(fills.hold !== fills.then, `the running step is filled as a pending one: ${JSON.stringify(fills)}`);
  expect((await page.locator('.graph title').textContent()).includes('running: hold'), 'the graph does not name the running step');
  await shot(page, 'plan-running');
  await page.getByRole('button', { name: 'Cancel run' }).click();
  await page.getByRole('button', { name: 'Yes, cancel it' }).click();
  await waitStatus(page, 'cancelled');
  await page.waitForFunction(() => document.querySelectorAll('.graph .node.s-running').length === 0, null, { timeout: PATIENCE });
  report({ ok: 'highlight', fills });
}

/** Changes a definition in its editor: `change` gets the parsed JSON and changes it. */
async function editDefinition(page, name, change) {
  const form = page.locator(`form[data-editor="${name}"]`);
  const text = form.getByLabel(`Definition of ${name} (JSON)`);
  await page.waitForFunction((n) => document.querySelector(`form[data-editor="${n}"] textarea`)?.value.startsWith('{'), name, { timeout: PATIENCE });
  const definition = JSON.parse(await text.inputValue());
  change(definition);
  await text.fill(JSON.stringify(definition, null, 2));
  await form.getByRole('button', { name: 'Save' }).click();
  return form;
}

/** A workflow and an agent edited in place; a definition the server refuses keeps the editor open
 * with its problems. */
async function registryScenario(page) {
  await page.goto(`${base}/#/workflows`);
  await page.getByRole('button', { name: 'Edit approve-spend' }).click();
  await labelled(page, 'workflow editor');
  const form = await editDefinition(page, 'approve-spend', (d) => { d.steps[0].input.tool = 'math.calculat'; });
  await form.locator('.error-box', { hasText: 'math.calculat' }).waitFor({ timeout: PATIENCE });
  await shot(page, 'workflow-refused');
  await editDefinition(page, 'approve-spend', (d) => { d.steps[0].input.tool = 'math.calculate'; d.description = 'Quote, ask, record: edited in the console.'; });
  await page.locator('tr[data-item="approve-spend"]', { hasText: 'edited in the console' }).waitFor({ timeout: PATIENCE });
  await page.goto(`${base}/#/agents`);
  await page.getByRole('button', { name: 'Edit researcher' }).click();
  await editDefinition(page, 'researcher', (d) => { d.instructions = 'You research, and cite.'; d.description = 'Finds facts, edited.'; });
  await page.locator('tr[data-item="researcher"]', { hasText: 'Finds facts, edited.' }).waitFor({ timeout: PATIENCE });
  await shot(page, 'agent-edited');
  report({ ok: 'registry' });
}

/** A workflow stored twice: its two versions, the diff between them both ways, the label
 * `production` pointed at v1 (the rollback), and a run of v1 started from its row, whose page
 * names the version it used. */
async function versionsScenario(page) {
  await page.goto(`${base}/#/workflows/approve-spend`);
  const panel = page.locator('section[data-versions="approve-spend"]');
  const rows = panel.locator('tr[data-version]');
  await rows.nth(1).waitFor({ timeout: PATIENCE });
  const history = await rows.allInnerTexts();
  expect(history.length === 2, `the history shows ${history.length} versions, not 2`);
  expect(history[0].startsWith('v2') && history[0].includes('latest'), `the latest is not first and marked: ${history[0]}`);
  expect(history[0].includes('Say what changed') && history[0].includes('the-test'), `v2's message and author are not shown: ${history[0]}`);
  const diff = panel.getByRole('region', { name: 'Changes from v1 to v2' });
  await diff.waitFor({ timeout: PATIENCE });
  const lines = await diff.locator('div').allInnerTexts();
  expect(lines.some((l) => l.startsWith('replace /description → "Quote, ask, record: the second version."')), `the diff does not show the description: ${lines.join(' | ')}`);
  await labelled(page, 'versions');
  await shot(page, 'versions');
  await panel.getByLabel('From', { exact: true }).selectOption('2');
  await panel.getByLabel('To', { exact: true }).selectOption('1');
  await panel.getByRole('region', { name: 'Changes from v2 to v1' }).locator('div', { hasText: 'Quote an amount with tax' }).waitFor({ timeout: PATIENCE });

  await panel.getByLabel('Label', { exact: true }).fill('production');
  await panel.getByLabel('Points at').selectOption('1');
  await panel.getByRole('button', { name: 'Move label' }).click();
  await panel.locator('tr[data-version="1"] [data-label="production"]').waitFor({ timeout: PATIENCE });
  const labels = await panel.locator('[data-labels]').innerText();
  expect(labels.includes('production → v1'), `the labels read: ${labels}`);
  await shot(page, 'versions-label');

  await panel.getByRole('link', { name: 'Run approve-spend version 1' }).click();
  await page.waitForURL(/#\/new\?workflow=approve-spend%401$/, { timeout: PATIENCE });
  expect(await page.getByLabel('Workflow (for fixed)').inputValue() === 'approve-spend@1', 'the form does not pick version 1');
  expect(await page.getByLabel('Orchestration').inputValue() === 'fixed', 'a version link does not pick fixed');
  await page.getByLabel('amount (required)').fill('50');
  await page.getByRole('button', { name: 'Start run' }).click();
  await page.waitForURL(/#\/runs\/[0-9a-f-]{36}/, { timeout: PATIENCE });
  const runId = runIdOf(page);
  const fact = page.locator('[data-fact="definitions"]');
  await fact.waitFor({ timeout: PATIENCE });
  const used = await fact.innerText();
  expect(used.includes('workflow approve-spend v1'), `the run page does not name v1: ${used}`);
  const link = await fact.getByRole('link', { name: 'approve-spend v1' }).getAttribute('href');
  expect(link === '#/workflows/approve-spend', `the definition links to ${link}`);
  await shot(page, 'versions-run');

  // A declared LLM function has versions too; a built-in one says why it has none.
  await page.goto(`${base}/#/functions/shout`);
  const fn = page.locator('section[data-versions="shout"]');
  await fn.locator('tr[data-version]').nth(1).waitFor({ timeout: PATIENCE });
  // The diff is fetched after the history is drawn: wait for it before reading its lines.
  const fnRegion = fn.getByRole('region', { name: 'Changes from v1 to v2' });
  await fnRegion.waitFor({ timeout: PATIENCE });
  const fnDiff = await fnRegion.locator('div').allInnerTexts();
  expect(fnDiff.some((l) => l.startsWith('replace /prompt')), `the function's diff: ${fnDiff.join(' | ')}`);
  const planner = page.locator('tr[data-item="planner"]');
  expect((await planner.innerText()).includes('built in'), 'the planner is not marked built in');
  await planner.getByRole('button', { name: 'Versions of planner' }).click();
  await page.getByText('Configured functions keep no versions').waitFor({ timeout: PATIENCE });
  await shot(page, 'versions-function');
  report({ ok: 'versions', run_id: runId, fact: used, diff: lines, function_diff: fnDiff });
}

/** Workers and tasks: the worker that polled, a claimed task with its progress and a queued
 * one, the status filter, a task's details, and its run's page. */
async function tasksScenario(page) {
  const [queuedId, claimedId, runId] = arg.split(',');
  await page.goto(`${base}/#/workers`);
  const worker = page.locator('tr[data-worker="w-console"]');
  await worker.waitFor({ timeout: PATIENCE });
  const inFlight = await worker.locator('td[data-in-flight]').innerText();
  expect(inFlight === '1', `the worker's tasks in flight: ${inFlight}`);
  const claimed = page.locator(`tr[data-task="${claimedId}"]`);
  await claimed.waitFor({ timeout: PATIENCE });
  await page.locator(`tr[data-task="${queuedId}"][data-task-status="queued"]`).waitFor({ timeout: PATIENCE });
  const progress = await claimed.locator('[data-progress]').innerText();
  expect(progress.includes('"done":1'), `the claimed task's progress: ${progress}`);
  expect((await claimed.innerText()).includes('1 of 3'), 'the attempt is not shown as 1 of 3');
  await labelled(page, 'workers');
  await shot(page, 'tasks');
  // Only the claimed ones: the filter goes to the URL and back into the form.
  await page.getByLabel('Status').selectOption('claimed');
  await page.getByRole('button', { name: 'Show tasks' }).click();
  await page.locator(`tr[data-task="${queuedId}"]`).waitFor({ state: 'detached', timeout: PATIENCE });
  expect(page.url().includes('status=claimed'), `the filter is not in the URL: ${page.url()}`);
  expect(await page.getByLabel('Status').inputValue() === 'claimed', 'the form forgot the filter');
  await claimed.getByText('details').click();
  const args = await claimed.locator('pre.json').first().innerText();
  expect(args.includes('"text"'), `the task's arguments: ${args}`);
  await claimed.getByRole('link').first().click();
  await page.waitForURL(`**/#/runs/${runId}`, { timeout: PATIENCE });
  report({ ok: 'tasks', progress });
}

const browser = await chromium.launch({ executablePath: CHROMIUM, args: ARGS });
const page = await browser.newPage({ viewport: { width: 1366, height: 860 } });
const problems = [];
page.on('pageerror', (e) => problems.push(e.message));
let code = 0;
try {
  if (scenario === 'runs') {
    const liveId = await liveRun(page, JSON.parse(arg).release);
    const humanId = await humanRun(page);
    await cancelRun(page);
    await finishedRun(page, liveId, humanId);
    await listsAndRegistries(page);
  } else if (scenario === 'plans') {
    await plansScenario(page);
  } else if (scenario === 'versions') {
    await versionsScenario(page);
  } else if (scenario === 'key') {
    await keyScenario(page);
  } else if (scenario === 'session') {
    await sessionScenario(page);
  } else if (scenario === 'webhook') {
    await webhookScenario(page);
  } else if (scenario === 'review') {
    await reviewScenario(page);
  } else if (scenario === 'pause') {
    await pauseScenario(page);
  } else if (scenario === 'fork') {
    await forkScenario(page);
  } else if (scenario === 'schedules') {
    await schedulesScenario(page);
  } else if (scenario === 'tasks') {
    await tasksScenario(page);
  } else if (scenario === 'partial') {
    await partialScenario(page);
  } else if (scenario === 'batch') {
    await batchScenario(page);
  } else if (scenario === 'options') {
    await optionsScenario(page);
  } else if (scenario === 'registry') {
    await registryScenario(page);
  } else if (scenario === 'highlight') {
    await highlightScenario(page);
  } else if (scenario === 'papercuts') {
    await papercutsScenario(page);
  } else {
    throw new Error(`unknown scenario ${scenario}`);
  }
  expect(problems.length === 0, `script errors in the page: ${problems.join('; ')}`);
} catch (e) {
  code = 1;
  report({ failed: String(e.message || e).split('\n')[0], url: page.url() });
  await page.screenshot({ path: join(shots, 'failure.png'), fullPage: true }).catch(() => {});
}
await browser.close();
process.exit(code);
