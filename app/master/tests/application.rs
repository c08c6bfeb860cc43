//! The application API against the simulated segment: what `cycle` is told on good and bad
//! cycles, that what it writes goes out and comes back, and the recovery and shutdown
//! notifications.

use ecsim::{FaultCommand, Faults, SegmentSpec};
use rtcat_master::{
    AppError, Application, Config, Cycle, Input, Output, Recovery, RecoveryCause, RunSpec, Setup,
    ShutdownReason, Stop, Target,
};
use std::sync::Mutex;
use std::time::Duration;

/// The tests share the machine's two CPUs: run them one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// What one cycle told the application.
#[derive(Debug, Clone, Copy, Default)]
struct Seen {
    cycle: u64,
    good: bool,
    frames_lost: bool,
    wkc: u16,
    expected: u16,
    valid: [bool; 3],
    in_op: [bool; 3],
    /// 0x6000:02 of position 0 (the simulator echoes 0x7000:01 ^ 0x5a5a5a5a there).
    echo: u32,
}

/// Records every cycle into a preallocated log, writes a counter to position 0's first output
/// entry, and injects `fault` from inside the cycle at `fault_at`.
struct Probe {
    faults: Faults,
    fault_at: u64,
    fault: Option<FaultCommand>,
    log: Vec<Seen>,
    io: Option<(Output<u32>, Input<u32>)>,
    configured: u32,
    recoveries: Vec<Recovery>,
    shutdown: Option<ShutdownReason>,
}

impl Probe {
    fn new(faults: Faults, fault_at: u64, fault: Option<FaultCommand>) -> Self {
        Probe {
            faults,
            fault_at,
            fault,
            log: Vec::with_capacity(100_000),
            io: None,
            configured: 0,
            recoveries: Vec::new(),
            shutdown: None,
        }
    }
}

impl Application for Probe {
    fn configure(&mut self, setup: &mut Setup<'_>) -> Result<(), AppError> {
        self.configured += 1;
        assert_eq!(setup.subdevices().len(), 3);
        // Register access in PRE-OP: AL status 0x0130 of every subdevice says PRE-OP (2).
        for p in 0..3 {
            let mut al = [0u8; 2];
            setup.read_register(p, 0x0130, &mut al)?;
            assert_eq!(al[0] & 0x0f, 2, "position {p} AL status {al:?}");
        }
        self.io = Some((
            setup.output_at(0, 0x7000, 1)?,
            setup.input_at(0, 0x6000, 2)?,
        ));
        Ok(())
    }

    fn cycle(&mut self, cx: &mut Cycle<'_>) {
        let st = cx.status;
        if st.cycle == self.fault_at
            && let Some(f) = self.fault.take()
        {
            self.faults.apply(f);
        }
        let (out, echo) = self.io.expect("configured");
        let mut s = Seen {
            cycle: st.cycle,
            good: st.is_good(),
            frames_lost: st.frames_lost,
            wkc: st.wkc,
            expected: st.expected_wkc,
            echo: cx.get(&echo),
            ..Seen::default()
        };
        for (i, d) in st.subdevices.iter().enumerate().take(3) {
            s.valid[i] = d.data_valid;
            s.in_op[i] = d.in_op();
        }
        cx.set(&out, st.cycle as u32);
        if self.log.len() < self.log.capacity() {
            self.log.push(s);
        }
    }

    fn on_recovery(&mut self, r: &Recovery) {
        self.recoveries.push(*r);
    }

    fn shutdown(&mut self, reason: &ShutdownReason) {
        self.shutdown = Some(reason.clone());
    }
}

fn run(
    probe: &mut Probe,
    faults: Faults,
    secs: f64,
    bad_before_recovery: u32,
) -> rtcat_master::Outcome {
    let mut cfg = Config::default();
    cfg.cycle.period_us = 1000;
    // The whole segment is re-initialised (tests/subdevice_recovery.rs has the default, one
    // subdevice on its own).
    cfg.health.recovery = rtcat_master::config::RecoveryPolicy::Segment;
    cfg.health.bad_cycles_before_recovery = bad_before_recovery;
    cfg.health.recovery_backoff_ms = 50;
    rtcat_master::run_simple(sim_spec(cfg, faults, secs), probe).expect("run")
}

/// A run of `cfg` on the simulated reference segment for `secs`, without real-time settings.
fn sim_spec(cfg: Config, faults: Faults, secs: f64) -> RunSpec {
    let mut spec = RunSpec::new(
        cfg,
        Target::Sim {
            spec: SegmentSpec::reference(),
            faults,
        },
        Stop::new(),
    );
    spec.no_rt = true;
    spec.duration = Some(Duration::from_secs_f64(secs));
    spec
}

#[test]
fn healthy_cycles_echo_what_the_application_wrote() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let faults = Faults::new();
    let mut p = Probe::new(faults.clone(), u64::MAX, None);
    let out = run(&mut p, faults, 1.0, 10);
    assert_eq!(p.configured, 1);
    assert_eq!(p.log.len() as u64, out.rec.cycles, "called once per cycle");
    assert!(p.log.len() > 200, "{} cycles", p.log.len());
    let mut echoed = 0;
    for w in p.log.windows(3) {
        let (a, b) = (w[0], w[2]);
        assert!(
            b.good && b.valid == [true; 3] && b.in_op == [true; 3],
            "{b:?}"
        );
        assert_eq!(b.wkc, 9);
        // What cycle n writes goes out with the exchange of cycle n+1, after which the
        // simulated device derives its next inputs from it (ecsim::pdi): cycle n+2 reads them.
        if b.cycle == a.cycle + 2 {
            assert_eq!(b.echo, (a.cycle as u32) ^ 0x5a5a_5a5a, "{a:?} -> {b:?}");
            echoed += 1;
        }
    }
    assert!(echoed > 100);
    assert_eq!(p.shutdown, Some(ShutdownReason::Duration));
    assert!(p.recoveries.is_empty());
    let layout = out.layout.expect("layout");
    assert_eq!((layout.input_bytes, layout.output_bytes), (66, 66));
}

#[test]
fn lost_frames_are_reported_to_the_application_and_it_is_still_called() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let faults = Faults::new();
    let mut p = Probe::new(faults.clone(), 300, Some(FaultCommand::DropNext(3)));
    let out = run(&mut p, faults, 1.0, 1000);
    assert_eq!(p.log.len() as u64, out.rec.cycles);
    let lost: Vec<&Seen> = p.log.iter().filter(|s| s.frames_lost).collect();
    assert_eq!(lost.len() as u64, out.rec.frames_lost);
    assert!(!lost.is_empty(), "the dropped frames were seen as lost");
    for s in &lost {
        assert!(!s.good && s.valid == [false; 3] && s.wkc == 0, "{s:?}");
    }
    assert!(p.log.iter().all(|s| s.frames_lost || s.good));
}

#[test]
fn a_subdevice_leaving_op_invalidates_only_its_data_and_triggers_recovery() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let faults = Faults::new();
    let mut p = Probe::new(
        faults.clone(),
        300,
        Some(FaultCommand::SubdeviceError {
            position: 1,
            code: 0x001b,
        }),
    );
    let out = run(&mut p, faults, 3.0, 20);
    let bad: Vec<&Seen> = p.log.iter().filter(|s| !s.good && !s.frames_lost).collect();
    assert!(!bad.is_empty(), "the error was seen");
    // While position 1 is out of OP its share of the WKC is missing; the others' data is valid.
    let partial: Vec<&&Seen> = bad
        .iter()
        .filter(|s| !s.in_op[1] && s.in_op[0] && s.in_op[2])
        .collect();
    assert!(!partial.is_empty(), "{bad:?}");
    for s in &partial {
        assert_eq!(s.valid, [true, false, true], "{s:?}");
        assert!(s.wkc < s.expected);
    }
    assert!(out.rec.recoveries >= 1, "recovered");
    let r = p.recoveries.first().expect("on_recovery called");
    assert_eq!(r.bad_cycles, 20);
    assert!(
        matches!(r.cause, RecoveryCause::NotOp { position: 1, .. }),
        "{:?}",
        r.cause
    );
    assert_eq!(
        p.configured,
        1 + out.rec.recoveries as u32,
        "configure at every bring-up"
    );
    // After the recovery the data flows again.
    assert!(p.log.last().is_some_and(|s| s.good), "{:?}", p.log.last());
}

/// An application that refuses the segment: the bring-up fails with its message.
struct Refuses;

impl Application for Refuses {
    fn configure(&mut self, setup: &mut Setup<'_>) -> Result<(), AppError> {
        setup.input::<bool>("No such entry")?;
        Ok(())
    }
    fn cycle(&mut self, _: &mut Cycle<'_>) {
        unreachable!("never configured");
    }
}

#[test]
fn an_entry_that_does_not_exist_refuses_the_segment_with_its_name() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let spec = sim_spec(Config::default(), Faults::new(), 1.0);
    let e = rtcat_master::run_simple(spec, &mut Refuses)
        .err()
        .expect("refused");
    let m = e.to_string();
    assert!(
        m.contains("application") && m.contains("\"No such entry\""),
        "{m}"
    );
}

/// The head of a reference subdevice's inputs as a typed struct (`ethercrab-wire` derives), for
/// users who prefer structs to accessors.
#[derive(Debug, ethercrab_wire::EtherCrabWireRead)]
#[wire(bytes = 8)]
struct Head {
    #[wire(bytes = 4)]
    counter: u32,
    #[wire(bytes = 4)]
    echo: u32,
}

/// Its first output entry as a struct.
#[derive(Debug, ethercrab_wire::EtherCrabWireWrite)]
#[wire(bytes = 4)]
struct Setpoint {
    #[wire(bytes = 4)]
    value: u32,
}

/// Reads the same bytes through a struct and through accessors; writes through a struct.
struct Structs {
    io: Option<(Input<u32>, Input<u32>)>,
    compared: u64,
    differed: u64,
    /// Cycles whose echo is what the struct wrote two cycles earlier.
    echoed: u64,
}

impl Application for Structs {
    fn configure(&mut self, setup: &mut Setup<'_>) -> Result<(), AppError> {
        self.io = Some((setup.input_at(0, 0x6000, 1)?, setup.input_at(0, 0x6000, 2)?));
        Ok(())
    }

    fn cycle(&mut self, cx: &mut Cycle<'_>) {
        use ethercrab_wire::{EtherCrabWireRead, EtherCrabWireWrite};
        let (counter, echo) = self.io.expect("configured");
        let Ok(h) = Head::unpack_from_slice(&cx.image.inputs_of(0)[..8]) else {
            self.differed += 1;
            return;
        };
        let (c, e) = (cx.get(&counter), cx.get(&echo));
        self.compared += 1;
        if (h.counter, h.echo) != (c, e) {
            self.differed += 1;
        }
        let n = cx.status.cycle;
        if n >= 2 && e == (n as u32 - 2) ^ 0x5a5a_5a5a {
            self.echoed += 1;
        }
        Setpoint {
            value: cx.status.cycle as u32,
        }
        .pack_to_slice(&mut cx.image.outputs_of_mut(0)[..4])
        .expect("4 bytes");
    }
}

#[test]
fn typed_structs_read_the_same_bytes_as_the_accessors() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut app = Structs {
        io: None,
        compared: 0,
        differed: 0,
        echoed: 0,
    };
    let spec = sim_spec(Config::default(), Faults::new(), 0.5);
    rtcat_master::run_simple(spec, &mut app).expect("run");
    assert!(app.compared > 100, "{} cycles compared", app.compared);
    assert_eq!(app.differed, 0, "of {}", app.compared);
    // What the struct wrote came back through the simulated device.
    assert!(
        app.echoed * 10 > app.compared * 9,
        "{} of {}",
        app.echoed,
        app.compared
    );
}
