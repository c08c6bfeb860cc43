// What five open live pages cost the cycle: `rtcat bench --sim` on the CoE example with
// rtcat-web in front, alternately with no page open and with five live streams open (the load
// the board sees from five browsers: their rendering happens on the technicians' machines),
// RUNS runs of SECONDS each (default 4 × 20 s: none, five, none, five). Prints each run's wake
// lateness and execution P99 (HDR, from summary.json) and the ratio of the medians five/none,
// plus rtcat-web's CPU share and RSS while streaming.
//
//   RTCAT=… RTCAT_WEB=… RTCAT_TOP=… node app/web/ui/test/load.mjs [RUNS] [SECONDS]
//
// RT=1 runs the bench with its real-time settings (root); default --no-rt.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const { RTCAT, RTCAT_WEB, RTCAT_TOP } = process.env;
if (!RTCAT || !RTCAT_WEB || !RTCAT_TOP) {
  console.error('load: set RTCAT, RTCAT_WEB and RTCAT_TOP');
  process.exit(2);
}
const runs = Number(process.argv[2] || 4);
const seconds = Number(process.argv[3] || 20);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function run(k, pages) {
  const dir = mkdtempSync(join(tmpdir(), 'rtcat-web-load-'));
  const sock = join(dir, 'control.sock');
  const args = ['bench', '--sim', '--shm', `load${k}`, '--control', sock, '--duration', String(seconds),
    '--segment', join(RTCAT_TOP, 'examples/coe/segment.toml'), '--config', join(RTCAT_TOP, 'examples/coe/rtcat.toml')];
  if (!process.env.RT) args.push('--no-rt');
  const master = spawn(RTCAT, args, { cwd: dir, stdio: 'ignore' });
  const done = new Promise((ok) => master.on('exit', ok));
  let webOut = '';
  const web = spawn(RTCAT_WEB, ['--control', sock, '--listen', '127.0.0.1:0', '--state-dir', join(dir, 'state')], { stdio: ['ignore', 'ignore', 'pipe'] });
  web.stderr.on('data', (d) => { webOut += d; });
  let url;
  while (!(url = (webOut.match(/serving (http:\/\/[0-9.:]+)/) || [])[1])) await sleep(50);
  const pw = readFileSync(join(dir, 'state', 'credentials'), 'utf8').match(/^viewer read (\S+)$/m)[1];
  const login = await fetch(`${url}/api/login`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ user: 'viewer', password: pw }) });
  const cookie = login.headers.get('set-cookie').split(';')[0];
  const streams = [];
  let frames = 0;
  for (let i = 0; i < pages; i++) {
    const ac = new AbortController();
    streams.push(ac);
    fetch(`${url}/api/live`, { headers: { cookie }, signal: ac.signal }).then(async (r) => {
      for await (const chunk of r.body) frames += (Buffer.from(chunk).toString().match(/event: live/g) || []).length;
    }).catch(() => {});
  }
  await sleep(2000);
  const cpu = () => { const f = readFileSync(`/proc/${web.pid}/stat`, 'utf8').split(') ')[1].split(' '); return Number(f[11]) + Number(f[12]); };
  const c0 = cpu(), t0 = Date.now();
  await sleep(Math.max(1000, (seconds - 5) * 1000));
  const share = (cpu() - c0) / 100 / ((Date.now() - t0) / 1000); // USER_HZ = 100 (proc(5))
  const rss = Number(readFileSync(`/proc/${web.pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)[1]);
  await done;
  for (const s of streams) s.abort();
  web.kill();
  const out = join(dir, 'rtcat-bench');
  const sub = readdirSync(out).includes('summary.json') ? out : join(out, readdirSync(out)[0]);
  const s = JSON.parse(readFileSync(join(sub, 'summary.json'), 'utf8'));
  return { pages, wake: s.wake_lateness_ns.p99, exec: s.exec_ns.p99, missed: s.missed_deadlines, frames, share, rss };
}

const median = (xs) => { const s = [...xs].sort((a, b) => a - b); const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };
const results = [];
for (let k = 0; k < runs; k++) {
  const r = await run(k, k % 2 ? 5 : 0);
  results.push(r);
  console.log(`run ${k}: ${r.pages} live pages: wake P99 ${(r.wake / 1e3).toFixed(1)} µs, exec P99 ${(r.exec / 1e3).toFixed(1)} µs, missed ${JSON.stringify(r.missed)}, frames streamed ${r.frames}, rtcat-web CPU ${(r.share * 100).toFixed(2)} % of a core, RSS ${r.rss} KiB`);
}
const none = results.filter((r) => r.pages === 0), five = results.filter((r) => r.pages === 5);
if (none.length && five.length) {
  console.log(`ratio five/none (medians): wake P99 ${(median(five.map((r) => r.wake)) / median(none.map((r) => r.wake))).toFixed(3)}, exec P99 ${(median(five.map((r) => r.exec)) / median(none.map((r) => r.exec))).toFixed(3)}`);
}
