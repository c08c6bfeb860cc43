// The commissioning page: one live stream (/api/live, at most 10 frames a second, closed while
// the tab is hidden) and a small JSON API; every POST carries the session's CSRF token.
import { render } from 'preact';
import { useState, useEffect, useRef, useMemo } from 'preact/hooks';

let csrf = '';

async function api(path, body) {
  const opts = body === undefined ? {} : {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'X-CSRF-Token': csrf },
    body: JSON.stringify(body),
  };
  const r = await fetch(path, { credentials: 'same-origin', ...opts });
  let data = null;
  try { data = await r.json(); } catch (_) { /* no body */ }
  if (!r.ok) {
    const e = new Error((data && data.error) || `${r.status} ${r.statusText}`);
    e.status = r.status;
    throw e;
  }
  return data;
}

const hex = (n, w = 4) => '0x' + Number(n).toString(16).padStart(w, '0');
const ns = (v) => v == null ? '–' : v >= 1e6 ? (v / 1e6).toFixed(2) + ' ms' : (v / 1e3).toFixed(1) + ' µs';
const AL = { 1: 'INIT', 2: 'PRE-OP', 3: 'BOOT', 4: 'SAFE-OP', 8: 'OP' };
const alName = (c) => (AL[c & 15] || '?') + (c & 0x10 ? '+ERR' : '');
const alClass = (c) => (c & 0x10) ? 'bad' : (c & 15) === 8 ? 'ok' : 'warn';

function Login({ onLogin }) {
  const [user, setUser] = useState('');
  const [password, setPassword] = useState('');
  const [err, setErr] = useState('');
  const submit = async (e) => {
    e.preventDefault();
    setErr('');
    try {
      const s = await api('/api/login', { user, password });
      onLogin(s);
    } catch (x) { setErr(x.message); }
  };
  return (
    <form class="card login" onSubmit={submit}>
      <h2>rtcat commissioning</h2>
      <p class="mute">Log in with a user of this board's credential file.</p>
      <input name="user" autocomplete="username" placeholder="user" value={user} onInput={(e) => setUser(e.target.value)} />
      <input name="password" type="password" autocomplete="current-password" placeholder="password" value={password} onInput={(e) => setPassword(e.target.value)} />
      <button class="primary" type="submit">Log in</button>
      {err && <p class="err" role="alert">{err}</p>}
    </form>
  );
}

// The live frames while the tab is visible (the issue: paused when hidden).
function useLive(onEnded) {
  const [frame, setFrame] = useState(null);
  useEffect(() => {
    let es = null;
    const open = () => {
      if (es || document.hidden) return;
      es = new EventSource('/api/live');
      es.addEventListener('live', (m) => setFrame(JSON.parse(m.data)));
      es.addEventListener('ended', () => { close(); onEnded(); });
      es.onerror = () => {
        // A refused stream (session gone) ends here; a dropped one reconnects by itself.
        api('/api/session').then((s) => { if (!s.user) { close(); onEnded(); } }).catch(() => {});
      };
    };
    const close = () => { if (es) { es.close(); es = null; } };
    const vis = () => (document.hidden ? close() : open());
    document.addEventListener('visibilitychange', vis);
    open();
    return () => { document.removeEventListener('visibilitychange', vis); close(); };
  }, []);
  return frame;
}

function Bus({ frame, session }) {
  const gen = frame && frame.status ? frame.status.generation : null;
  const [scan, setScan] = useState(null);
  const [err, setErr] = useState('');
  const load = (refresh) => api('/api/scan' + (refresh ? '?refresh=1' : '')).then((s) => { setScan(s); setErr(''); }).catch((e) => setErr(e.message));
  useEffect(() => { load(false); }, [gen]);
  useEffect(() => { if (!scan || scan.subdevices == null) { const t = setTimeout(() => load(false), 1000); return () => clearTimeout(t); } }, [scan]);
  const devs = (scan && scan.subdevices) || [];
  const states = {};
  for (const s of (frame && frame.status && frame.status.subdevice_states) || []) states[s.position] = s;
  const counters = {};
  for (const c of (frame && frame.counters && frame.counters.subdevices) || []) counters[c.position] = c;
  const valid = (frame && frame.pd && frame.pd.valid) || [];
  // Devices plugged in where the configuration has none: the master's count, not driven.
  const unexpected = frame && frame.status && frame.status.unexpected_devices;
  // The tree: a device hangs on the nearest earlier one with an open port left (frames go
  // out on port 0 and return through ports 3, 1, 2: ETG.1000.4 §5.1 "Loop control").
  const depth = {};
  const stack = [];
  for (const d of devs) {
    while (stack.length && stack[stack.length - 1].left === 0) stack.pop();
    const parent = stack.length ? stack[stack.length - 1] : null;
    if (parent) parent.left -= 1;
    depth[d.position] = parent ? depth[parent.pos] + 1 : 0;
    const outs = (d.ports || []).filter((p) => p.link && p.port !== 0).length;
    if (outs > 0) stack.push({ pos: d.position, left: outs });
  }
  return (
    <section>
      <div class="row">
        <button onClick={() => load(true)}>Scan again</button>
        <span class="mute">{devs.length} subdevices, layout generation {gen == null ? '–' : gen}</span>
        {err && <span class="err">{err}</span>}
      </div>
      {unexpected && unexpected.count > 0 && (
        <p class="card notice" role="status" data-unexpected>
          {unexpected.count === 1 ? '1 device' : `${unexpected.count} devices`} on the segment where the configuration has none, from position {unexpected.first_position}: not driven.
          Plugged in elsewhere than configured? Unplug it, or put it in the configuration and restart the master.
        </p>
      )}
      {scan && scan.subdevices == null && <p class="mute">Scanning the bus…</p>}
      <div class="tree">
        {devs.map((d) => {
          const st = states[d.position];
          const al = st ? st.al_state : 0;
          const c = counters[d.position];
          const junction = (d.ports || []).filter((p) => p.link && p.port !== 0).length > 1;
          return (
            <div class="node card" data-position={d.position} key={d.position} style={{ marginLeft: depth[d.position] * 24 + 'px' }}>
              <div class="row">
                <strong>{d.position}: {d.name || '(no name)'}</strong>
                <span class={'pill ' + alClass(al)} data-al>{st ? alName(al) : d.al_state}</span>
                {st && st.al_status_code ? <span class="pill bad">{hex(st.al_status_code)} {d.al_status_text}</span> : null}
                <span class={'pill ' + (valid[d.position] === false ? 'bad' : 'ok')}>{valid[d.position] === false ? 'not available' : 'available'}</span>
                {junction && <span class="pill">junction</span>}
              </div>
              <div class="mute">
                vendor {hex(d.vendor_id, 8)} · product {hex(d.product_code, 8)} · revision {hex(d.revision, 8)} · serial {d.serial} · station {hex(d.station_address)}
                {d.mailbox_protocols && d.mailbox_protocols.length ? ' · mailbox ' + d.mailbox_protocols.join(', ') : ''}
              </div>
              <div class="ports">
                {(d.ports || []).filter((p) => p.kind !== 'not_implemented').map((p) => {
                  const pc = c && (c.ports || []).find((x) => x.port === p.port);
                  const errs = pc ? pc.rx_error + pc.invalid_frame + pc.forwarded + pc.lost_link : 0;
                  return (
                    <span key={p.port} class={'pill ' + (p.link ? (errs ? 'warn' : 'ok') : '')} title={pc ? `rx errors ${pc.rx_error}, invalid frames ${pc.invalid_frame}, forwarded ${pc.forwarded}, lost link ${pc.lost_link}` : ''}>
                      port {p.port} {p.link ? 'link' : 'open'}{pc ? ` · rx ${pc.rx_error} inv ${pc.invalid_frame} fwd ${pc.forwarded} lost ${pc.lost_link}` : ''}
                    </span>
                  );
                })}
              </div>
              {session.role === 'write' && <AlControl position={d.position} />}
            </div>
          );
        })}
      </div>
    </section>
  );
}

function AlControl({ position }) {
  const [state, setState] = useState('op');
  const [msg, setMsg] = useState('');
  const go = () => api('/api/al_state', { position, state }).then(() => setMsg('requested')).catch((e) => setMsg(e.message));
  return (
    <div class="row">
      <select value={state} onChange={(e) => setState(e.target.value)} aria-label="AL state">
        {['init', 'pre-op', 'safe-op', 'op'].map((s) => <option value={s}>{s}</option>)}
      </select>
      <button onClick={go}>Request AL state</button>
      <span class="mute">{msg}</span>
    </div>
  );
}

function Force({ entry, forced }) {
  const [v, setV] = useState('');
  const [msg, setMsg] = useState('');
  const go = (path, body) => api(path, body).then(() => setMsg('')).catch((e) => setMsg(e.message));
  return (
    <span class="row" data-force={entry.name}>
      {forced && <span class="pill warn">forced {forced.value} by {forced.user}</span>}
      <input name="force-value" size="8" placeholder="value" value={v} onInput={(e) => setV(e.target.value)} aria-label={`value for ${entry.name}`} />
      <button onClick={() => go('/api/pd/force', { entry: entry.name, value: v })}>Set</button>
      {forced && <button onClick={() => go('/api/pd/release', { entry: entry.name })}>Release</button>}
      {msg && <span class="err" role="alert">{msg}</span>}
    </span>
  );
}

function ProcessData({ frame, session }) {
  const gen = frame && frame.pd ? frame.pd.generation : null;
  const [layout, setLayout] = useState(null);
  const [q, setQ] = useState('');
  const [dir, setDir] = useState('');
  useEffect(() => { api('/api/layout').then(setLayout).catch(() => {}); }, [gen]);
  const entries = (layout && layout.entries) || [];
  const values = (frame && frame.pd && frame.pd.generation === (layout && layout.generation) && frame.pd.values) || [];
  const needle = q.trim().toLowerCase();
  const forced = {};
  for (const f of (frame && frame.forced) || []) forced[f.entry] = f;
  return (
    <section>
      <div class="row">
        <input type="search" placeholder="search entries" value={q} onInput={(e) => setQ(e.target.value)} aria-label="search entries" />
        <select value={dir} onChange={(e) => setDir(e.target.value)} aria-label="direction">
          <option value="">inputs and outputs</option>
          <option value="inputs">inputs</option>
          <option value="outputs">outputs</option>
        </select>
        <span class="mute">{frame && frame.pd ? `cycle ${frame.pd.cycle} · WKC ${frame.pd.wkc}/${frame.pd.expected_wkc}` : (frame && frame.pd_error) || 'no shared image'}</span>
      </div>
      <p class="mute">Values are read from the master's shared image. With the write role an output can be set: the master grants the page's writer the entry only where the shared image's ownership rules allow (not an axis' entries, not another writer's); the value holds until released or the session ends.</p>
      <table>
        <thead><tr><th>entry</th><th>direction</th><th>type</th><th class="num">value</th>{session.role === 'write' && <th>set</th>}</tr></thead>
        <tbody>
          {entries.map((e, i) => ({ e, i })).filter(({ e }) => (!dir || e.direction === dir) && (!needle || e.name.toLowerCase().includes(needle))).map(({ e, i }) => (
            <tr key={e.name} data-entry={e.name}>
              <td>{e.name}</td><td>{e.direction}</td><td>{e.type}{e.bits > 1 ? ` (${e.bits} bits)` : ''}</td>
              <td class="num" data-value>{values[i] === undefined ? '–' : String(values[i])}</td>
              {session.role === 'write' && <td>{e.direction === 'outputs' && <Force entry={e} forced={forced[e.name]} />}</td>}
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}

const HISTOS = [['wake_ns', 'wake lateness'], ['exec_ns', 'execution'], ['rtt_ns', 'round trip']];

// The P99 of the samples between two cumulative histograms, as the upper bound of its bucket.
function intervalP99(a, b) {
  if (!a || !b || b.count <= a.count) return null;
  const n = b.count - a.count;
  for (let i = 0; i < b.buckets.length; i++) {
    const d = b.buckets[i][1] - (a.buckets[i] ? a.buckets[i][1] : 0);
    if (d >= 0.99 * n) return b.buckets[i][0];
  }
  return b.max;
}

function Histogram({ h }) {
  if (!h) return null;
  let prev = 0;
  const bars = h.buckets.map(([le, c]) => { const d = c - prev; prev = c; return [le, d]; });
  const max = Math.max(1, ...bars.map((b) => b[1]));
  const w = 600 / bars.length;
  return (
    <svg viewBox="0 0 600 140" role="img" aria-label="histogram">
      {bars.map(([le, d], i) => {
        const hgt = d ? Math.max(2, 110 * Math.log10(1 + d) / Math.log10(1 + max)) : 0;
        return (
          <g key={le}>
            <rect x={i * w + 2} y={115 - hgt} width={w - 4} height={hgt} fill="#1f5fae"><title>≤ {ns(le)}: {d}</title></rect>
            <text x={i * w + w / 2} y={132} font-size="10" text-anchor="middle" fill="#5d6b7c">{le >= 1e6 ? le / 1e6 + 'm' : le / 1e3 + 'µ'}</text>
          </g>
        );
      })}
    </svg>
  );
}

function Rolling({ series, colors, label, fmt = ns }) {
  const pts = series.flatMap((s) => s.filter((v) => v != null));
  if (!pts.length) return <p class="mute">{label}: collecting…</p>;
  const lo = Math.log10(Math.max(1, Math.min(...pts))), hi = Math.log10(Math.max(...pts) * 1.2 + 1);
  const y = (v) => 110 - 100 * (Math.log10(Math.max(1, v)) - lo) / Math.max(0.1, hi - lo);
  return (
    <svg viewBox="0 0 600 120" role="img" aria-label={label}>
      {series.map((s, k) => (
        <polyline key={k} fill="none" stroke={colors[k]} stroke-width="1.5"
          points={s.map((v, i) => v == null ? null : `${(i * 600) / Math.max(1, s.length - 1)},${y(v)}`).filter(Boolean).join(' ')} />
      ))}
      <text x="4" y="12" font-size="11" fill="#5d6b7c">{fmt(Math.pow(10, hi))}</text>
      <text x="4" y="116" font-size="11" fill="#5d6b7c">{fmt(Math.pow(10, lo))}</text>
    </svg>
  );
}

const ROLL = 300; // frames kept for the rolling plots: 30 s at 10 frames a second

function useRolling(frame, pick) {
  const ref = useRef({ prev: null, series: [] });
  useMemo(() => {
    if (!frame) return;
    const r = ref.current;
    const v = pick(frame, r.prev);
    r.prev = frame;
    if (v !== undefined) { r.series.push(v); if (r.series.length > ROLL) r.series.shift(); }
  }, [frame]);
  return ref.current.series;
}

function Timing({ frame }) {
  const st = frame && frame.status;
  const roll = useRolling(frame, (f, p) => HISTOS.map(([k]) => intervalP99(p && p.status && p.status.histograms[k], f.status && f.status.histograms[k])));
  if (!st) return <p class="mute">{(frame && frame.error) || 'waiting for the master…'}</p>;
  const c = st.counters;
  return (
    <section>
      <div class="row">
        <span class="pill">{st.state}</span>
        <span>period {ns(st.period_ns)}</span>
        <span>cycles {c.cycles}</span>
        <span class={'pill ' + (c.missed_deadlines ? 'warn' : 'ok')}>missed deadlines {c.missed_deadlines}</span>
        <span class={'pill ' + (c.frames_lost ? 'bad' : 'ok')}>lost frames {c.frames_lost}</span>
        <span class={'pill ' + (c.wkc_mismatches ? 'warn' : 'ok')}>WKC mismatches {c.wkc_mismatches}</span>
        <span>recoveries {c.recoveries}</span>
      </div>
      <div class="card">
        <strong>P99 of each 100 ms</strong> <span class="mute">(bucket bound; blue wake, orange execution, green round trip)</span>
        <Rolling series={[0, 1, 2].map((k) => roll.map((r) => r[k]))} colors={['#1f5fae', '#c26a00', '#1f7a3a']} label="rolling P99" />
      </div>
      <div class="grid">
        {HISTOS.map(([k, name]) => {
          const h = st.histograms[k];
          return (
            <div class="card" key={k} data-histogram={k}>
              <strong>{name}</strong>
              <div class="mute">P50 {ns(h.p50)} · P99 {ns(h.p99)} · P99.9 {ns(h.p999)} · max {ns(h.max)} · {h.count} samples</div>
              <Histogram h={h} />
            </div>
          );
        })}
      </div>
      <div class="card">
        <strong>Distributed clocks</strong>
        {st.dc ? <pre>{JSON.stringify(st.dc, null, 1)}</pre> : <p class="mute">not driven on this run</p>}
      </div>
      <Doctor />
    </section>
  );
}

const VERDICT = { FAIL: 'bad', WARN: 'warn', PASS: 'ok' };
const VERDICT_ORDER = { FAIL: 0, WARN: 1, PASS: 2 };

// The board's `rtcat doctor --json` report as an unprivileged timer last wrote it (rtcat-web
// reads the file; it runs nothing), worst verdicts first, read again every minute.
function Doctor() {
  const [d, setD] = useState(null);
  const [err, setErr] = useState('');
  useEffect(() => {
    const get = () => api('/api/doctor').then((v) => { setD(v); setErr(''); }).catch((e) => setErr(e.message));
    get();
    const t = setInterval(get, 60000);
    return () => clearInterval(t);
  }, []);
  const r = d && d.report;
  const checks = r ? [...r.checks].sort((a, b) => (VERDICT_ORDER[a.verdict] ?? 3) - (VERDICT_ORDER[b.verdict] ?? 3)) : [];
  const sum = r && r.summary;
  return (
    <div class="card" data-doctor>
      <strong>doctor: this board</strong>
      {err && <p class="err">{err}</p>}
      {d && !r && <p class="mute">{d.why}</p>}
      {r && (
        <div>
          <div class="row">
            {sum && ['fail', 'warn', 'pass', 'na'].map((k) => <span class={'pill ' + ({ fail: 'bad', warn: 'warn', pass: 'ok' }[k] || '')}>{k.toUpperCase()} {sum[k] ?? 0}</span>)}
            <span class="mute">{r.kernel} · RT CPU {r.rt_cpus} · {r.iface} · {d.age_s == null ? '' : `written ${d.age_s} s ago`} ({d.file})</span>
          </div>
          <table>
            <thead><tr><th>check</th><th>verdict</th><th>observed</th><th>fix</th></tr></thead>
            <tbody>
              {checks.map((c) => (
                <tr key={c.id} data-doctor-check={c.id}><td><code>{c.id}</code></td><td><span class={'pill ' + (VERDICT[c.verdict] || '')} data-verdict>{c.verdict}</span></td><td>{c.observed}</td><td>{c.verdict === 'PASS' ? '' : c.fix}</td></tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </div>
  );
}

const TYPES = { u8: [1, false], u16: [2, false], u32: [4, false], i8: [1, true], i16: [2, true], i32: [4, true] };

function encode(type, text) {
  if (type === 'hex') return text.replace(/\s+/g, '');
  if (type === 'string') return Array.from(new TextEncoder().encode(text)).map((b) => b.toString(16).padStart(2, '0')).join('');
  const [n, signed] = TYPES[type];
  let v = BigInt(text.trim());
  const lim = 1n << BigInt(8 * n);
  if (signed ? (v < -(lim / 2n) || v >= lim / 2n) : (v < 0n || v >= lim)) throw new Error(`${text} does not fit ${type}`);
  if (v < 0n) v += lim;
  let out = '';
  for (let i = 0; i < n; i++) { out += Number(v & 255n).toString(16).padStart(2, '0'); v >>= 8n; }
  return out;
}

function decode(hexs) {
  const b = (hexs.match(/../g) || []).map((x) => parseInt(x, 16));
  const le = (n) => b.slice(0, n).reduceRight((a, x) => a * 256 + x, 0);
  const out = [];
  if (b.length <= 4 && b.length) { out.push(`unsigned ${le(b.length)}`); const u = le(b.length), m = 2 ** (8 * b.length); out.push(`signed ${u >= m / 2 ? u - m : u}`); }
  if (b.length && b.every((x) => x >= 32 && x < 127)) out.push(`text "${String.fromCharCode(...b)}"`);
  return out.join(' · ');
}

const OBJECT_CODE = { 7: 'VAR', 8: 'ARRAY', 9: 'RECORD' };

// The device's mailbox protocols (from its SII, as the scan read them) and, where it has FoE,
// a file read from the device through the master, saved by the browser.
function Mailbox({ pos, session }) {
  const [subs, setSubs] = useState(null);
  const [name, setName] = useState('');
  const [pw, setPw] = useState('0');
  const [res, setRes] = useState(null);
  const [err, setErr] = useState('');
  const [eoe, setEoe] = useState(null);
  useEffect(() => { api('/api/scan').then((s) => setSubs(s.subdevices)).catch(() => setSubs(null)); }, []);
  const d = subs && subs.find((x) => String(x.position) === String(pos).trim());
  const protos = (d && d.mailbox_protocols) || [];
  const hasEoe = protos.includes('EoE');
  useEffect(() => {
    setEoe(null);
    if (d && hasEoe) api('/api/eoe/ip', { position: d.position }).then(setEoe).catch((e) => setEoe({ error: e.message }));
  }, [d && d.position, hasEoe]);
  if (!d) return null;
  const read = async () => {
    setErr(''); setRes(null);
    try {
      const r = await fetch('/api/foe/read', { method: 'POST', credentials: 'same-origin', headers: { 'Content-Type': 'application/json', 'X-CSRF-Token': csrf }, body: JSON.stringify({ position: d.position, name, password: Number(pw) }) });
      if (!r.ok) { let m = `${r.status}`; try { m = (await r.json()).error; } catch (_) { /* no JSON */ } throw new Error(m); }
      const blob = await r.blob();
      const text = new TextDecoder('utf-8', { fatal: false }).decode(await blob.slice(0, 200).arrayBuffer());
      const a = document.createElement('a');
      a.href = URL.createObjectURL(blob); a.download = name.replace(/[\/\\]/g, '_'); a.click();
      setTimeout(() => URL.revokeObjectURL(a.href), 10000);
      setRes({ bytes: blob.size, text });
    } catch (e) { setErr(e.message); }
  };
  // The write role sends a file of this computer to the device (the body is the file; the
  // master's record has the user and the file's name and size).
  const write = async () => {
    setErr(''); setRes(null);
    const f = document.querySelector('input[name=foe-file]').files[0];
    if (!f) { setErr('choose a file to write'); return; }
    try {
      const q = `position=${d.position}&name=${encodeURIComponent(name)}&password=${Number(pw)}`;
      const r = await fetch(`/api/foe/write?${q}`, { method: 'POST', credentials: 'same-origin', headers: { 'Content-Type': 'application/octet-stream', 'X-CSRF-Token': csrf }, body: f });
      let data = null;
      try { data = await r.json(); } catch (_) { /* no JSON */ }
      if (!r.ok) throw new Error((data && data.error) || `${r.status}`);
      setRes({ wrote: data.bytes, seconds: data.seconds });
    } catch (e) { setErr(e.message); }
  };
  return (
    <div data-mailbox>
      <p>mailbox protocols of position {d.position}: {protos.length ? protos.map((p) => <span class="pill" data-protocol={p}>{p}</span>) : <span class="mute">none</span>}</p>
      {hasEoe && eoe && (
        <p data-eoe>EoE: {eoe.error ? <span class="err">{eoe.error}</span> : (
          <span>MAC <code>{eoe.mac || '–'}</code> · {eoe.ip
            ? <span>IP <a href={`http://${eoe.ip}/`} target="_blank" rel="noopener noreferrer">{eoe.ip}</a> <span class="mute">(reachable where the board routes to the EoE network: [[eoe]])</span></span>
            : <span class="mute">no IP address set on the device</span>}</span>
        )}</p>
      )}
      {protos.includes('FoE') && (
        <div class="row">
          <label>FoE file <input name="foe-name" placeholder="name on the device" value={name} onInput={(e) => setName(e.target.value)} /></label>
          <label>password <input name="foe-password" size="10" value={pw} onInput={(e) => setPw(e.target.value)} /></label>
          <button onClick={read} disabled={!name}>Read file</button>
          {session.role === 'write' && <input type="file" name="foe-file" aria-label="file to write" />}
          {session.role === 'write' && <button onClick={write} disabled={!name}>Write file</button>}
        </div>
      )}
      <div data-foe-result>
        {res && res.wrote != null && <p>wrote {res.wrote} bytes to the device</p>}
        {res && res.wrote == null && <p>read {res.bytes} bytes (saved by the browser) <code>{res.text}</code></p>}
        {err && <p class="err" role="alert">{err}</p>}
      </div>
    </div>
  );
}

// The device's object dictionary by SDO information (the master asks the device through its
// mailbox queue); an object opens to its entries, an entry is read with the form above.
function ObjectDictionary({ pos, onRead }) {
  const [od, setOd] = useState(null);
  const [open, setOpen] = useState({});
  const [busy, setBusy] = useState(false);
  const [err, setErr] = useState('');
  const [q, setQ] = useState('');
  const list = async () => {
    setErr(''); setBusy(true); setOpen({});
    try { setOd(await api('/api/od/list', { position: Number(pos) })); } catch (e) { setErr(e.message); setOd(null); }
    setBusy(false);
  };
  const toggle = async (index) => {
    if (open[index]) { setOpen({ ...open, [index]: null }); return; }
    try {
      const o = await api('/api/od/object', { position: od.position, index });
      setOpen((s) => ({ ...s, [index]: o }));
    } catch (e) { setOpen((s) => ({ ...s, [index]: { error: e.message } })); }
  };
  const needle = q.trim().toLowerCase();
  const shown = od ? od.objects.filter((o) => !needle || (hex(o.index) + ' ' + (o.name || '')).toLowerCase().includes(needle)) : [];
  return (
    <div data-od>
      <div class="row">
        <button onClick={list} disabled={busy}>{busy ? 'Listing…' : `Object dictionary of position ${pos}`}</button>
        {od && <input type="search" placeholder="filter objects" value={q} onInput={(e) => setQ(e.target.value)} aria-label="filter objects" />}
        {od && <span class="mute">{od.objects.length} objects</span>}
      </div>
      {err && <p class="err" role="alert">{err}</p>}
      {od && (
        <table>
          <thead><tr><th>index</th><th>name</th><th>object</th><th class="num">subindices</th></tr></thead>
          <tbody>
            {shown.map((o) => [
              <tr key={o.index} data-object={hex(o.index)} onClick={() => toggle(o.index)} class="click">
                <td><code>{hex(o.index)}</code></td><td>{o.name || o.error || ''}</td><td>{OBJECT_CODE[o.object_code] || ''}</td><td class="num">{o.max_sub ?? ''}</td>
              </tr>,
              open[o.index] && (
                <tr key={o.index + 'e'}><td colspan="4">
                  {open[o.index].error ? <p class="err">{open[o.index].error}</p> : (
                    <table data-entries={hex(o.index)}>
                      <tbody>
                        {open[o.index].entries.map((e) => (
                          <tr key={e.sub} data-entry-sub={e.sub}>
                            <td><code>{hex(o.index)}:{e.sub}</code></td><td>{e.name || e.error}</td><td>{e.type || (e.data_type != null ? hex(e.data_type) : '')}</td><td>{e.bits != null ? `${e.bits} bits` : ''}</td><td>{e.access || ''}</td>
                            <td>{!e.error && <button aria-label={`Read ${hex(o.index)}:${e.sub}`} onClick={() => onRead({ position: od.position, index: hex(o.index), sub: e.sub })}>Read</button>}</td>
                          </tr>
                        ))}
                      </tbody>
                    </table>
                  )}
                </td></tr>
              ),
            ])}
          </tbody>
        </table>
      )}
    </div>
  );
}

function Device({ session }) {
  const [pos, setPos] = useState('0');
  const [index, setIndex] = useState('0x1018');
  const [sub, setSub] = useState('1');
  const [type, setType] = useState('u16');
  const [value, setValue] = useState('');
  const [result, setResult] = useState(null);
  const [err, setErr] = useState('');
  const run = async (write, at) => {
    setErr(''); setResult(null);
    try {
      const base = at ? { position: Number(at.position), index: at.index, sub: String(at.sub) } : { position: Number(pos), index, sub };
      if (at) { setPos(String(at.position)); setIndex(at.index); setSub(String(at.sub)); }
      if (write) {
        const r = await api('/api/sdo/write', { ...base, data: encode(type, value) });
        setResult({ text: `wrote ${r.written} bytes` });
      } else {
        const r = await api('/api/sdo/read', base);
        setResult({ text: r.data, more: decode(r.data) });
      }
    } catch (e) { setErr(e.message); }
  };
  return (
    <section class="card">
      <p class="mute">Read any object of a subdevice's object dictionary (CoE SDO upload); writing needs the write role and is put on the master's record with your user name.</p>
      <div class="row">
        <label>position <input name="position" size="4" value={pos} onInput={(e) => setPos(e.target.value)} /></label>
        <label>index <input name="index" size="8" value={index} onInput={(e) => setIndex(e.target.value)} /></label>
        <label>sub <input name="sub" size="4" value={sub} onInput={(e) => setSub(e.target.value)} /></label>
        <button class="primary" onClick={() => run(false)}>Read</button>
      </div>
      <div class="row">
        <select name="type" value={type} onChange={(e) => setType(e.target.value)} aria-label="type">
          {[...Object.keys(TYPES), 'hex', 'string'].map((t) => <option value={t}>{t}</option>)}
        </select>
        <input name="value" placeholder="value" value={value} onInput={(e) => setValue(e.target.value)} />
        <button onClick={() => run(true)} disabled={session.role !== 'write'} title={session.role !== 'write' ? 'needs the write role' : ''}>Write</button>
      </div>
      <div data-sdo-result>
        {result && <p><code>{result.text}</code> <span class="mute">{result.more}</span></p>}
        {err && <p class="err" role="alert">{err}</p>}
      </div>
      <Mailbox pos={pos} session={session} />
      <ObjectDictionary pos={pos} onRead={(at) => run(false, at)} />
    </section>
  );
}

// A hold-to-run button: pressing sends `command`, holding renews its lease every 100 ms (the
// master stops the axis 300 ms after the last renewal); releasing it, the pointer leaving, the
// window losing focus, the tab hiding or the view closing stop renewing and ask for a stop.
// Closing the tab or losing the connection or the session stop the renewals just the same.
function HoldButton({ name, command, label, onError, onState }) {
  const held = useRef(null);
  const release = () => {
    const h = held.current;
    if (!h) return;
    held.current = null;
    clearInterval(h.timer);
    onState && onState(false);
    // After the command went out (or failed): a stop sent first could be overtaken by it.
    h.started.finally(() => api('/api/axis', { name, action: 'stop' }).catch((x) => onError(x.message)));
  };
  const press = (e) => {
    e.preventDefault();
    if (held.current || (e.button !== undefined && e.button !== 0 && e.type === 'pointerdown')) return;
    const c = command();
    if (typeof c === 'string') { onError(c); return; }
    if (e.pointerId !== undefined) { try { e.currentTarget.setPointerCapture(e.pointerId); } catch (_) { /* not capturable */ } }
    onError('');
    const h = { timer: null, started: null };
    held.current = h;
    onState && onState(true);
    h.started = api('/api/axis', { name, ...c }).then(() => {
      if (held.current !== h) return;
      h.timer = setInterval(() => {
        api('/api/axis', { name, action: 'renew' }).then((r) => {
          if (held.current === h && r && r.renewed === false) {
            // Arrived, or stopped by the master (a renewal came too late): nothing to hold.
            clearInterval(h.timer); held.current = null; onState && onState(false);
            if (!/holding/.test(r.why || '')) onError(r.why);
          }
        }).catch((x) => { onError(x.message); release(); });
      }, 100);
    }).catch((x) => { onError(x.message); if (held.current === h) { held.current = null; onState && onState(false); } });
  };
  useEffect(() => {
    const hidden = () => { if (document.hidden) release(); };
    addEventListener('blur', release);
    document.addEventListener('visibilitychange', hidden);
    return () => { removeEventListener('blur', release); document.removeEventListener('visibilitychange', hidden); release(); };
  }, []);
  const key = (e) => { if ((e.key === ' ' || e.key === 'Enter') && !e.repeat) press(e); };
  const keyUp = (e) => { if (e.key === ' ' || e.key === 'Enter') release(); };
  return (
    <button class="hold" data-hold={label} onPointerDown={press} onPointerUp={release} onPointerCancel={release}
      onLostPointerCapture={release} onKeyDown={key} onKeyUp={keyUp} onContextMenu={(e) => e.preventDefault()}>{label}</button>
  );
}

function AxisControls({ a }) {
  const vmax = a.max_velocity || 0;
  const [speed, setSpeed] = useState(() => String(Math.max(0.001, Number((vmax / 10).toPrecision(2)))));
  const [target, setTarget] = useState('');
  const [err, setErr] = useState('');
  const [holding, setHolding] = useState(false);
  const cmd = (action) => () => { setErr(''); api('/api/axis', { name: a.name, action }).catch((x) => setErr(x.message)); };
  const num = (t, what) => (t.trim() === '' || !Number.isFinite(Number(t)) ? `${what}: enter a number` : null);
  const jog = (sign) => () => num(speed, 'jog velocity') || { action: 'jog', velocity: sign * Number(speed) };
  const lim = (x, inf) => x == null ? inf : x;
  return (
    <div class="card" data-axis-controls={a.name}>
      <div class="row">
        <strong>{a.name}</strong>
        <button onClick={cmd('enable')}>Enable</button>
        <button onClick={cmd('disable')}>Disable</button>
        <button onClick={cmd('reset')}>Fault reset</button>
        <button onClick={cmd('release')} disabled={!a.manual} title="back to the configured program">Release to program</button>
        {holding && <span class="pill warn">held</span>}
      </div>
      <div class="row">
        <label>jog <input name="velocity" inputmode="decimal" size="6" value={speed} onInput={(e) => setSpeed(e.target.value)} /> units/s (≤ {vmax})</label>
        <HoldButton name={a.name} label="Jog −" command={jog(-1)} onError={setErr} onState={setHolding} />
        <HoldButton name={a.name} label="Jog +" command={jog(1)} onError={setErr} onState={setHolding} />
      </div>
      <div class="row">
        <label>to <input name="target" inputmode="decimal" size="8" value={target} onInput={(e) => setTarget(e.target.value)} /> units ({lim(a.min_position, '−∞')} … {lim(a.max_position, '∞')})</label>
        <HoldButton name={a.name} label="Move (hold)" command={() => num(target, 'target') || { action: 'move_to', position: Number(target) }} onError={setErr} onState={setHolding} />
      </div>
      {err && <p class="err" role="alert">{err}</p>}
    </div>
  );
}

function Axes({ frame, session }) {
  const axes = (frame && frame.status && frame.status.axes) || null;
  const roll = useRolling(frame, (f) => {
    const a = f.status && f.status.axes;
    return a ? a.map((x) => Math.abs(x.following_error) + 1) : undefined;
  });
  if (!axes) return <p class="mute">No axes on this master (no [[axis]] in its configuration).</p>;
  const may = session.role === 'write' && session.motion;
  return (
    <section>
      <table>
        <thead><tr><th>axis</th><th>position</th><th>state</th><th class="num">actual (units)</th><th>runs</th><th class="num">following error (counts)</th><th class="num">faults</th></tr></thead>
        <tbody>
          {axes.map((a) => (
            <tr key={a.name} data-axis={a.name}><td>{a.name}</td><td>{a.position}</td><td>{a.state}</td><td class="num" data-actual>{a.actual == null ? '–' : a.actual.toFixed(3)}</td><td data-manual>{a.manual || 'program'}</td><td class="num">{a.following_error}</td><td class="num">{a.faults}</td></tr>
          ))}
        </tbody>
      </table>
      {may
        ? <div><p class="mute">Jog and move run only while their button is held (hold-to-run): releasing it, leaving the page or losing the connection stops the axis within 0.3 s. A command takes the axis out of its configured program until released; every command is on the master's record with your name.</p>{axes.map((a) => <AxisControls key={a.name} a={a} />)}</div>
        : <p class="mute">{session.role !== 'write' ? 'Axis commands need the write role.' : 'Axis commands are off on this board (rtcat-web --allow-motion).'}</p>}
      <div class="card">
        <strong>|following error| + 1, last 30 s</strong>
        <Rolling series={axes.map((_, k) => roll.map((r) => r && r[k]))} colors={['#1f5fae', '#c26a00', '#1f7a3a', '#7b3fa0']} label="following error" fmt={(v) => `${v.toFixed(0)} counts`} />
      </div>
    </section>
  );
}

function Events({ frame }) {
  const [events, setEvents] = useState([]);
  const [q, setQ] = useState('');
  const [kind, setKind] = useState('');
  const n = frame ? frame.events : 0;
  useEffect(() => { api('/api/events').then(setEvents).catch(() => {}); }, [n]);
  const kinds = [...new Set(events.map((e) => e.kind))];
  const needle = q.trim().toLowerCase();
  const shown = events.filter((e) => (!kind || e.kind === kind) && (!needle || (e.text + ' ' + (e.user || '')).toLowerCase().includes(needle))).reverse();
  return (
    <section>
      <div class="row">
        <input type="search" placeholder="filter" value={q} onInput={(e) => setQ(e.target.value)} aria-label="filter events" />
        <select value={kind} onChange={(e) => setKind(e.target.value)} aria-label="kind">
          <option value="">all kinds</option>
          {kinds.map((k) => <option value={k}>{k}</option>)}
        </select>
        <span class="mute">Writes are also on the master's record (events.log, journal) with the user.</span>
      </div>
      <table>
        <thead><tr><th>time</th><th>kind</th><th>user</th><th>what</th></tr></thead>
        <tbody>
          {shown.map((e) => (
            <tr key={e.id} data-event={e.kind}><td>{new Date(e.t_ms).toLocaleTimeString()}</td><td>{e.kind}</td><td>{e.user || ''}</td><td>{e.text}</td></tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}

const VIEWS = [['bus', 'Bus', Bus], ['pd', 'Process data', ProcessData], ['timing', 'Timing', Timing], ['device', 'Device', Device], ['axes', 'Axes', Axes], ['events', 'Events', Events]];

function Main({ session, onLogout }) {
  const frame = useLive(onLogout);
  const [view, setView] = useState(() => (location.hash || '#bus').slice(1));
  useEffect(() => { const h = () => setView((location.hash || '#bus').slice(1)); addEventListener('hashchange', h); return () => removeEventListener('hashchange', h); }, []);
  const cur = VIEWS.find((v) => v[0] === view) || VIEWS[0];
  const View = cur[2];
  const st = frame && frame.status;
  const logout = () => api('/api/logout', {}).finally(onLogout);
  return (
    <div>
      <header>
        <h1>rtcat</h1>
        <span class={'pill ' + (frame && frame.up ? (st.state === 'op' ? 'ok' : 'warn') : 'bad')} data-master>{frame ? (frame.up ? st.state : 'master unreachable') : 'connecting'}</span>
        {st && <span>{st.subdevices} subdevices · {(st.period_ns / 1e3).toFixed(0)} µs · up {st.uptime_s.toFixed(0)} s</span>}
        <span class="who">{session.user} ({session.role}) <button onClick={logout}>Log out</button></span>
      </header>
      <nav role="tablist">
        {VIEWS.map(([id, name]) => <button role="tab" aria-selected={id === cur[0]} data-view={id} onClick={() => { location.hash = id; }}>{name}</button>)}
      </nav>
      <main>
        {frame && !frame.up && <p class="err">{frame.error}</p>}
        <View frame={frame} session={session} />
      </main>
    </div>
  );
}

function App() {
  const [session, setSession] = useState(undefined);
  useEffect(() => { api('/api/session').then((s) => setSession(s.user ? s : null)).catch(() => setSession(null)); }, []);
  if (session === undefined) return <p class="mute">…</p>;
  if (!session) return <Login onLogin={(s) => { csrf = s.csrf; setSession(s); }} />;
  csrf = session.csrf;
  return <Main session={session} onLogout={() => { csrf = ''; setSession(null); }} />;
}

render(<App />, document.getElementById('app'));
