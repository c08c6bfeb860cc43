// The commissioning page in headless Chromium (Debian's, driven by playwright-core) against
// rtcat-web in front of simulated masters (`rtcat bench --sim`), run by ci/check-web.sh:
//
//   A. the CoE example segment: every view loads with no console error (screenshots at 1280×800
//      and 768×1024); logged out, the API refuses; the read role cannot write an SDO; the write
//      role writes one, the master's record names the user; a cross-site page's forged POST and
//      a POST without or with a wrong CSRF token change nothing; failed logins are rate-limited;
//      the web program's RSS and CPU share with five live pages open; the Timing view shows
//      doctor's verdicts as in the board's report; the Device view lists the servo's object
//      dictionary and reads an entry from it, shows its mailbox protocols, reads and (write
//      role) writes a file over FoE and shows its EoE MAC and IP; without --allow-motion an
//      axis command is refused.
//   B. the simulator's reference segment, whose devices echo their outputs into their inputs:
//      an output driven through the shared image (the Python client) shows as the echoed input
//      on the page within 500 ms of the input changing in the image.
//   C. the CiA 402 example, rtcat-web with --allow-motion: the Axes view lists both axes live;
//      the read role has no axis commands and its POST is refused; the write role's held jog
//      moves the simulated axis and it stops (and holds) when the button is released, and when
//      the page is closed with the button held; the master's record names the user.
//   D. the I/O example with a device plugged in behind it while it runs (a cable the simulator
//      starts pulled): the Bus view warns, naming its position, until it is pulled again.
//
// Environment: RTCAT (the rtcat binary), RTCAT_WEB (rtcat-web), RTCAT_TOP (the checkout),
// OUT (screenshots and logs). Exit 1 with the failed check on stderr.
import { chromium } from 'playwright-core';
import { spawn, spawnSync } from 'node:child_process';
import { createServer } from 'node:http';
import { mkdtempSync, readFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

const RTCAT = process.env.RTCAT;
const WEB = process.env.RTCAT_WEB;
const TOP = process.env.RTCAT_TOP;
const OUT = process.env.OUT;
if (!RTCAT || !WEB || !TOP || !OUT) {
  console.error('e2e: set RTCAT, RTCAT_WEB, RTCAT_TOP and OUT');
  process.exit(2);
}
mkdirSync(OUT, { recursive: true });
const children = [];
const t0 = Date.now();
const log = (m) => console.log(`[${((Date.now() - t0) / 1000).toFixed(1)}s] ${m}`);
function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
  log(`ok: ${what}`);
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function start(name, cmd, args, opts = {}) {
  const p = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], ...opts });
  children.push(p);
  let text = '';
  p.stdout.on('data', (d) => { text += d; });
  p.stderr.on('data', (d) => { text += d; });
  p.on('exit', () => writeFileSync(join(OUT, `${name}.log`), text));
  return { p, out: () => text };
}

async function waitFor(fn, what, ms = 20000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

// A master on `segment` (null: the simulator's reference segment) and rtcat-web in front of it.
// `benchArgs`: more arguments of the master (`--sim-unplug POS`); the simulator's fault socket
// is `simSock` (`rtcat sim-ctl --control`).
async function rig(name, segment, config, webArgs = [], segmentExtra = '', benchArgs = []) {
  const dir = mkdtempSync(join(tmpdir(), `rtcat-web-${name}-`));
  const sock = join(dir, 'control.sock');
  const simSock = join(dir, 'sim.sock');
  const args = ['bench', '--sim', '--shm', `e2e-${name}`, '--control', sock, '--duration', '300', '--no-rt',
    '--sim-control', simSock, ...benchArgs];
  if (segment && segmentExtra) {
    writeFileSync(join(dir, 'segment.toml'), readFileSync(join(TOP, segment), 'utf8') + segmentExtra);
    args.push('--segment', join(dir, 'segment.toml'));
  } else if (segment) args.push('--segment', join(TOP, segment));
  // The configuration (the example's, or none) with PDU and EEPROM timeouts of 1 s during initialisation,
  // as the Rust tests have it: the test shares a loaded machine (an EEPROM read timed out at
  // the default 100 ms with a load of 10 on this 2-core VM).
  let text = config ? readFileSync(join(TOP, config), 'utf8') : '';
  const patient = 'init_pdu_timeout_ms = 1000\ninit_eeprom_timeout_ms = 1000';
  text = /^\[bus\]$/m.test(text) ? text.replace(/^\[bus\]$/m, `[bus]\n${patient}`) : `${text}\n[bus]\n${patient}\n`;
  writeFileSync(join(dir, 'rtcat.toml'), text);
  args.push('--config', join(dir, 'rtcat.toml'));
  const master = start(`master-${name}`, RTCAT, args, { cwd: dir });
  // The board's doctor report, as the unprivileged timer writes it (exit 1: checks failed on
  // this VM; the report is on stdout all the same).
  const doc = spawnSync(RTCAT, ['doctor', '--json', '--cpu', '1', '--iface', 'lo'], { encoding: 'utf8' });
  writeFileSync(join(dir, 'doctor.json'), doc.stdout);
  const web = start(`web-${name}`, WEB, ['--control', sock, '--listen', '127.0.0.1:0', '--state-dir', join(dir, 'state'), '--doctor', join(dir, 'doctor.json'), ...webArgs]);
  const url = await waitFor(() => (web.out().match(/serving (http:\/\/[0-9.:]+)/) || [])[1], `rtcat-web ${name} to listen`);
  const cred = readFileSync(join(dir, 'state', 'credentials'), 'utf8');
  const pw = Object.fromEntries(cred.split('\n').filter((l) => l && !l.startsWith('#')).map((l) => l.split(/\s+/)).map(([u, , p]) => [u, p]));
  return { dir, sock, simSock, url, pw, master, web };
}

const errors = [];
// While the test provokes a refusal on purpose, Chromium's report of the 4xx response ("Failed
// to load resource: ... 401") is expected; any other console error still counts.
let provoking = 0;
async function provoke(fn) {
  provoking++;
  try { return await fn(); } finally { await sleep(200); provoking--; }
}
function watch(page, label) {
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    if (provoking && /^Failed to load resource: the server responded with a status of 4\d\d/.test(m.text())) return;
    errors.push(`${label}: console: ${m.text()}`);
  });
  page.on('pageerror', (e) => errors.push(`${label}: page error: ${e.message}`));
  return page;
}

async function login(page, url, user, password) {
  await page.goto(url);
  await page.fill('input[name=user]', user);
  await page.fill('input[name=password]', password);
  await page.click('button[type=submit]');
  await page.waitForSelector('nav [data-view=bus]');
}

async function view(page, id) {
  await page.click(`nav [data-view=${id}]`);
}

// A POST from the page's own origin, with the session cookie; token: the CSRF header or none.
function post(page, path, body, token) {
  return page.evaluate(async ({ path, body, token }) => {
    const h = { 'Content-Type': 'application/json' };
    if (token !== null) h['X-CSRF-Token'] = token;
    const r = await fetch(path, { method: 'POST', headers: h, body: JSON.stringify(body) });
    return { status: r.status, body: await r.text() };
  }, { path, body, token });
}
const csrfOf = (page) => page.evaluate(async () => (await (await fetch('/api/session')).json()).csrf);

const chromiumArgs = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

async function main() {
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium', args: chromiumArgs });
  try {
    await partA(browser);
    await partB(browser);
    await partC(browser);
    await partD(browser);
  } finally {
    await browser.close();
  }
  check(errors.length === 0, `no console errors on any page (${errors.join('; ')})`);
}

async function partA(browser) {
  // The servo (the last device) also serves a file over FoE and tunnels Ethernet.
  const r = await rig('coe', 'examples/coe/segment.toml', 'examples/coe/rtcat.toml', [],
    '\n[[device.file]]\nname = "params.txt"\ntext = "gain=42 from the servo"\nwritable = true\n[device.eoe]\nmac = "02:00:00:00:ec:02"\n');
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = watch(await ctx.newPage(), 'coe');
  // The refusals the test provokes (see provoke()).
  const probe = page;
  // Logged out: the page shows the login, the API refuses.
  await page.goto(r.url);
  await page.waitForSelector('input[name=password]');
  const anon = await provoke(() => post(probe, '/api/sdo/write', { position: 1, index: '0x8000', sub: '0x15', data: '0700' }, 'x'));
  check(anon.status === 401, `logged out, an SDO write is refused with 401 (${anon.status} ${anon.body})`);
  const anonLive = await provoke(() => probe.evaluate(async () => (await fetch('/api/live')).status));
  check(anonLive === 401, 'logged out, the live stream is refused with 401');
  await page.screenshot({ path: join(OUT, 'login.png') });

  // A wrong password, then the read role.
  await probe.fill('input[name=user]', 'viewer');
  await probe.fill('input[name=password]', 'not-the-password');
  await provoke(async () => { await probe.click('button[type=submit]'); await probe.waitForSelector('[role=alert]'); });
  check((await probe.textContent('[role=alert]')).includes('wrong user or password'), 'a wrong password is refused');
  await login(page, r.url, 'viewer', r.pw.viewer);

  // Every view, at the laptop's size and the tablet's.
  await page.waitForSelector('[data-position="2"] [data-al]', { timeout: 30000 });
  check((await page.textContent('[data-position="2"]')).includes('SERVO-COE'), 'Bus: the tree lists SERVO-COE at position 2');
  check((await page.textContent('[data-position="0"] [data-al]')) === 'OP', 'Bus: AL state OP, live');
  await page.screenshot({ path: join(OUT, 'bus.png'), fullPage: true });
  await view(page, 'pd');
  await page.fill('input[type=search]', '0:Inputs');
  // The DIO8's input byte is the simulated device's cycle counter (examples/coe/segment.toml).
  const bits = () => page.$$eval('[data-entry^="0:Inputs.Input"] [data-value]', (es) => es.map((e) => e.textContent).join(','));
  await page.waitForFunction(() => { const e = document.querySelector('[data-entry="0:Inputs.Input 1"] [data-value]'); return e && e.textContent !== '–'; });
  const v1 = await bits();
  const v2 = await waitFor(async () => { const v = await bits(); return v !== v1 && v; }, 'the DIO8 inputs to change', 3000);
  check(true, `Process data: the DIO8's inputs change live (${v1} -> ${v2})`);
  check(await page.locator('[data-entry="0:Outputs.Output 1"]').count() === 0, 'Process data: the search filters the entries');
  await page.screenshot({ path: join(OUT, 'process-data.png'), fullPage: true });
  await view(page, 'timing');
  await page.waitForSelector('[data-histogram=wake_ns] svg');
  // doctor's verdicts of this board, as in its report.
  const report = JSON.parse(readFileSync(join(r.dir, 'doctor.json'), 'utf8'));
  await page.waitForSelector('[data-doctor-check="kernel.preempt_rt"] [data-verdict]');
  const shown = await page.$$eval('[data-doctor-check]', (es) => es.map((e) => [e.dataset.doctorCheck, e.querySelector('[data-verdict]').textContent]));
  const want = Object.fromEntries(report.checks.map((c) => [c.id, c.verdict]));
  check(shown.length === report.checks.length && shown.every(([id, v]) => want[id] === v) && ['FAIL', 'WARN', 'PASS', 'N/A'].indexOf(shown[0][1]) <= ['FAIL', 'WARN', 'PASS', 'N/A'].indexOf(shown[shown.length - 1][1]),
    `Timing: doctor's ${report.checks.length} verdicts of this board as in its report, worst first (${JSON.stringify(report.summary)})`);
  await sleep(1500);
  await page.screenshot({ path: join(OUT, 'timing.png'), fullPage: true });
  await view(page, 'device');
  await page.fill('input[name=position]', '0');
  await page.fill('input[name=index]', '0x1018');
  await page.fill('input[name=sub]', '1');
  await page.getByRole('button', { name: 'Read', exact: true }).click();
  await page.waitForSelector('[data-sdo-result] code');
  check((await page.textContent('[data-sdo-result] code')) === '66070000', 'Device: 0x1018:1 (vendor id) reads 0x766 as the scan says');
  check(await page.isDisabled('button:has-text("Write")'), 'Device: Write is disabled for the read role');
  // The object dictionary of the servo (SDO information through the master's queue); an
  // entry's Read fills the form and reads it.
  await page.fill('input[name=position]', '2');
  await page.click('button:has-text("Object dictionary of position 2")');
  await page.waitForSelector('[data-object="0x1018"]', { timeout: 20000 });
  const nObjects = await page.locator('[data-object]').count();
  const idName = (await page.textContent('[data-object="0x1018"] td:nth-child(2)')).trim();
  check(nObjects > 5 && idName.length > 0, `Device: the object dictionary of SERVO-COE lists ${nObjects} objects, 0x1018 named "${idName}"`);
  await page.click('[data-object="0x1018"]');
  await page.waitForSelector('[data-entries="0x1018"] [data-entry-sub="1"]');
  check((await page.textContent('[data-entries="0x1018"] [data-entry-sub="1"]')).includes('u32'), 'Device: 0x1018:1 is described as a u32');
  await page.click('[data-entries="0x1018"] [data-entry-sub="1"] button');
  await page.waitForSelector('[data-sdo-result] code');
  check(/^[0-9a-f]{8}$/.test(await page.textContent('[data-sdo-result] code')) && (await page.inputValue('input[name=index]')) === '0x1018' && (await page.inputValue('input[name=sub]')) === '1',
    `Device: an entry's Read reads it (0x1018:1 of position 2 = ${await page.textContent('[data-sdo-result] code')})`);
  await page.screenshot({ path: join(OUT, 'device-od.png'), fullPage: true });
  // FoE where the device has it (its SII's mailbox protocols): a file read through the master.
  await page.waitForSelector('[data-mailbox] [data-protocol=FoE]');
  await page.fill('input[name=foe-name]', 'params.txt');
  await page.click('button:has-text("Read file")');
  await page.waitForSelector('[data-foe-result] code, [data-foe-result] .err', { timeout: 20000 });
  const foe = await page.textContent('[data-foe-result]');
  check(foe.includes('read 22 bytes') && foe.includes('gain=42 from the servo'), `Device: SERVO-COE lists FoE and its file reads through the master (${foe})`);
  await page.waitForSelector('[data-mailbox] [data-protocol=EoE]');
  await page.waitForSelector('[data-eoe] code');
  const eoeText = await page.textContent('[data-eoe]');
  check(eoeText.includes('02:00:00:00:ec:02') && eoeText.includes('no IP address set'), `Device: its EoE parameters read through the master (${eoeText})`);
  const viewerToken = await csrfOf(page);
  const ro = await provoke(() => post(probe, '/api/sdo/write', { position: 1, index: '0x8000', sub: '0x15', data: '0700' }, viewerToken));
  check(ro.status === 403 && ro.body.includes('read role'), `the read role's SDO write is refused with 403 (${ro.status} ${ro.body})`);
  await page.screenshot({ path: join(OUT, 'device.png'), fullPage: true });
  await view(page, 'axes');
  await page.waitForSelector('text=No axes on this master');
  await page.screenshot({ path: join(OUT, 'axes-none.png') });
  await view(page, 'events');
  await page.waitForSelector('[data-event=login]');
  await page.screenshot({ path: join(OUT, 'events.png'), fullPage: true });
  await page.setViewportSize({ width: 768, height: 1024 });
  await view(page, 'bus');
  await page.waitForSelector('[data-position="2"]');
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
  check(overflow <= 0, `Bus at 768×1024: no horizontal scrolling (${overflow} px)`);
  await page.screenshot({ path: join(OUT, 'bus-tablet.png'), fullPage: true });
  await page.setViewportSize({ width: 1280, height: 800 });

  // Log out, then the write role.
  await page.click('text=Log out');
  await page.waitForSelector('input[name=password]');
  const after = await provoke(() => post(probe, '/api/sdo/write', { position: 1, index: '0x8000', sub: '0x15', data: '0700' }, 'x'));
  check(after.status === 401, 'after logging out, the old session writes nothing (401)');
  await login(page, r.url, 'engineer', r.pw.engineer);
  await view(page, 'device');
  const sdo = async (pos, index, sub) => {
    await page.fill('input[name=position]', String(pos));
    await page.fill('input[name=index]', index);
    await page.fill('input[name=sub]', String(sub));
    await page.getByRole('button', { name: 'Read', exact: true }).click();
    await page.waitForFunction(() => document.querySelector('[data-sdo-result] code, [data-sdo-result] .err'));
    return page.textContent('[data-sdo-result]');
  };
  const before = await sdo(1, '0x8000', '0x15');
  await page.selectOption('select[name=type]', 'u16');
  const value = before.startsWith('0500') ? '6' : '5';
  await page.fill('input[name=value]', value);
  await page.click('button:has-text("Write")');
  await page.waitForFunction(() => document.querySelector('[data-sdo-result] code, [data-sdo-result] .err'));
  const wrote = await page.textContent('[data-sdo-result]');
  check(wrote.includes('wrote 2 bytes'), `the write role writes 0x8000:0x15 (u16): ${wrote}`);
  const back = await sdo(1, '0x8000', '0x15');
  check(back.startsWith(`0${value}00`), `0x8000:0x15 reads back ${value} (${back})`);
  await page.screenshot({ path: join(OUT, 'device-write.png'), fullPage: true });
  // FoE write with the write role: a file of this computer to the servo, read back.
  await page.fill('input[name=position]', '2');
  await page.waitForSelector('[data-mailbox] input[name=foe-file]');
  await page.fill('input[name=foe-name]', 'params.txt');
  await page.setInputFiles('input[name=foe-file]', { name: 'params.txt', mimeType: 'text/plain', buffer: Buffer.from('gain=7 set from the page') });
  await page.click('button:has-text("Write file")');
  await page.waitForSelector('[data-foe-result] p', { timeout: 20000 });
  const wroteFoe = await page.textContent('[data-foe-result]');
  check(wroteFoe.includes('wrote 24 bytes'), `Device: the write role writes a file to the servo over FoE (${wroteFoe})`);
  await page.click('button:has-text("Read file")');
  await page.waitForSelector('[data-foe-result] code', { timeout: 20000 });
  check((await page.textContent('[data-foe-result] code')) === 'gain=7 set from the page', 'Device: the file reads back as written');
  await waitFor(() => /rtcat-web user=engineer: foe_write position=2 name=\\"params.txt\\" bytes=24/.test(r.master.out()), "the master's record of the FoE write naming the user", 5000);
  check(/control foe_write uid=\d+ pid=\d+ position=2 name="params.txt" (boot=false )?result=ok/.test(r.master.out()), "the master's record has the foe_write itself");
  await waitFor(() => r.master.out().includes('rtcat-web user=engineer'), "the master's record of the write naming the user", 5000);
  check(true, "the master's record names the user (a note from rtcat-web before the write)");
  check(/control sdo_write uid=\d+ pid=\d+ position=1 index=0x8000 sub=21/.test(r.master.out()), "the master's record has the sdo_write itself");
  await view(page, 'events');
  await page.waitForSelector('[data-event=write]');
  check((await page.textContent('[data-event=write]')).includes('engineer'), 'Events: the write with its user');

  // CSRF: no token, a wrong token, and a cross-site page posting to the board.
  const token = await csrfOf(page);
  const noTok = await provoke(() => post(probe, '/api/sdo/write', { position: 1, index: '0x8000', sub: '0x15', data: '0300' }, null));
  check(noTok.status === 403 && noTok.body.includes('missing X-CSRF-Token'), `a POST without the CSRF token is refused (${noTok.status})`);
  const badTok = await provoke(() => post(probe, '/api/sdo/write', { position: 1, index: '0x8000', sub: '0x15', data: '0300' }, token.replace(/./, (c) => (c === 'a' ? 'b' : 'a'))));
  check(badTok.status === 403 && badTok.body.includes('wrong CSRF token'), `a POST with a wrong CSRF token is refused (${badTok.status})`);
  const noMotion = await provoke(() => post(probe, '/api/axis', { name: 'x', action: 'enable' }, token));
  check(noMotion.status === 403 && noMotion.body.includes('--allow-motion'), `without --allow-motion an axis command is refused (${noMotion.status} ${noMotion.body})`);
  const evil = createServer((req, res) => {
    res.setHeader('Content-Type', 'text/html');
    res.end(`<!DOCTYPE html><form id=f method=POST action="${r.url}/api/sdo/write" enctype="text/plain">
<input name='{"position":1,"index":"0x8000","sub":"0x15","data":"0300","x":"' value='"}'></form>
<script>fetch("${r.url}/api/sdo/write",{method:"POST",mode:"no-cors",credentials:"include",headers:{"Content-Type":"text/plain"},body:'{"position":1,"index":"0x8000","sub":"0x15","data":"0300"}'}).finally(()=>document.getElementById("f").submit());</script>`);
  });
  await new Promise((ok) => evil.listen(0, '127.0.0.2', ok));
  const evilPage = await ctx.newPage();
  await evilPage.goto(`http://127.0.0.2:${evil.address().port}/`);
  await sleep(1500);
  await evilPage.close();
  evil.close();
  await view(page, 'device');
  const still = await sdo(1, '0x8000', '0x15');
  check(still.startsWith(`0${value}00`), `a cross-site page's forged POSTs (fetch and form) changed nothing (${still})`);
  check(!/data=0300/.test(r.master.out()), 'the master never saw the forged writes');

  // Five live pages: the web program's resident memory and CPU share.
  const pages = [];
  for (let i = 0; i < 5; i++) {
    const p = watch(await ctx.newPage(), `live${i}`);
    await p.goto(`${r.url}/#timing`);
    await p.waitForSelector('[data-histogram=wake_ns]');
    pages.push(p);
  }
  const pid = r.web.p.pid;
  const cpu = () => { const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' '); return Number(f[11]) + Number(f[12]); };
  const hz = 100; // USER_HZ (sysconf(_SC_CLK_TCK) is 100 on Linux: proc(5))
  const c0 = cpu(), w0 = Date.now();
  await sleep(10000);
  const share = (cpu() - c0) / hz / ((Date.now() - w0) / 1000);
  const rss = Number(readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)[1]);
  log(`figure: rtcat-web with 6 live pages: RSS ${rss} KiB, CPU ${(share * 100).toFixed(1)} % of one core`);
  writeFileSync(join(OUT, 'figures.json'), JSON.stringify({ web_rss_kib: rss, web_cpu_share_of_one_core: share, live_pages: 6 }, null, 1));
  check(rss < 64 * 1024, `rtcat-web's RSS under 64 MiB (${rss} KiB)`);
  for (const p of pages) await p.close();

  // Failed logins: the sixth from one address in a minute is refused before the password is looked at.
  const codes = [];
  for (let i = 0; i < 6; i++) {
    codes.push(await provoke(() => probe.evaluate(async () => (await fetch('/api/login', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{"user":"engineer","password":"wrong-wrong-wrong"}' })).status)));
  }
  check(codes.slice(0, 5).every((c) => c === 401) && codes[5] === 429, `failed logins are rate-limited (${codes})`);
  await ctx.close();
}

async function partB(browser) {
  const r = await rig('echo', null, null);
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = watch(await ctx.newPage(), 'echo');
  await login(page, r.url, 'viewer', r.pw.viewer);
  await view(page, 'pd');
  await page.fill('input[type=search]', '0:Inputs.Input 2');
  const cell = '[data-entry="0:Inputs.Input 2"] [data-value]';
  await page.waitForFunction((s) => { const e = document.querySelector(s); return e && e.textContent !== '–'; }, cell);
  const lat = [];
  for (const v of [0x11223344, 0x0badcafe, 0x12345678]) {
    const want = String((v ^ 0x5a5a5a5a) >>> 0);
    // The writer drives 0:Outputs.Output 1; the simulated device echoes it XOR 0x5a into
    // Input 2; --watch prints a snapshot every 10 ms, so the moment the input changed in the
    // image is known to within that.
    const w = start('writer', 'python3', [join(TOP, 'app/clients/python/rtcat_shm.py'), r.sock, '--write', `0:Outputs.Output 1=${v}`, '--as', 'e2e', '--watch', '--interval', '0.01']);
    let tImage = 0;
    const rl = createInterface({ input: w.p.stdout });
    rl.on('line', (l) => { try { if (!tImage && String(JSON.parse(l).inputs['0:Inputs.Input 2']) === want) tImage = Date.now(); } catch (_) { /* not JSON */ } });
    await page.waitForFunction(([s, want]) => document.querySelector(s).textContent === want, [cell, want], { timeout: 10000, polling: 'raf' });
    const tPage = Date.now();
    await waitFor(() => tImage, 'the writer to see the echo', 5000);
    lat.push(tPage - tImage);
    // SIGINT: the client detaches its writer on the way out (a killed writer would stay
    // STALE, owning its entries, until a writer of its name takes the slot over).
    w.p.kill('SIGINT');
    await new Promise((ok) => w.p.once('exit', ok));
  }
  log(`figure: input change in the image -> shown on the page: ${lat.join(', ')} ms`);
  check(lat.every((l) => l <= 500), `an input changed in the simulator shows on the page within 500 ms (${lat.join(', ')} ms)`);
  await page.screenshot({ path: join(OUT, 'process-data-echo.png'), fullPage: true });
  check(await page.locator('[data-force]').count() === 0, 'Process data: the read role has no Set');

  // The write role sets an output from the page: its echo comes back; Release ends it.
  const ctx2 = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const eng = watch(await ctx2.newPage(), 'echo-engineer');
  await login(eng, r.url, 'engineer', r.pw.engineer);
  await view(eng, 'pd');
  await eng.fill('input[type=search]', '0:');
  // Output 2 (bytes 4..7) echoes into Input 3 (bytes 8..11); Output 1 is the Python writer's.
  const cell3 = '[data-entry="0:Inputs.Input 3"] [data-value]';
  const v = 0x5eed1234;
  const want = String((v ^ 0x5a5a5a5a) >>> 0);
  await eng.fill('[data-force="0:Outputs.Output 2"] input', String(v));
  await eng.click('[data-force="0:Outputs.Output 2"] button:has-text("Set")');
  await eng.waitForFunction(([s, want]) => document.querySelector(s).textContent === want || document.querySelector('[data-force] [role=alert]'), [cell3, want], { timeout: 5000 });
  const alert = await eng.$('[data-force] [role=alert]');
  check(!alert, `the force is accepted (${alert ? await alert.textContent() : 'ok'})`);
  await eng.waitForSelector('[data-force="0:Outputs.Output 2"] .pill');
  check((await eng.textContent('[data-force="0:Outputs.Output 2"] .pill')).includes('by engineer'), 'the write role sets 0:Outputs.Output 2 from the page and its echo shows in 0:Inputs.Input 3');
  await eng.screenshot({ path: join(OUT, 'process-data-force.png'), fullPage: true });
  check(r.master.out().includes(`rtcat-web user=engineer: force 0:Outputs.Output 2=\"${v}\"`) || r.master.out().includes('rtcat-web user=engineer: force 0:Outputs.Output 2='), "the master's record names the user of the force");
  await eng.click('[data-force="0:Outputs.Output 2"] button:has-text("Release")');
  await eng.waitForFunction(() => !document.querySelector('[data-force="0:Outputs.Output 2"] .pill'), null, { timeout: 5000 });
  check(true, 'Release ends the force');
  // A force ends with the session that made it.
  await eng.fill('[data-force="0:Outputs.Output 2"] input', String(v));
  await eng.click('[data-force="0:Outputs.Output 2"] button:has-text("Set")');
  await eng.waitForSelector('[data-force="0:Outputs.Output 2"] .pill');
  await eng.click('text=Log out');
  await eng.waitForSelector('input[name=password]');
  await page.fill('input[type=search]', '0:Inputs.Input 3');
  await page.waitForFunction(([s, want]) => document.querySelector(s) && document.querySelector(s).textContent !== want, [cell3, want], { timeout: 5000 });
  check(true, "logging out ends the session's force (0:Inputs.Input 3 no longer echoes it)");
  await ctx2.close();
  await ctx.close();
}

async function partC(browser) {
  const r = await rig('cia402', 'examples/cia402/segment.toml', 'examples/cia402/rtcat.toml', ['--allow-motion']);
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = watch(await ctx.newPage(), 'cia402');
  await login(page, r.url, 'viewer', r.pw.viewer);
  await view(page, 'axes');
  await page.waitForSelector('[data-axis=y]', { timeout: 30000 });
  await waitFor(async () => (await page.textContent('[data-axis=x]')).includes('operation enabled'), 'axis x to be enabled', 30000);
  check(true, 'Axes: both axes listed live, x in operation enabled');
  // The axes' drive entries are the master's: a force is refused by the master's claim rules.
  const ctx3 = await browser.newContext();
  const probe = await ctx3.newPage();
  await probe.goto(r.url);
  await probe.fill('input[name=user]', 'engineer');
  await probe.fill('input[name=password]', r.pw.engineer);
  await probe.click('button[type=submit]');
  await probe.waitForSelector('nav [data-view=bus]');
  const refused = await probe.evaluate(async () => {
    const s = await (await fetch('/api/session')).json();
    let layout;
    // The image is attached once the master publishes it (retried every second).
    for (let i = 0; i < 100; i++) {
      layout = await (await fetch('/api/layout')).json();
      if (layout.entries.length) break;
      await new Promise((ok) => setTimeout(ok, 100));
    }
    const cw = layout.entries.find((e) => e.direction === 'outputs' && /controlword/i.test(e.name));
    if (!cw) return { entry: null, status: 0, body: JSON.stringify(layout).slice(0, 300) };
    const r = await fetch('/api/pd/force', { method: 'POST', headers: { 'Content-Type': 'application/json', 'X-CSRF-Token': s.csrf }, body: JSON.stringify({ entry: cw.name, value: 15 }) });
    return { entry: cw.name, status: r.status, body: await r.text() };
  });
  check(refused.status === 403 && /refused the claim/.test(refused.body), `forcing an axis' ${refused.entry} is refused by the master (${refused.status} ${refused.body})`);
  await ctx3.close();
  await sleep(2000);
  await page.screenshot({ path: join(OUT, 'axes.png'), fullPage: true });

  // The read role: no commands on the page, and its POST is refused.
  check(await page.locator('[data-axis-controls]').count() === 0 && (await page.textContent('main')).includes('need the write role'), 'Axes: the read role is offered no axis commands');
  const viewerToken = await csrfOf(page);
  const ro = await provoke(() => post(page, '/api/axis', { name: 'x', action: 'jog', velocity: 5 }, viewerToken));
  check(ro.status === 403 && ro.body.includes('read role'), `the read role's jog is refused with 403 (${ro.status} ${ro.body})`);

  // The write role jogs axis x by holding the button; the viewer's page watches it.
  const actual = async () => Number(await page.textContent('[data-axis=x] [data-actual]'));
  const manual = () => page.textContent('[data-axis=x] [data-manual]');
  const ctxE = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const eng = watch(await ctxE.newPage(), 'cia402-engineer');
  await login(eng, r.url, 'engineer', r.pw.engineer);
  await view(eng, 'axes');
  await eng.waitForSelector('[data-axis-controls=x] [data-hold="Jog +"]');
  await eng.fill('[data-axis-controls=x] input[name=velocity]', '20');
  // Stop the program first, so that the jog's motion is the only one.
  await eng.click('[data-axis-controls=x] [data-hold="Jog +"]');
  await waitFor(async () => (await manual()) === 'holding', 'axis x to hold after a tap', 5000);
  const a0 = await actual();
  const sign = a0 < 50 ? 1 : -1;
  const button = `[data-axis-controls=x] [data-hold="Jog ${sign > 0 ? '+' : '−'}"]`;
  // Timing-dependent (this VM is shared: a renewal later than the lease stops the axis, as it
  // must): up to three attempts, each said.
  let a1 = a0, jogging = false;
  for (let attempt = 1; attempt <= 3; attempt++) {
    const from = await actual();
    await eng.hover(button);
    await eng.mouse.down();
    await sleep(1000);
    a1 = await actual();
    jogging = (await manual()) === 'jogging' && (a1 - from) * sign > 5;
    if (jogging) break;
    log(`attempt ${attempt}: held 1 s, ${from} -> ${a1}, ${await manual()}: again`);
    await eng.mouse.up();
    await waitFor(async () => (await manual()) === 'holding', 'axis x to hold', 3000);
  }
  check(jogging, `a held jog moves the simulated axis (${a0} -> ${a1} in 1 s at 20 units/s)`);
  await eng.screenshot({ path: join(OUT, 'axes-jog.png'), fullPage: true });
  await eng.mouse.up();
  const tUp = Date.now();
  await waitFor(async () => (await manual()) === 'holding', 'axis x to stop after the release', 3000);
  const stopMs = Date.now() - tUp;
  await sleep(300);
  const a2 = await actual();
  await sleep(700);
  const a3 = await actual();
  check(Math.abs(a3 - a2) < 0.001, `released, the axis stops and holds (stopped ${stopMs} ms after the release as the page saw it; ${a2} -> ${a3})`);

  // Move-to, held until it arrives.
  const to = Number((a3 + sign * 3).toFixed(3));
  await eng.fill('[data-axis-controls=x] input[name=target]', String(to));
  await eng.hover('[data-axis-controls=x] [data-hold="Move (hold)"]');
  await eng.mouse.down();
  await waitFor(async () => Math.abs((await actual()) - to) < 0.01 && (await manual()) === 'holding', `axis x to arrive at ${to}`, 5000);
  await eng.mouse.up();
  check(true, `a held move-to brings the axis to its target (${a3} -> ${await actual()}, target ${to})`);
  const refusedMove = await provoke(() => eng.evaluate(async () => {
    const s = await (await fetch('/api/session')).json();
    const r = await fetch('/api/axis', { method: 'POST', headers: { 'Content-Type': 'application/json', 'X-CSRF-Token': s.csrf }, body: JSON.stringify({ name: 'x', action: 'move_to', position: 111 }) });
    return { status: r.status, body: await r.text() };
  }));
  check(refusedMove.status === 400 && refusedMove.body.includes('min/max_position'), `a move-to beyond max_position is refused (${refusedMove.status} ${refusedMove.body})`);

  // Held again, then the page is closed with the button down: the renewals end, so does the motion.
  await eng.hover(button.replace(sign > 0 ? '+' : '−', sign > 0 ? '−' : '+'));
  await eng.mouse.down();
  await sleep(500);
  const b0 = await actual();
  check((await manual()) === 'jogging', `held again, jogging back (${b0})`);
  await eng.close();
  const tClose = Date.now();
  await waitFor(async () => (await manual()) === 'holding', 'axis x to stop after the page closed', 3000);
  const closeMs = Date.now() - tClose;
  await sleep(300);
  const b1 = await actual();
  await sleep(700);
  const b2 = await actual();
  check(Math.abs(b2 - b1) < 0.001 && closeMs < 1500, `the page closed with the button held: the axis stops within the lease and holds (${closeMs} ms; ${b1} -> ${b2})`);
  await waitFor(() => /rtcat-web user=engineer: \{\\"action\\":\\"jog\\"/.test(r.master.out()), "the master's record of the jog naming the user", 5000);
  check(/control axis uid=\d+ pid=\d+ \{"action":"jog"/.test(r.master.out()), "the master's record has the jog itself");
  check(!/"action":"renew".*result=ok/.test(r.master.out()), 'renewals are not on the record');
  await page.screenshot({ path: join(OUT, 'axes-held.png'), fullPage: true });
  await ctxE.close();
  await ctx.close();
}

async function partD(browser) {
  // The I/O example with a fourth device whose cable is pulled at the start: the configuration
  // (the segment as found at bring-up) has three. Plugged in while the line runs, it is one the
  // configuration does not place: the Bus view warns, naming its position, until it is pulled.
  const r = await rig('plug', 'examples/segment-io.toml', null, [],
    '\n[[device]]\nname = "SPARE-SIM"\nproduct_id = 0x00010099\nserial = 9\ninputs = 1\n', ['--sim-unplug', '3']);
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = watch(await ctx.newPage(), 'plug');
  await login(page, r.url, 'viewer', r.pw.viewer);
  await page.waitForSelector('[data-position="2"] [data-al]', { timeout: 30000 });
  await waitFor(async () => (await page.textContent('[data-position="0"] [data-al]')) === 'OP', 'the segment in OP', 30000);
  check(await page.locator('[data-unexpected]').count() === 0, 'Bus: no warning while every device is where the configuration has it');
  const simctl = (cmd) => {
    const c = spawnSync(RTCAT, ['sim-ctl', '--control', r.simSock, ...cmd.split(' ')], { encoding: 'utf8' });
    if (c.status !== 0) throw new Error(`sim-ctl ${cmd}: ${c.stderr}`);
  };
  simctl('plug 3');
  // The master counts the devices once a second.
  await page.waitForSelector('[data-unexpected]', { timeout: 10000 });
  const text = await page.textContent('[data-unexpected]');
  check(/^1 device on the segment where the configuration has none, from position 3: not driven/.test(text), `Bus: a device plugged in where none is configured is named (${text})`);
  await page.screenshot({ path: join(OUT, 'bus-unexpected.png'), fullPage: true });
  simctl('unplug 3');
  await page.waitForSelector('[data-unexpected]', { state: 'detached', timeout: 10000 });
  check(true, 'Bus: the warning leaves when the device is pulled');
  check(/devices on the segment that the configuration does not place, 1 in all: 1 device without a known station address at position 3/.test(r.master.out()), "the master's log names it");
  await ctx.close();
}

main().then(() => {
  log('all browser checks passed');
}, (e) => {
  console.error(`e2e: ${e.message}`);
  process.exitCode = 1;
}).finally(() => {
  for (const c of children) c.kill('SIGTERM');
});
