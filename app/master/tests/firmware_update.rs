//! Firmware update of one device of a running segment (`foe::update::update`, what `rtcat foe
//! write --boot --control` runs), with `[health] recovery = "subdevice"`: the device is parked
//! (the application told first), taken to BOOT, written over FoE through the cycle's queue,
//! handed back and brought to OP by its recovery, while the two others exchange valid data in
//! every cycle. A transfer the device aborts half-way leaves it parked in BOOT, and the update
//! starts over from there. Without per-subdevice recovery it is refused before anything is done.
//!
//! Timing-dependent: a frame lost to the machine's scheduling invalidates every subdevice's
//! data for its cycle (inline, it re-initialises the segment): such an attempt is the machine's
//! verdict and is retried as `ecsim::noise` does.

mod support;

use ecsim::{FaultCommand, Faults, SegmentSpec};
use rtcat_master::acyclic::sdo_queue;
use rtcat_master::config::{RecoveryPolicy, TxRxMode};
use rtcat_master::foe::{self, update};
use rtcat_master::{
    Application, Config, Cycle, RunSpec, Stop, SubdeviceCause, SubdeviceChange, SubdeviceEvent,
    Target,
};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::line::{Watch, no_frame_lost};

/// The tests share the machine's two CPUs: run them one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// A CoE drive whose firmware is served in BOOT only, between two I/O terminals.
const SEGMENT: &str = r#"
[[device]]
name = "IO-A"
product_id = 0x00290021
inputs = 2
outputs = 2

[[device]]
name = "DRIVE"
product_id = 0x00290022
coe = true
inputs = 2
[[device.file]]
name = "firmware.bin"
size = 100
writable = true
boot = true
max_bytes = 40000
[[device.file]]
name = "firmware-v2.bin"
writable = true
boot = true
revision = 0x00020000

[[device]]
name = "IO-B"
product_id = 0x00290023
inputs = 2
outputs = 2
"#;

const N: usize = 3;

/// Records every cycle and per-subdevice event.
struct Probe(Watch<N>);

impl Application for Probe {
    fn cycle(&mut self, cx: &mut Cycle<'_>) {
        self.0.cycle(cx.status);
    }

    fn on_subdevice(&mut self, e: &SubdeviceEvent) {
        self.0.on_subdevice(e);
    }
}

/// What the client thread saw.
struct Client {
    aborted: Result<update::Updated, update::UpdateError>,
    state_after_abort: u8,
    done: Result<update::Updated, update::UpdateError>,
}

type ClientSide = fn(&rtcat_master::acyclic::SdoClient, &Config, &Faults) -> Client;

fn run(policy: RecoveryPolicy, client_side: ClientSide) -> (rtcat_master::Outcome, Probe, Client) {
    let mut cfg = Config::default();
    cfg.cycle.period_us = 1000;
    cfg.cycle.txrx = TxRxMode::Inline;
    cfg.health.recovery = policy;
    cfg.health.recovery_backoff_ms = 50;
    cfg.health.bad_cycles_before_recovery = 1;
    let (client, service) = sdo_queue(8, Duration::from_micros(300));
    let stop = Stop::new();
    let faults = Faults::new();
    let mut spec = RunSpec::new(
        cfg.clone(),
        Target::Sim {
            spec: SegmentSpec::from_toml(SEGMENT).unwrap(),
            faults: faults.clone(),
        },
        stop.clone(),
    );
    spec.no_rt = true;
    spec.duration = Some(Duration::from_secs(120));
    spec.sdo = Some(service);
    let client = Arc::new(client);
    let c2 = client.clone();
    let worker = std::thread::spawn(move || {
        // OP first: the queue serves requests only while the segment cycles.
        let start = Instant::now();
        while c2
            .read_register(1, 0x0130, 1, Duration::from_secs(1))
            .map(|d| d.as_slice()[0])
            != Ok(0x08)
        {
            assert!(start.elapsed() < Duration::from_secs(30), "never in OP");
            std::thread::sleep(Duration::from_millis(20));
        }
        // A few cycles of every subdevice in OP before the update.
        std::thread::sleep(Duration::from_millis(200));
        let r = client_side(&c2, &cfg, &faults);
        std::thread::sleep(Duration::from_millis(200));
        stop.request();
        r
    });
    let mut probe = Probe(Watch::new(200_000));
    let out = rtcat_master::run_simple(spec, &mut probe).expect("run");
    let seen = worker.join().expect("client thread");
    (out, probe, seen)
}

fn image(n: usize, seed: usize) -> Vec<u8> {
    (0..n).map(|i| ((i * 31 + seed) % 251) as u8).collect()
}

fn options() -> update::Options {
    update::Options {
        request: Duration::from_secs(5),
        state: Duration::from_secs(5),
        back: Duration::from_secs(20),
        ..update::Options::default()
    }
}

fn abort_then_update(q: &rtcat_master::acyclic::SdoClient, cfg: &Config, _: &Faults) -> Client {
    let opt = options();
    // Larger than the device takes: it aborts half-way (FoE "disk full").
    let big = image(50_000, 1);
    let job = |data| update::Job {
        position: 1,
        name: "firmware.bin",
        password: 0,
        data,
    };
    let aborted = update::update(q, cfg, job(&big), &opt, &mut |_| {});
    let state_after_abort = q
        .read_register(1, 0x0130, 1, Duration::from_secs(5))
        .map_or(0, |d| d.as_slice()[0]);
    let fw = image(30_000, 7);
    let done = update::update(q, cfg, job(&fw), &opt, &mut |_| {});
    Client {
        aborted,
        state_after_abort,
        done,
    }
}

fn attempt() -> Result<(), String> {
    let (out, p, c) = run(RecoveryPolicy::Subdevice, abort_then_update);
    no_frame_lost(&out)?;
    // The abort: a clear error, the device left parked in BOOT.
    let e = c.aborted.expect_err("a write beyond max_bytes is aborted");
    match &e {
        update::UpdateError::Parked {
            position: 1,
            source,
        } => {
            assert_eq!(source.code(), Some(foe::code::DISK_FULL), "{e}")
        }
        other => panic!("{other}"),
    }
    assert!(e.to_string().contains("stays parked in BOOT"), "{e}");
    assert_eq!(c.state_after_abort, 0x03, "parked in BOOT after the abort");
    // The update from there.
    let u = c.done.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(u.bytes, 30_000);
    assert!(u.back_in_op, "back in OP");
    assert_eq!(u.after, Some(u.before));
    // Told first, out of the recovery's hands until handed back, back with the update's cause.
    let of_1: Vec<_> = p.0.events.iter().filter(|e| e.position == 1).collect();
    assert!(
        matches!(
            of_1.first().map(|e| e.change),
            Some(SubdeviceChange::Parked {
                cause: SubdeviceCause::FirmwareUpdate
            })
        ),
        "{of_1:?}"
    );
    assert!(
        matches!(
            of_1.get(1).map(|e| e.change),
            Some(SubdeviceChange::Back {
                cause: SubdeviceCause::FirmwareUpdate,
                attempts: 1,
                ..
            })
        ),
        "{of_1:?}"
    );
    assert_eq!(of_1.len(), 2, "{of_1:?}");
    assert!(
        p.0.events.iter().all(|e| e.position == 1),
        "{:?}",
        p.0.events
    );
    let parked_at = of_1[0].cycle;
    let back_at = of_1[1].cycle;
    // The application heard it before the device left OP, and its data was invalid from then
    // on, in OP or not, until the recovery had it in OP again (the cycle in which the worker
    // reports it back may follow that one, as for any outage); valid before and after.
    let left =
        p.0.log
            .iter()
            .find(|s| !s.in_op[1])
            .map(|s| s.cycle)
            .expect("position 1 left OP");
    assert!(
        parked_at < left,
        "parked in cycle {parked_at}, out of OP in {left}"
    );
    for s in &p.0.log {
        let expected = if s.cycle < parked_at || s.cycle >= back_at {
            true
        } else if s.cycle < left {
            false
        } else {
            s.in_op[1]
        };
        assert_eq!(
            s.valid[1], expected,
            "position 1 in cycle {} (parked {parked_at}, out of OP {left}, back {back_at}): {s:?}",
            s.cycle
        );
    }
    // The others: valid data in every cycle, no segment recovery.
    assert_eq!(out.rec.recoveries, 0);
    let invalid = |i: usize| p.0.log.iter().filter(|s| !s.valid[i]).count();
    assert_eq!(
        (invalid(0), invalid(2)),
        (0, 0),
        "healthy ones' invalid cycles"
    );
    assert!(p.0.log.len() > 1000, "{} cycles", p.0.log.len());
    eprintln!(
        "firmware update: 30000 bytes in BOOT in {:.2} s; position 1 out for {} cycles",
        u.transfer.as_secs_f64(),
        back_at - parked_at
    );
    Ok(())
}

#[test]
fn a_firmware_update_parks_one_device_and_the_others_keep_their_data() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    ecsim::noise::within_machine_noise("firmware update", |_| attempt());
}

fn refused(q: &rtcat_master::acyclic::SdoClient, cfg: &Config, _: &Faults) -> Client {
    let opt = options();
    let job = update::Job {
        position: 1,
        name: "firmware.bin",
        password: 0,
        data: &[1, 2, 3],
    };
    let done = update::update(q, cfg, job, &opt, &mut |_| {});
    let state = q
        .read_register(1, 0x0130, 1, Duration::from_secs(5))
        .map_or(0, |d| d.as_slice()[0]);
    Client {
        aborted: Err(update::UpdateError::Park {
            position: 1,
            why: String::new(),
        }),
        state_after_abort: state,
        done,
    }
}

#[test]
fn without_per_subdevice_recovery_an_update_is_refused_before_anything_is_done() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (out, p, c) = run(RecoveryPolicy::Segment, refused);
    let e = c.done.expect_err("refused");
    assert!(
        matches!(e, update::UpdateError::Park { position: 1, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("no per-subdevice recovery"), "{e}");
    // Still in OP, nobody told anything.
    assert_eq!(c.state_after_abort, 0x08);
    assert!(p.0.events.is_empty(), "{:?}", p.0.events);
    assert_eq!(out.rec.recoveries, 0);
}

/// New firmware with a new revision, then lost frames that re-initialise the whole segment.
fn new_revision_then_reinitialise(
    q: &rtcat_master::acyclic::SdoClient,
    cfg: &Config,
    faults: &Faults,
) -> Client {
    let job = update::Job {
        position: 1,
        name: "firmware-v2.bin",
        password: 0,
        data: &image(20_000, 3),
    };
    let done = update::update(q, cfg, job, &options(), &mut |_| {});
    faults.apply(FaultCommand::DropNext(3));
    std::thread::sleep(Duration::from_millis(300));
    // The re-initialised segment in OP again (its queue serves once it cycles).
    let start = Instant::now();
    let state = loop {
        let s = q
            .read_register(1, 0x0130, 1, Duration::from_secs(1))
            .map_or(0, |d| d.as_slice()[0]);
        if s == 0x08 || start.elapsed() > Duration::from_secs(20) {
            break s;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Client {
        aborted: Err(update::UpdateError::Park {
            position: 1,
            why: String::new(),
        }),
        state_after_abort: state,
        done,
    }
}

#[test]
fn a_new_revision_is_driven_and_expected_by_a_later_reinitialisation() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (out, p, c) = run(RecoveryPolicy::Subdevice, new_revision_then_reinitialise);
    let u = c.done.unwrap_or_else(|e| panic!("{e}"));
    assert_ne!(u.before.2, 0x0002_0000);
    assert_eq!(u.after, Some((u.before.0, u.before.1, 0x0002_0000)));
    assert!(u.back_in_op);
    assert!(
        p.0.events.iter().any(|e| e.position == 1
            && matches!(
                e.change,
                SubdeviceChange::Back {
                    cause: SubdeviceCause::FirmwareUpdate,
                    ..
                }
            )),
        "{:?}",
        p.0.events
    );
    assert!(
        !p.0.events
            .iter()
            .any(|e| matches!(e.change, SubdeviceChange::Refused { .. })),
        "{:?}",
        p.0.events
    );
    // The lost frames re-initialised the segment, which took the new revision for the device
    // it is, not for a swapped one.
    assert!(out.rec.recoveries >= 1, "{} recoveries", out.rec.recoveries);
    assert_eq!(
        c.state_after_abort, 0x08,
        "position 1 in OP after the re-initialisation"
    );
    let last = p.0.log.last().expect("cycles");
    assert!(
        last.valid == [true; N] && last.in_op == [true; N],
        "{last:?}"
    );
}
