// The console's Sessions page in the system's headless Chromium against a running orca:
// the nav link, the list (one row a session, the newest run first, a partial last run said so)
// and a click through to a session. Started by tests/it/finding.rs, which made the sessions.
//
//   node tests/browser/sessions.mjs <base-url> <screenshot-dir> <id of the newest run>
//
// Prints one JSON line ({ok: 'sessions', rows, completion, opened}); exits 1 on the first
// failed expectation.

import { chromium } from 'playwright-core';
import { accessSync, constants, mkdirSync } from 'node:fs';
import { join } from 'node:path';

const [base, shots, lastRun] = process.argv.slice(2);
const CHROMIUM = [process.env.CHROMIUM, '/usr/bin/chromium', '/usr/bin/chromium-browser',
  '/usr/bin/google-chrome', '/usr/bin/google-chrome-stable', '/snap/bin/chromium']
  .find((path) => {
    try { return path && (accessSync(path, constants.X_OK), true); } catch { return false; }
  });
if (!CHROMIUM) {
  console.log(JSON.stringify({ failed: 'no Chromium: run `bash .ci/setup`, or set CHROMIUM=/path/to/chrome' }));
  process.exit(1);
}
const PATIENCE = 20_000;
mkdirSync(shots, { recursive: true });

const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu'] });
const page = await browser.newPage({ viewport: { width: 1366, height: 860 } });
const problems = [];
page.on('pageerror', (e) => problems.push(e.message));
let code = 0;
try {
  await page.goto(`${base}/#/runs`);
  await page.getByRole('link', { name: 'Sessions', exact: true }).click();
  await page.locator('table[data-sessions] tbody tr').first().waitFor({ timeout: PATIENCE });
  const current = await page.locator('[data-nav="sessions"]').getAttribute('aria-current');
  if (current !== 'page') throw new Error(`the Sessions link is not marked current: ${current}`);
  const rows = await page.locator('table[data-sessions] tbody tr').evaluateAll((trs) => trs.map((tr) => tr.dataset.session));
  const newest = page.locator('tr[data-session="newer"]');
  const completion = await newest.locator('[data-completion]').getAttribute('data-completion');
  const linked = await newest.getByRole('link', { name: `Run ${lastRun}` }).count();
  if (linked !== 1) throw new Error('the newest row does not link its last run');
  await page.screenshot({ path: join(shots, 'sessions.png'), fullPage: true });
  await newest.getByRole('link', { name: 'newer', exact: true }).click();
  await page.locator('ul[data-session-runs]').waitFor({ timeout: PATIENCE });
  const opened = (await page.locator('h1').innerText()).trim();
  if (problems.length) throw new Error(`script errors in the page: ${problems.join('; ')}`);
  console.log(JSON.stringify({ ok: 'sessions', rows, completion, opened }));
} catch (e) {
  code = 1;
  console.log(JSON.stringify({ failed: String(e.message || e).split('\n')[0], url: page.url() }));
  await page.screenshot({ path: join(shots, 'failure.png'), fullPage: true }).catch(() => {});
}
await browser.close();
process.exit(code);
