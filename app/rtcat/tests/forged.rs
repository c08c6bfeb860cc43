//! Forged replies on a real wire: `rtcat sim` answers in the segment's network namespace while a
//! forger next to it copies every cyclic frame of the master, changes the process data, and sends
//! it back from another MAC address before the real reply. The master (run in-process in the other
//! namespace) must take only the real replies: no data error, every forgery counted by reason.
//! Root only.

use ecsim::netns::{VethPair, root_or_skip};
use rtcat_master::Config;
use rtcat_master::echo::EchoCheck;
use rtcat_master::master::{self, Channels, Outcome, RunSpec, Target};
use rtcat_master::stats::Live;
use rtcat_packet::{PacketKind, PacketSocket};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

#[path = "support/sim_proc.rs"]
mod sim_proc;
use sim_proc::SimProc;

const BIN: &str = env!("CARGO_BIN_EXE_rtcat");
/// A locally administered address of some other station on the wire.
const FORGER_MAC: [u8; 6] = [0x02, 0x42, 0xac, 0x11, 0x00, 0x02];
const LRW: u8 = 12;
const FPRD: u8 = 4;
/// The reference segment (3 subdevices, 22 + 22 bytes each): what its real replies carry, so
/// that a forged one passes every check the master makes besides the source address.
const REFERENCE_LRW_WKC: u16 = 9;
const AL_STATUS: u16 = 0x0130;
const AL_OP: u8 = 0x08;

/// Turn a copy of the master's cyclic frame into a plausible reply with wrong process data:
/// every LRW's data inverted (with the full WKC), every AL status read answering OP. Returns
/// false for frames that are not cyclic (the first datagram is not an LRW).
fn forge(f: &mut [u8]) -> bool {
    if f.get(16) != Some(&LRW) {
        return false;
    }
    f[6..12].copy_from_slice(&FORGER_MAC);
    let mut at = 16;
    // Datagram: cmd, idx, address (4), length/flags (2), irq (2), data, WKC (2).
    while let Some(h) = f.get(at..at + 10) {
        let cmd = h[0];
        let ado = u16::from_le_bytes([h[4], h[5]]);
        let lf = u16::from_le_bytes([h[6], h[7]]);
        let len = usize::from(lf & 0x07ff);
        let (data, wkc) = (at + 10, at + 10 + len);
        if f.len() < wkc + 2 {
            break;
        }
        match cmd {
            LRW => {
                f[data..wkc].iter_mut().for_each(|b| *b ^= 0xff);
                f[wkc..wkc + 2].copy_from_slice(&REFERENCE_LRW_WKC.to_le_bytes());
            }
            FPRD if ado == AL_STATUS && len >= 1 => {
                f[data] = AL_OP;
                f[wkc..wkc + 2].copy_from_slice(&1u16.to_le_bytes());
            }
            _ => {}
        }
        if lf & 0x8000 == 0 {
            break;
        }
        at = wkc + 2;
    }
    true
}

/// The forger: in the segment's namespace, at SCHED_FIFO 75 (above the simulator's 70), answers
/// every cyclic frame of the master with a forgery. Returns how many it sent.
fn start_forger(
    net: &VethPair,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<std::io::Result<u64>> {
    let iface = net.segment_if.clone();
    VethPair::in_ns(&net.segment_ns, move || {
        let param = libc::sched_param { sched_priority: 75 };
        // SAFETY: sets the calling thread's policy; the arguments are valid.
        if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let sock = PacketSocket::open(&iface)?;
        let mut buf = [0u8; 2048];
        let mut sent = 0u64;
        while !stop.load(Ordering::Relaxed) {
            sock.wait_readable(Some(Duration::from_millis(20)))?;
            while let Some((n, kind)) = sock.recv(&mut buf)? {
                let f = &mut buf[..n];
                // The cycle's frames are rtcat's own (their source MAC `OWN_MAC`); ethercrab's
                // carry `MASTER_MAC`: both are copied.
                let from_master = f.get(6..12).is_some_and(|m| {
                    m == rtcat_master::bus::MASTER_MAC || m == rtcat_master::bus::OWN_MAC
                });
                if kind == PacketKind::Incoming && from_master && forge(f) {
                    sock.send(f)?;
                    sent += 1;
                }
            }
        }
        Ok(sent)
    })
    .expect("forger thread in the segment namespace")
}

/// `master::run` against the interface, in the master's namespace.
fn run_master(net: &VethPair, secs: u64) -> (Outcome, Arc<Live>) {
    let iface = net.master_if.clone();
    VethPair::in_ns(&net.master_ns, move || {
        // Threads inherit the namespace of the thread that creates them.
        std::thread::Builder::new()
            .spawn(move || {
                let mut cfg = Config::default();
                // 2 ms with the default response timeout (90 %): the real reply comes 200 µs
                // late and the simulator shares two cores with the master and the forger.
                cfg.cycle.period_us = 2000;
                cfg.rt.hold_cpu_dma_latency = false;
                let live = Arc::new(Live::default());
                let (events, _ev_rx) = rtrb::RingBuffer::new(4096);
                let mut ch = Channels {
                    live: live.clone(),
                    events,
                    samples: None,
                };
                let spec = RunSpec {
                    cfg,
                    target: Target::Iface(iface),
                    duration: Some(Duration::from_secs(secs)),
                    no_rt: false,
                    on_ready: None,
                    retry_start: false,
                    stop: rtcat_master::Stop::new(),
                    sdo: None,
                };
                let out = master::run(spec, &mut EchoCheck::default(), &mut ch).expect("run");
                (out, live)
            })
            .unwrap()
            .join()
            .expect("master thread")
    })
    .expect("master thread in its namespace")
    .join()
    .expect("master namespace thread")
}

#[test]
fn forged_replies_from_another_mac_are_rejected_and_counted() {
    if !root_or_skip("forged_replies") {
        return;
    }
    // The share of real replies that miss the timeout beside the forger is the machine's.
    ecsim::noise::within_machine_noise("forged replies", |_| forged_run());
}

/// One run beside the forger: what it let through is asserted, the late replies returned.
fn forged_run() -> Result<(), String> {
    let net = VethPair::create("rtcatg").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sim = SimProc::start(Path::new(BIN), &net, &dir.path().join("sim.sock"));
    // The real reply comes 200 µs late, so every forgery arrives first.
    assert_eq!(sim.ctl("delay-us 200"), "ok");
    let stop = Arc::new(AtomicBool::new(false));
    let forger = start_forger(&net, stop.clone());
    let (out, live) = run_master(&net, 5);
    stop.store(true, Ordering::Relaxed);
    let forged = forger.join().unwrap().expect("forger");

    let by = &out.bus.rx_rejected_by_reason;
    let foreign = by["foreign_source"];
    eprintln!(
        "cycles {} forged {forged} rejected {by:?} data errors {} lost {} wkc mismatches {}",
        out.rec.cycles, out.rec.data_errors, out.rec.frames_lost, out.rec.wkc_mismatches
    );
    assert!(out.rec.cycles > 1000, "{} cycles", out.rec.cycles);
    assert!(forged > out.rec.cycles / 2, "only {forged} forgeries sent");
    assert_eq!(out.rec.data_errors, 0, "forged process data was taken");
    // Every forgery that reached the master before it stopped was refused as foreign.
    assert!(
        foreign > 0 && foreign <= forged,
        "{foreign} foreign of {forged} forged"
    );
    assert_eq!(out.bus.rx_rejected, by.values().sum::<u64>());
    assert_eq!(
        live.rx_rejected.load(Ordering::Relaxed),
        out.bus.rx_rejected
    );
    assert_eq!(out.bus.send_errors, 0);
    // The real replies still made the cycles (a few may miss the timeout on a shared VM).
    ecsim::noise::ensure(out.rec.frames_lost * 50 < out.rec.cycles, || {
        format!("{} lost of {}", out.rec.frames_lost, out.rec.cycles)
    })
}
