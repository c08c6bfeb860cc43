//! The largest segment the master runs ([`MAX_SUBDEVICES`] subdevices, [`MAX_PDI_BYTES`] of
//! process data) goes to OP and cycles cleanly on the in-process simulated segment; one more
//! subdevice or byte is refused with an error naming the limit.

use ecsim::{Faults, SegmentSpec};
use rtcat::config::Config;
use rtcat::runner::{Job, JobResult, execute};
use rtcat_master::echo::EchoCheck;
use rtcat_master::master::{MAX_PDI_BYTES, MAX_SUBDEVICES, Target};
use std::time::Duration;

// One master at a time: the stop flag is process-wide, and one run's memory locking would
// stall the other's bring-up.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn run(spec: SegmentSpec, period_us: u32) -> anyhow::Result<JobResult> {
    let mut cfg = Config::default();
    // The bring-up of 1024 subdevices takes a minute in a debug build; each cycle sends one AL
    // status read per subdevice (as ethercrab's tx_rx), 14 frames at the limit: a long period.
    cfg.master.cycle.period_us = period_us;
    cfg.output.status_interval_ms = 0;
    cfg.master.rt.hold_cpu_dma_latency = false;
    // This test is about capacity, not timing: the bring-up's PDUs get a generous timeout on a
    // shared machine (a debug build, other test binaries, memory locking of the other test).
    cfg.master.bus.init_pdu_timeout_ms = 2000;
    cfg.master.bus.init_eeprom_timeout_ms = 2000;
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    rtcat::signals::reset();
    execute(Job {
        cfg,
        target: Some(Target::Sim {
            spec,
            faults: Faults::new(),
        }),
        duration: Some(Duration::from_secs(1)),
        no_rt: !nix::unistd::geteuid().is_root(),
        stage: None,
        dir: std::sync::Arc::new(safefs::Dir::create_all(dir.path()).unwrap()),
        json: None,
        samples: false,
        app: Box::new(EchoCheck::default()),
        notifier: None,
        echo_events: false,
        print_table: false,
        retry_start: false,
        live: Default::default(),
        axes: None,
        floor: None,
        shm: None,
    })
}

fn assert_clean(r: &JobResult, devices: usize, pdi: usize) {
    let s = &r.summary;
    assert_eq!(r.fatal, None);
    assert_eq!(s.subdevices as usize, devices);
    assert_eq!(s.pdi_bytes as usize, pdi);
    assert!(s.cycles >= 10, "{} cycles", s.cycles);
    assert_eq!(s.wkc.mismatches, 0);
    assert_eq!(s.frames_lost, 0);
    assert_eq!(r.rec.data_errors, 0);
}

#[test]
fn the_largest_segment_runs_and_one_more_subdevice_is_refused() {
    let r = run(SegmentSpec::uniform(MAX_SUBDEVICES, 1, 1), 20_000).expect("runs");
    assert_clean(&r, MAX_SUBDEVICES, 2 * MAX_SUBDEVICES);
    assert_eq!(r.summary.wkc.expected, Some(3 * MAX_SUBDEVICES as u32));

    let e = run(SegmentSpec::uniform(MAX_SUBDEVICES + 1, 1, 1), 20_000)
        .err()
        .expect("one subdevice too many");
    let msg = format!("{e:#}");
    assert!(
        msg.contains(&format!(
            "the segment has {} subdevices; rtcat runs at most {MAX_SUBDEVICES}",
            MAX_SUBDEVICES + 1
        )),
        "{msg}"
    );
}

#[test]
fn the_largest_process_image_runs_and_one_more_byte_is_refused() {
    // 16 x (512 out + 512 in) = 16384 bytes.
    let per = (MAX_PDI_BYTES / 32) as u16;
    let r = run(SegmentSpec::uniform(16, per, per), 10_000).expect("runs");
    assert_clean(&r, 16, MAX_PDI_BYTES);

    let mut over = SegmentSpec::uniform(17, per, per);
    over.devices[16].outputs = 1;
    over.devices[16].inputs = 0;
    let e = run(over, 10_000).err().expect("one byte too many");
    let msg = format!("{e:#}");
    assert!(
        msg.contains(&format!(
            "process image is {} bytes (inputs + outputs); rtcat runs at most {MAX_PDI_BYTES}",
            MAX_PDI_BYTES + 1
        )),
        "{msg}"
    );
}
