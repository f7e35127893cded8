// The operator console in a real browser (Debian's Chromium through
// playwright-core), against a server that console/browser-test/run.sh started
// and seeded. Every page is screenshotted into SCREENSHOT_DIR and checked with
// axe-core: a serious or critical violation fails the run.
//
//   CONSOLE_URL=http://localhost:PORT/console/ node --test console.test.mjs
//
// The tests run in order and share the seeded data (run.sh): each action's
// test acts on its own operation, the read-only checks come before them.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { mkdirSync, readFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { chromium } from 'playwright-core';

const require = createRequire(import.meta.url);
const AXE_PATH = require.resolve('axe-core/axe.min.js');
const AXE = readFileSync(AXE_PATH, 'utf8');
const CONSOLE_URL = process.env.CONSOLE_URL;
if (!CONSOLE_URL) throw new Error('CONSOLE_URL is not set (run it through run.sh)');
const ORIGIN = new URL(CONSOLE_URL).origin;
const SCREENSHOT_DIR = path.resolve(
  process.env.SCREENSHOT_DIR ?? path.join(path.dirname(new URL(import.meta.url).pathname), 'screenshots'),
);
const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
const BULK_TOTAL = Number(process.env.BULK_TOTAL ?? 40);
const NS = 'payments';
const KEYS = { alice: 'alice-key', riley: 'riley-key' };
const RUN = Date.now().toString(36); // makes each reason unique to this run

mkdirSync(SCREENSHOT_DIR, { recursive: true });

let browser;
let admin; // alice's browser context, signed in once
const a11y = []; // { page, id, impact, help, targets }
const audited = [];
const browserErrors = []; // uncaught page errors and failed asset loads

const url = (p) => new URL(p, ORIGIN).href;
const opPath = (key, ns = NS) => `/console/operations/${encodeURIComponent(ns)}/${encodeURIComponent(key)}`;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function watch(page) {
  page.on('pageerror', (error) => browserErrors.push(`${page.url()}: uncaught ${error.message}`));
  // The console's own markup must live with its Content-Security-Policy.
  page.on('console', (message) => {
    if (message.type() === 'error' && /Content Security Policy/i.test(message.text())) {
      browserErrors.push(`${page.url()}: ${message.text()}`);
    }
  });
  page.on('response', (response) => {
    if (response.url().includes('/console/assets/') && response.status() >= 400) {
      browserErrors.push(`${response.url()}: ${response.status()}`);
    }
  });
  return page;
}

async function newContext() {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, locale: 'en-GB' });
  context.setDefaultTimeout(10_000);
  context.setDefaultNavigationTimeout(15_000);
  return context;
}

async function newPage(context) {
  return watch(await context.newPage());
}

/** Signs in through the form; the page is left on the overview. */
async function signIn(context, key) {
  const page = await newPage(context);
  await page.goto(url('/console/sign-in'));
  await page.getByLabel('API key').fill(key);
  await Promise.all([
    page.waitForURL((u) => u.pathname === '/console/'),
    page.locator('#sign-in').getByRole('button', { name: 'Sign in' }).click(),
  ]);
  return page;
}

/** GET a console page; asserts a 2xx answer after redirects. */
async function visit(page, p, { status = 200 } = {}) {
  const response = await page.goto(url(p));
  assert.ok(response, `no response for ${p}`);
  assert.equal(response.status(), status, `GET ${p}: HTTP ${response.status()} at ${page.url()}`);
  return response;
}

async function shot(page, name) {
  await page.screenshot({ path: path.join(SCREENSHOT_DIR, name), fullPage: true });
}

/**
 * axe-core on the page as it is; serious and critical violations are kept for
 * the last test. The console's Content-Security-Policy (script-src 'self')
 * refuses an injected <script> (page.addScriptTag), so axe.min.js from
 * node_modules is evaluated through the DevTools protocol instead, which the
 * policy does not govern: the pages are audited with their CSP in force.
 */
async function audit(page, name) {
  if (!(await page.evaluate(() => typeof window.axe === 'object'))) await page.evaluate(AXE);
  const result = await page.evaluate(async () => {
    // eslint-disable-next-line no-undef
    const r = await axe.run(document, { resultTypes: ['violations'] });
    return r.violations.map((v) => ({
      id: v.id,
      impact: v.impact,
      help: v.help,
      targets: v.nodes.map((n) => `${n.target.join(' ')}  ${n.html.slice(0, 160)}`),
    }));
  });
  audited.push(name);
  for (const v of result) {
    if (v.impact === 'serious' || v.impact === 'critical') {
      a11y.push({ page: name, url: page.url(), ...v });
      console.log(`axe ${v.impact} on ${name}: ${v.id} (${v.help})\n    ${v.targets.join('\n    ')}`);
    }
  }
}

/** The page's common frame: main landmark, skip link, nav, sign-out when signed in. */
async function checkFrame(page, { signedIn = true } = {}) {
  assert.equal(await page.locator('main#main').count(), 1, 'one <main id="main">');
  const skip = page.locator('a[href="#main"]');
  assert.ok((await skip.count()) >= 1, 'a skip link to #main');
  // Signed out, the navigation may be left out: its links would only lead back to sign-in.
  if (signedIn) {
    const nav = page.locator('nav');
    for (const name of ['Overview', 'Operations', 'Due work', 'Jobs']) {
      assert.ok((await nav.getByRole('link', { name, exact: true }).count()) >= 1, `nav link "${name}"`);
    }
  }
  const signOut = page.locator('form#sign-out');
  if (signedIn) {
    assert.equal(await signOut.count(), 1, 'a #sign-out form when signed in');
    assert.equal(await signOut.getByRole('button', { name: 'Sign out' }).count(), 1, 'a "Sign out" button');
  } else {
    assert.equal(await signOut.count(), 0, 'no #sign-out form when signed out');
  }
}

async function h1(page) {
  return (await page.locator('h1').first().textContent()).trim();
}

/** The keys of the rows of table#operations. */
async function rowKeys(page) {
  return page.locator('table#operations tr[data-key]').evaluateAll((rows) => rows.map((r) => r.dataset.key));
}

/** Sets a field of a form whatever its kind (input or select). */
async function setField(form, name, value) {
  const field = form.locator(`[name="${name}"]`).first();
  const tag = await field.evaluate((el) => el.tagName.toLowerCase());
  if (tag === 'select') await field.selectOption(value);
  else await field.fill(value);
}

async function submitButton(form) {
  return form.locator('button[type=submit], input[type=submit], button:not([type])').first();
}

/**
 * A POST from the page (its cookies, its origin) with the fields given: a form
 * built in the page and submitted, as a forged or replayed submission would
 * be. (fetch is not an option: the console's CSP has no connect-src.)
 * Answers the POST's own status and Location, and where the page ended up.
 */
async function postFromPage(page, action, fields) {
  const entries = Array.isArray(fields) ? fields : Object.entries(fields);
  const target = new URL(action, page.url()).href;
  const [landed] = await Promise.all([
    page.waitForNavigation({ waitUntil: 'load' }),
    page
      .evaluate(
        ({ target, entries }) => {
          const form = document.createElement('form');
          form.method = 'post';
          form.setAttribute('action', target);
          for (const [name, value] of entries) {
            const input = document.createElement('input');
            input.type = 'hidden';
            input.name = name;
            input.value = value;
            form.append(input);
          }
          document.body.append(form);
          HTMLFormElement.prototype.submit.call(form);
        },
        { target, entries },
      )
      .catch((error) => {
        if (!/context|navigat/i.test(error.message)) throw error;
      }),
  ]);
  const response = await postResponse(landed);
  assert.equal(new URL(response.url()).pathname, new URL(target).pathname, 'the POST is the one sent');
  return { status: response.status(), location: response.headers().location ?? null, url: page.url() };
}

/** The response to the POST that began a navigation, however many redirects followed. */
async function postResponse(landed) {
  let request = landed.request();
  while (request.redirectedFrom()) request = request.redirectedFrom();
  assert.equal(request.method(), 'POST');
  return request.response();
}

/** The csrf token that the page's own forms carry, if any. */
async function pageCsrf(page) {
  return page.evaluate(() => document.querySelector('input[name=csrf]')?.value ?? null);
}

/** The audit rows of the operation page: { action, operator, principal, reason }. */
async function auditRows(page) {
  return page.locator('table#audit tbody tr').evaluateAll((rows) =>
    rows.map((row) => {
      const cell = (name) => row.querySelector(`[data-cell="${name}"]`)?.textContent.trim() ?? null;
      return { action: cell('action'), operator: cell('operator'), principal: cell('principal'), reason: cell('reason') };
    }),
  );
}

async function statusText(page) {
  return (await page.locator('#status').textContent()).trim();
}

/** From the operation page: the action link, the confirmation page, Confirm, back to the operation. */
async function act(page, key, action, fill, screenshotName) {
  await visit(page, opPath(key));
  const link = page.locator(`a[data-action="${action}"]`);
  assert.equal(await link.count(), 1, `an a[data-action=${action}] on ${key}`);
  await Promise.all([page.waitForURL((u) => u.pathname.endsWith('/act')), link.click()]);
  assert.equal(new URL(page.url()).searchParams.get('action'), action);
  const change = (await page.locator('#change').textContent()).trim();
  const form = page.locator('form#act');
  assert.equal(await form.count(), 1, 'a form#act');
  assert.equal((await form.getAttribute('method'))?.toLowerCase(), 'post', 'form#act posts');
  const reason = page.getByLabel('Reason', { exact: true });
  assert.equal(await reason.getAttribute('id'), 'reason', 'the "Reason" label names textarea#reason');
  assert.equal(await reason.evaluate((el) => el.tagName.toLowerCase()), 'textarea');
  assert.ok(await reason.evaluate((el) => el.required), 'the reason is required');
  assert.ok((await form.locator('input[type=hidden][name=csrf]').inputValue()).length > 0, 'a hidden csrf');
  const why = `${action} ${key} from the browser test ${RUN}`;
  await reason.fill(why);
  if (fill) await fill(page);
  await checkFrame(page);
  if (screenshotName) await shot(page, screenshotName);
  await audit(page, `confirm ${action}`);
  await Promise.all([
    page.waitForURL((u) => u.pathname === opPath(key)),
    form.getByRole('button', { name: 'Confirm' }).click(),
  ]);
  const rows = await auditRows(page);
  const row = rows.find((r) => r.reason === why);
  assert.ok(row, `the audit row with reason "${why}" is on the operation page at once; rows: ${JSON.stringify(rows)}`);
  assert.match(row.action, new RegExp(action, 'i'), `audit action cell: ${row.action}`);
  assert.equal(row.operator, 'alice', 'audit operator');
  assert.equal(row.principal, 'alice', 'audit principal');
  return { change, status: await statusText(page) };
}

/** Reads the job page, retrying while it reloads itself. */
async function readJob(page, jobPath) {
  for (let attempt = 0; ; attempt++) {
    try {
      await page.goto(url(jobPath));
      return await page.evaluate(() => {
        const progress = document.querySelector('#job-progress');
        const text = document.querySelector('#job-status')?.textContent ?? '';
        return {
          value: Number(progress?.getAttribute('value')),
          max: Number(progress?.getAttribute('max')),
          status: (text.match(/\b(running|aborted|finished)\b/i) ?? [''])[0].toLowerCase(),
          statusText: text.trim(),
          counts: document.querySelector('#job-counts')?.textContent.trim() ?? '',
        };
      });
    } catch (error) {
      if (attempt >= 5 || !/context|navigat|Target closed/i.test(error.message)) throw error;
      await sleep(100);
    }
  }
}

/** The figures of #job-counts: "12 of 40 processed: 11 acted on, 1 skipped". */
function counts(state) {
  const figures = state.counts.match(/(\d+) of (\d+) processed: (\d+) acted on, (\d+) skipped/);
  assert.ok(figures, `#job-counts says "N of M processed: A acted on, K skipped": ${state.counts}`);
  const [handled, total, acted, skipped] = figures.slice(1).map(Number);
  assert.equal(acted + skipped, handled, 'processed = acted on + skipped');
  return { handled, total, skipped };
}

/** Clicks a button of a job-page form, retrying if the page reloads itself in between. */
async function clickJobButton(page, jobPath, formId, name) {
  for (let attempt = 0; ; attempt++) {
    try {
      await page.goto(url(jobPath));
      const button = page.locator(`form#${formId}`).getByRole('button', { name });
      // A click that went through before the page reloaded itself leaves no form.
      if (attempt > 0 && (await button.count()) === 0) return;
      assert.equal(await button.count(), 1, `a form#${formId} with a "${name}" button`);
      const [landed] = await Promise.all([
        page.waitForNavigation({ waitUntil: 'load', timeout: 5_000 }),
        button.click({ timeout: 2_000 }),
      ]);
      const response = await postResponse(landed);
      assert.ok(response.status() < 400, `${name}: HTTP ${response.status()}`);
      return;
    } catch (error) {
      if (attempt >= 5 || error instanceof assert.AssertionError) throw error;
      await sleep(100);
    }
  }
}

before(async () => {
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
  admin = await newContext();
  const page = await signIn(admin, KEYS.alice);
  await page.close();
});

after(async () => {
  await browser?.close();
});

test('sign-in page: the form, labelled; a wrong key answers 401 with the alert', async () => {
  const context = await newContext();
  try {
    const page = await newPage(context);
    // No session: the console sends to the sign-in page.
    await page.goto(CONSOLE_URL);
    assert.equal(new URL(page.url()).pathname, '/console/sign-in', 'no session: /console/ redirects to the sign-in page');
    await checkFrame(page, { signedIn: false });
    const form = page.locator('form#sign-in');
    assert.equal(await form.count(), 1, 'a form#sign-in');
    const key = page.getByLabel('API key');
    assert.equal(await key.getAttribute('id'), 'api-key');
    assert.equal(await key.getAttribute('name'), 'api_key');
    assert.equal(await key.getAttribute('type'), 'password');
    assert.equal(await form.getByRole('button', { name: 'Sign in' }).count(), 1);
    await shot(page, 'sign-in.png');
    await audit(page, 'sign-in');

    await key.fill('not-a-known-key');
    const [response] = await Promise.all([
      page.waitForResponse((r) => r.request().method() === 'POST' && new URL(r.url()).pathname === '/console/sign-in'),
      form.getByRole('button', { name: 'Sign in' }).click(),
    ]);
    assert.equal(response.status(), 401, 'a wrong key answers 401');
    await page.waitForLoadState('load');
    const alert = page.locator('[role=alert]');
    assert.equal(await alert.count(), 1, 'one [role=alert]');
    assert.match(await alert.textContent(), /That key is not known\./);
    assert.equal(await page.locator('form#sign-in').count(), 1, 'the form again');
    const cookies = await context.cookies();
    assert.ok(!cookies.some((c) => /session/i.test(c.name) && c.value), 'no session cookie after a wrong key');
    await shot(page, 'sign-in-refused.png');
    await audit(page, 'sign-in refused');
  } finally {
    await context.close();
  }
});

test('sign in and sign out: after sign-out /console/ redirects to the sign-in page, a POST is 401', async () => {
  const context = await newContext();
  try {
    const page = await signIn(context, KEYS.alice);
    assert.equal(await h1(page), 'Overview');
    await checkFrame(page);
    const cookies = await context.cookies();
    assert.ok(cookies.length >= 1, 'a session cookie');
    for (const cookie of cookies) {
      assert.ok(cookie.httpOnly, `cookie ${cookie.name} is HttpOnly`);
      assert.ok(cookie.secure, `cookie ${cookie.name} is Secure`);
      assert.ok(['Strict', 'Lax'].includes(cookie.sameSite), `cookie ${cookie.name} is SameSite=${cookie.sameSite}`);
    }
    const session = await context.cookies();
    const [landed] = await Promise.all([
      page.waitForNavigation({ waitUntil: 'load' }),
      page.locator('form#sign-out').getByRole('button', { name: 'Sign out' }).click(),
    ]);
    const out = await postResponse(landed);
    assert.ok(out.status() < 400, `sign-out answered ${out.status()}`);
    await page.goto(CONSOLE_URL);
    assert.equal(new URL(page.url()).pathname, '/console/sign-in', 'signed out: /console/ redirects to sign-in');
    const answer = await postFromPage(page, url('/console/jobs'), { action: 'hold', scope: 'filter', reason: 'x' });
    assert.equal(answer.status, 401, 'no session: a POST answers 401');
    // The old session is gone on the server too, not only from the browser.
    const replay = await newContext();
    try {
      await replay.addCookies(session);
      const response = await replay.request.get(CONSOLE_URL, { maxRedirects: 0 });
      assert.equal(response.status(), 303, 'the signed-out session cookie no longer works');
      assert.match(response.headers().location ?? '', /\/console\/sign-in$/);
    } finally {
      await replay.close();
    }
  } finally {
    await context.close();
  }
});

test('overview: a row per namespace with the gauges, the chart, the stylesheet', async () => {
  const page = await newPage(admin);
  const row = page.locator('table#overview tr[data-namespace="payments"]');
  const number = async (cell) =>
    Number.parseFloat((await row.locator(`[data-cell="${cell}"]`).first().textContent()).replace(/[^0-9.]/g, ''));
  // The figures come from the gauges, refreshed every second: wait for the seeded data.
  const deadline = Date.now() + 15_000;
  let last;
  for (;;) {
    const response = await visit(page, '/console/');
    void response;
    if ((await row.count()) === 1) {
      last = {
        in_progress: await number('in_progress'),
        unknown: await number('unknown'),
        dead: await number('dead'),
        retry_scheduled: await number('retry_scheduled'),
        expired_lease: await number('expired_lease'),
      };
      if (last.in_progress >= BULK_TOTAL + 1 && last.unknown >= 2 && last.dead >= 1 && last.retry_scheduled >= 1 && last.expired_lease >= 1) break;
    }
    if (Date.now() > deadline) assert.fail(`the overview did not show the seeded data: ${JSON.stringify(last)}`);
    await sleep(500);
  }
  assert.equal(await h1(page), 'Overview');
  await checkFrame(page);
  for (const cell of ['in_progress', 'retry_scheduled', 'unknown', 'dead', 'held', 'expired_lease', 'oldest_unknown', 'oldest_due', 'hit_rate', 'amplification']) {
    assert.ok((await row.locator(`[data-cell="${cell}"]`).count()) >= 1, `cell data-cell=${cell}`);
  }
  assert.equal(await page.locator('table#overview tr[data-namespace="ledger"]').count(), 1, 'a row for ledger too');
  assert.equal(await page.locator('svg#chart').count(), 1, 'svg#chart');
  const css = await page.evaluate(() =>
    [...document.styleSheets].map((s) => ({ href: s.href, rules: (() => { try { return s.cssRules.length; } catch { return -1; } })() })),
  );
  assert.ok(css.some((s) => s.href?.endsWith('/console/assets/console.css') && s.rules > 0), `console.css is applied: ${JSON.stringify(css)}`);
  await shot(page, 'overview.png');
  await audit(page, 'overview');
  await page.close();
});

test('operations: filtering by status and by prefix', async () => {
  const page = await newPage(admin);
  await visit(page, `/console/operations?namespace=${NS}`);
  assert.equal(await h1(page), 'Operations');
  await checkFrame(page);
  const filters = page.locator('form#filters');
  assert.equal(await filters.count(), 1, 'form#filters');
  assert.equal((await filters.getAttribute('method') ?? 'get').toLowerCase(), 'get');
  for (const name of ['namespace', 'status', 'prefix', 'owner', 'older_than', 'held']) {
    const field = filters.locator(`[name="${name}"]`);
    assert.ok((await field.count()) >= 1, `filter field ${name}`);
    const labelled = await field.first().evaluate((el) => el.labels?.length > 0 || !!el.getAttribute('aria-label'));
    assert.ok(labelled, `filter field ${name} is labelled`);
  }
  // Through the form, as a person would: status = unknown.
  await setField(filters, 'status', 'unknown');
  await Promise.all([page.waitForURL((u) => u.searchParams.get('status') === 'unknown'), (await submitButton(filters)).click()]);
  const unknown = await rowKeys(page);
  assert.deepEqual([...unknown].sort(), ['pay-unknown', 'pay-unknown-2'], `status=unknown lists only the unknown ones: ${unknown}`);
  for (const key of unknown) {
    const row = page.locator(`table#operations tr[data-key="${key}"]`);
    assert.equal(await row.locator(`a[href$="${opPath(key)}"]`).count(), 1, `row ${key} links to its page`);
    assert.equal(await row.locator(`input[type=checkbox][name=key][value="${key}"]`).count(), 1, `row ${key} has its checkbox`);
  }

  // Prefix.
  await visit(page, `/console/operations?namespace=${NS}&status=finished&prefix=pay-`);
  const finished = await rowKeys(page);
  assert.deepEqual(finished, ['pay-failed', 'pay-succeeded'], `finished, by key: ${finished}`);
  await visit(page, `/console/operations?namespace=${NS}&status=unfinished&prefix=bulk-&size=100`);
  const bulk = await rowKeys(page);
  assert.equal(bulk.length, BULK_TOTAL, `prefix bulk- lists the ${BULK_TOTAL}: ${bulk.length}`);
  assert.ok(bulk.every((k) => k.startsWith('bulk-')), 'only keys under the prefix');
  await visit(page, `/console/operations?namespace=${NS}&status=unfinished`);
  await shot(page, 'operations.png');
  await audit(page, 'operations');
  await page.close();
});

test('operations: pages of 5 through a[rel=next], no key twice', async () => {
  const page = await newPage(admin);
  await visit(page, `/console/operations?namespace=${NS}&status=in_progress&prefix=bulk-&size=5`);
  const seen = [];
  let pages = 0;
  for (;;) {
    pages += 1;
    const keys = await rowKeys(page);
    assert.ok(keys.length >= 1 && keys.length <= 5, `page ${pages} has 1 to 5 rows: ${keys.length}`);
    seen.push(...keys);
    const next = page.locator('a[rel=next]');
    if ((await next.count()) === 0) break;
    assert.match(await next.first().textContent(), /Next page/);
    assert.ok(pages < 20, 'paging ends');
    if (pages === 2) await audit(page, 'operations page 2');
    const here = page.url();
    await Promise.all([page.waitForURL((u) => u.href !== here), next.first().click()]);
    assert.equal(new URL(page.url()).searchParams.get('size'), '5', 'the next page keeps the size');
  }
  assert.equal(new Set(seen).size, seen.length, `no key twice: ${seen}`);
  assert.equal(seen.length, BULK_TOTAL, `every bulk- operation once over ${pages} pages`);
  assert.deepEqual(seen, [...seen].sort(), 'oldest first (seeded in key order)');
  await page.close();
});

test('operations on a phone-width screen (390x844)', async () => {
  const page = await newPage(admin);
  await page.setViewportSize({ width: 390, height: 844 });
  await visit(page, `/console/operations?namespace=${NS}&status=unfinished`);
  await shot(page, 'operations-phone.png');
  await page.screenshot({ path: path.join(SCREENSHOT_DIR, 'operations-phone-first-screen.png') });
  await audit(page, 'operations (phone)');
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  if (overflow > 0) console.log(`note: the operations page is ${overflow}px wider than a 390px screen`);
  // The key is what an operator reads and taps: it may wrap at its
  // punctuation (pay-unknown- / 2), never inside a word (pay- / un / kno / wn).
  const broken = await page.locator('table#operations tr[data-key]').evaluateAll((rows) =>
    rows
      .map((row) => {
        const text = document.createTreeWalker(row.querySelector('a'), NodeFilter.SHOW_TEXT).nextNode();
        if (!text) return { key: row.dataset.key, breaks: [] };
        const tops = [...text.textContent].map((_, i) => {
          const range = document.createRange();
          range.setStart(text, i);
          range.setEnd(text, i + 1);
          return Math.round(range.getBoundingClientRect().top);
        });
        const breaks = [];
        for (let i = 1; i < tops.length; i++) {
          if (tops[i] > tops[i - 1] && /[A-Za-z0-9]/.test(text.textContent[i - 1])) breaks.push(i);
        }
        return { key: row.dataset.key, breaks };
      })
      .filter(({ breaks }) => breaks.length > 0),
  );
  await page.close();
  assert.deepEqual(broken, [], `keys broken inside a word at 390 px: ${JSON.stringify(broken.slice(0, 5))}`);
});

test('operation page: a succeeded operation with parameters, result, executions, no actions', async () => {
  const page = await newPage(admin);
  await visit(page, opPath('pay-succeeded'));
  assert.match(await h1(page), /pay-succeeded/);
  await checkFrame(page);
  assert.match(await statusText(page), /SUCCEEDED/);
  for (const id of ['parameters', 'result']) {
    assert.equal(await page.locator(`#${id} details pre, details#${id} pre`).count() >= 1, true, `#${id} is a <details> with a <pre>`);
  }
  assert.match(await page.locator('#parameters pre, details#parameters pre').first().textContent(), /"amount"/);
  assert.match(await page.locator('#result pre, details#result pre').first().textContent(), /ledger_entry/);
  assert.ok((await page.locator('ol#executions > li').count()) >= 1, 'ol#executions has the execution');
  assert.equal(await page.locator('#resources').count(), 1, '#resources');
  assert.equal(await page.locator('#compensation').count(), 1, '#compensation');
  assert.equal(await page.locator('table#audit').count(), 1, 'table#audit');
  assert.equal(await page.locator('a[data-action]').count(), 0, 'a succeeded operation offers no action');
  await shot(page, 'operation-succeeded.png');
  await audit(page, 'operation (succeeded)');
  await page.close();
});

test('operation page: an unknown operation offers resolve and hold only', async () => {
  const page = await newPage(admin);
  await visit(page, opPath('pay-unknown-2'));
  assert.match(await h1(page), /pay-unknown-2/);
  await checkFrame(page);
  assert.match(await statusText(page), /UNKNOWN/);
  const actions = await page.locator('a[data-action]').evaluateAll((links) => links.map((a) => a.dataset.action).sort());
  assert.deepEqual(actions, ['hold', 'resolve'], `actions on UNKNOWN: ${actions}`);
  await shot(page, 'operation-unknown.png');
  await audit(page, 'operation (unknown)');
  await page.close();
});

test('due work: what ClaimDue hands out next, and the expired leases', async () => {
  const page = await newPage(admin);
  await visit(page, `/console/due?namespace=${NS}`);
  assert.equal(await h1(page), 'Due work');
  await checkFrame(page);
  assert.equal(await page.locator('table#due').count(), 1, 'table#due');
  assert.equal(await page.locator('table#expired').count(), 1, 'table#expired');
  const due = await page.locator('table#due').textContent();
  const expired = await page.locator('table#expired').textContent();
  assert.match(due, /pay-expired|pay-unknown/, 'the due table lists the expired lease or the unknown outcomes');
  assert.doesNotMatch(due, /pay-retry\b/, 'a retry due in an hour is not due');
  assert.doesNotMatch(due, /pay-running/, 'a live lease is not due');
  assert.match(expired, /pay-expired/, 'the expired lease');
  assert.doesNotMatch(expired, /pay-running/, 'a live lease is not expired');
  await shot(page, 'due.png');
  await audit(page, 'due work');
  await page.close();
});

test('resolve through the confirmation page: success with a JSON result', async () => {
  const page = await newPage(admin);
  const { change, status } = await act(
    page,
    'pay-unknown',
    'resolve',
    async (p) => {
      const form = p.locator('form#act');
      assert.equal(await form.locator('input[type=radio][name=outcome]').count(), 2, 'outcome radios');
      assert.equal(await form.locator('textarea#result[name=result]').count(), 1, 'textarea#result');
      assert.ok((await form.locator('[name=failure_code]').count()) >= 1, 'failure_code');
      assert.ok((await form.locator('[name=failure_message]').count()) >= 1, 'failure_message');
      await form.locator('input[type=radio][name=outcome][value=success]').check();
      await form.locator('textarea#result').fill('{"ledger_entry":"le-300","found_in":"psp statement"}');
    },
    'confirm-resolve.png',
  );
  assert.match(change, /UNKNOWN/, `#change: ${change}`);
  assert.match(change, /→|->/, `#change shows before → after: ${change}`);
  assert.match(status, /SUCCEEDED/);
  assert.match(await page.locator('#result').textContent(), /le-300/);
  await shot(page, 'operation-resolved.png');
  await page.close();
});

test('hold, then release, through the confirmation page', async () => {
  const page = await newPage(admin);
  const held = await act(page, 'pay-retry', 'hold', null, 'confirm-hold.png');
  assert.match(held.change, /RETRY_SCHEDULED/, `#change: ${held.change}`);
  assert.equal(await page.locator('a[data-action="release"]').count(), 1, 'a held operation offers release');
  assert.equal(await page.locator('a[data-action="hold"]').count(), 0, 'no second hold');
  const released = await act(page, 'pay-retry', 'release', null, 'confirm-release.png');
  assert.match(released.status, /RETRY_SCHEDULED/);
  assert.equal(await page.locator('a[data-action="hold"]').count(), 1, 'released: hold is offered again');
  await page.close();
});

test('requeue a dead operation through the confirmation page', async () => {
  const page = await newPage(admin);
  await visit(page, opPath('pay-dead'));
  assert.match(await statusText(page), /DEAD/);
  const { change, status } = await act(page, 'pay-dead', 'requeue', null, 'confirm-requeue.png');
  assert.match(change, /DEAD/, `#change: ${change}`);
  assert.doesNotMatch(status, /DEAD/, `requeued: ${status}`);
  await page.close();
});

let job; // { path, id, entries, action }

/**
 * A well-formed bulk submission acting on one key: the hidden fields of the
 * bulk form the admin submitted (whatever the server names its copies of the
 * filter), with a fresh job_id and the given csrf and reason.
 */
function bulkFields({ csrf, reason, key }) {
  const replaced = new Set(['job_id', 'csrf', 'reason', 'scope', 'key', 'action']);
  const kept = (job?.entries ?? [['namespace', NS], ['filter_namespace', NS]]).filter(([name]) => !replaced.has(name));
  return [
    ...kept,
    ['job_id', randomBytes(16).toString('hex')],
    ['csrf', csrf],
    ['action', 'hold'],
    ['reason', reason],
    ['scope', 'selection'],
    ['key', key],
  ];
}

test('bulk hold of every bulk- match: abort halfway, resume to the end', async () => {
  const page = await newPage(admin);
  await visit(page, `/console/operations?namespace=${NS}&status=unfinished&prefix=bulk-&size=10`);
  const form = page.locator('form#bulk');
  assert.equal(await form.count(), 1, 'form#bulk');
  assert.equal((await form.getAttribute('method'))?.toLowerCase(), 'post');
  const jobId = await form.locator('input[type=hidden][name=job_id]').inputValue();
  assert.ok(jobId, 'a hidden job_id');
  assert.ok(await form.locator('input[type=hidden][name=csrf]').inputValue(), 'a hidden csrf');
  const options = await form.locator('select#bulk-action option').evaluateAll((os) => os.map((o) => o.value));
  for (const action of ['hold', 'release', 'requeue', 'resolve_failure']) assert.ok(options.includes(action), `bulk action ${action}`);
  await form.locator('select#bulk-action').selectOption('hold');
  const reason = `bulk hold from the browser test ${RUN}`;
  await form.locator('textarea#bulk-reason').fill(reason);
  const entries = await form.evaluate((f) => [...new FormData(f)].concat([['scope', 'filter']]));
  // Not f.action: the form's own field named "action" shadows the property.
  const action = await form.evaluate((f) => new URL(f.getAttribute('action') ?? '', document.baseURI).href);
  await audit(page, 'operations (bulk form filled)');
  await Promise.all([
    page.waitForURL((u) => /^\/console\/jobs\/[^/]+$/.test(u.pathname)),
    form.getByRole('button', { name: 'Act on every match' }).click(),
  ]);
  const jobPath = new URL(page.url()).pathname;
  job = { path: jobPath, id: decodeURIComponent(jobPath.split('/').pop()), entries, action };

  // Running: wait for some progress, then abort.
  let state = await readJob(page, jobPath);
  assert.equal(state.max, BULK_TOTAL, `the job covers every match: ${JSON.stringify(state)}`);
  const started = Date.now();
  while (!(state.value > 0)) {
    assert.ok(Date.now() - started < 10_000, `the job made no progress: ${JSON.stringify(state)}`);
    assert.equal(state.status, 'running', JSON.stringify(state));
    await sleep(200);
    state = await readJob(page, jobPath);
  }
  assert.ok(state.value < state.max, `still running when aborted: ${JSON.stringify(state)}`);
  assert.equal(state.status, 'running');
  assert.deepEqual(counts(state), { handled: state.value, total: BULK_TOTAL, skipped: 0 }, `#job-counts: ${state.counts}`);
  await shot(page, 'job-running.png');
  await audit(page, 'job (running)');
  await clickJobButton(page, jobPath, 'abort', 'Abort');
  for (let i = 0; ; i++) {
    state = await readJob(page, jobPath);
    if (state.status === 'aborted') break;
    assert.ok(i < 20, `the job did not stop: ${JSON.stringify(state)}`);
    await sleep(200);
  }
  assert.ok(state.value > 0 && state.value < BULK_TOTAL, `aborted halfway: ${JSON.stringify(state)}`);
  const stuck = state.value;
  await sleep(2_000); // eight operations' worth at 4/s
  state = await readJob(page, jobPath);
  assert.equal(state.status, 'aborted');
  assert.equal(state.value, stuck, 'aborted: the progress stays');
  assert.deepEqual(counts(state), { handled: stuck, total: BULK_TOTAL, skipped: 0 }, `#job-counts: ${state.counts}`);
  assert.equal(await page.locator('form#abort').count(), 0, 'no abort once aborted');
  assert.equal(await page.locator('form#resume').getByRole('button', { name: 'Resume' }).count(), 1, 'a Resume button');
  await shot(page, 'job-aborted.png');
  await audit(page, 'job (aborted)');

  // Resume and wait for the end.
  await clickJobButton(page, jobPath, 'resume', 'Resume');
  const resumed = Date.now();
  for (;;) {
    state = await readJob(page, jobPath);
    if (state.status === 'finished') break;
    assert.notEqual(state.status, 'aborted', 'resumed');
    assert.ok(Date.now() - resumed < 40_000, `the job did not finish: ${JSON.stringify(state)}`);
    await sleep(500);
  }
  assert.equal(state.value, BULK_TOTAL, `finished: every one done: ${JSON.stringify(state)}`);
  assert.deepEqual(counts(state), { handled: BULK_TOTAL, total: BULK_TOTAL, skipped: 0 }, `#job-counts: ${state.counts}`);
  assert.equal(await page.locator('form#abort').count(), 0);
  assert.equal(await page.locator('form#resume').count(), 0);
  await shot(page, 'job-finished.png');
  await audit(page, 'job (finished)');

  // Every bulk- operation is held now, with alice's audit row.
  await visit(page, `/console/operations?namespace=${NS}&prefix=bulk-&held=on&size=100`);
  assert.equal((await rowKeys(page)).length, BULK_TOTAL, 'every bulk- operation is held');
  await visit(page, opPath('bulk-17'));
  // The server may add which job acted, e.g. "<reason> (bulk job <id>)".
  const rows = await auditRows(page);
  const row = rows.find((r) => r.reason?.startsWith(reason));
  assert.ok(row, `the bulk action wrote the audit row: ${JSON.stringify(rows)}`);
  assert.match(row.action, /hold/i);
  assert.equal(row.principal, 'alice');
  await page.close();
});

test('resubmitting the same bulk form (same job_id) lands on the same job', async () => {
  assert.ok(job, 'the bulk test made a job');
  const page = await newPage(admin);
  await visit(page, `/console/operations?namespace=${NS}&prefix=bulk-`);
  const answer = await postFromPage(page, job.action, job.entries);
  assert.equal(answer.status, 303, JSON.stringify(answer));
  assert.equal(new URL(answer.location, ORIGIN).pathname, job.path, `the same job: ${JSON.stringify(answer)}`);
  assert.equal(new URL(answer.url).pathname, job.path, `the browser lands on the same job: ${JSON.stringify(answer)}`);
  const state = await readJob(page, job.path);
  assert.equal(state.status, 'finished', 'still the finished job, not run again');
  assert.equal(state.value, BULK_TOTAL);
  await page.close();
});

test('jobs list: the one bulk job, linked', async () => {
  const page = await newPage(admin);
  await visit(page, '/console/jobs');
  await checkFrame(page);
  const jobs = await page.locator('main a[href*="/console/jobs/"]').evaluateAll((links) =>
    [...new Set(links.map((a) => new URL(a.href).pathname))],
  );
  assert.deepEqual(jobs, [job?.path], `one job, the bulk one: ${jobs}`);
  assert.match(await page.locator('main').textContent(), /finished/);
  await shot(page, 'jobs.png');
  await audit(page, 'jobs');
  await page.close();
});

test('a reader sees no action links, and an action is refused 403', async () => {
  const context = await newContext();
  try {
    const page = await signIn(context, KEYS.riley);
    await visit(page, opPath('pay-unknown-2'));
    assert.match(await statusText(page), /UNKNOWN/);
    assert.equal(await page.locator('a[data-action]').count(), 0, 'no action links for a reader');
    await shot(page, 'operation-reader.png');
    await audit(page, 'operation (reader)');
    const csrf = (await pageCsrf(page)) ?? '';
    const actPath = `${opPath('pay-unknown-2')}/act?action=hold`;
    const response = await page.goto(url(actPath));
    assert.equal(response.status(), 403, 'the confirmation page is 403 for a reader');
    assert.equal(await page.locator('[role=alert]').count(), 1, 'with an alert');
    await shot(page, 'confirm-reader-refused.png');
    await audit(page, 'confirm (reader refused)');
    const post = await postFromPage(page, url(actPath), { csrf, reason: 'a reader tries' });
    assert.equal(post.status, 403, `a reader's POST is refused: ${JSON.stringify(post)}`);
    const bulk = await postFromPage(page, url('/console/jobs'), bulkFields({ csrf, reason: 'a reader tries', key: 'pay-unknown-2' }));
    assert.equal(bulk.status, 403, `a reader's bulk POST is refused: ${JSON.stringify(bulk)}`);
    await visit(page, opPath('pay-unknown-2'));
    assert.match(await statusText(page), /UNKNOWN/, 'nothing changed');
    assert.ok(!(await auditRows(page)).some((r) => /reader tries/.test(r.reason ?? '')), 'no audit row');
  } finally {
    await context.close();
  }
});

test('a refusal page (403) keeps the frame of a signed-in page: nav and sign-out', async () => {
  const context = await newContext();
  try {
    const page = await signIn(context, KEYS.riley);
    const response = await page.goto(url(`${opPath('pay-unknown-2')}/act?action=hold`));
    assert.equal(response.status(), 403);
    await checkFrame(page);
  } finally {
    await context.close();
  }
});

test('a forged or missing CSRF token is refused 403', async () => {
  const page = await newPage(admin);
  const actPath = `${opPath('pay-unknown-2')}/act?action=hold`;
  await visit(page, actPath);
  const real = await page.locator('form#act input[name=csrf]').inputValue();
  assert.ok(real, 'the confirmation page carries a csrf');
  const wrong = `${real.slice(0, -1)}${real.endsWith('A') ? 'B' : 'A'}`; // same length, one character off
  const forged = await postFromPage(page, url(actPath), { csrf: wrong, reason: 'forged' });
  assert.equal(forged.status, 403, `a wrong csrf: ${JSON.stringify(forged)}`);
  const missing = await postFromPage(page, url(actPath), { reason: 'forged' });
  assert.equal(missing.status, 403, `no csrf: ${JSON.stringify(missing)}`);
  const bulk = await postFromPage(page, url('/console/jobs'), bulkFields({ csrf: wrong, reason: 'forged', key: 'pay-unknown-2' }));
  assert.equal(bulk.status, 403, `a bulk POST with a wrong csrf: ${JSON.stringify(bulk)}`);
  await visit(page, opPath('pay-unknown-2'));
  assert.match(await statusText(page), /UNKNOWN/, 'nothing changed');
  assert.ok(!(await auditRows(page)).some((r) => r.reason === 'forged'), 'no audit row');
  await page.close();
});

test('axe-core: no serious or critical violation on any page', () => {
  assert.ok(audited.length >= 10, `pages audited: ${audited.join(', ')}`);
  const lines = a11y.map((v) => `${v.page} (${v.url}): ${v.impact} ${v.id} — ${v.help}\n    ${v.targets.join('\n    ')}`);
  assert.equal(a11y.length, 0, `accessibility violations:\n${lines.join('\n')}`);
});

test('the browser saw no script error and no missing asset', () => {
  assert.deepEqual(browserErrors, []);
});
