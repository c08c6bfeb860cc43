//! `[[device]]` against the simulated CoE segment of `examples/coe`: the default and the
//! configured layout (named entries at their bit offsets, data checked byte for byte with the
//! simulator's `pdi` rule), startup SDOs read back from the devices' object dictionaries, a
//! power cycle (every device back to INIT, its dictionary reset) re-applied by the recovery,
//! and configurations the devices refuse failing the bring-up with the device and object named.

use ecsim::{FaultCommand, Faults, SegmentSpec, pdi};
mod support;

use rtcat_master::coe::{Client, Geometry, Timeouts};
use rtcat_master::{
    AppError, Application, Config, Cycle, Error, Input, Layout, Output, RunSpec, Setup, Stop,
    Target,
};
use std::sync::Mutex;
use std::time::Duration;
use support::SetupPort;

/// The tests share the machine's two CPUs: run them one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const SEGMENT: &str = include_str!("../../../examples/coe/segment.toml");
const CONFIG: &str = include_str!("../../../examples/coe/rtcat.toml");

fn segment() -> SegmentSpec {
    SegmentSpec::from_toml(SEGMENT).expect("examples/coe/segment.toml")
}

fn configured() -> Config {
    Config::parse(CONFIG, "examples/coe/rtcat.toml").expect("examples/coe/rtcat.toml")
}

/// The example without its `[[device]]` entries: the devices' default mapping.
fn unconfigured() -> Config {
    let mut c = configured();
    c.device.clear();
    c
}

fn upload(setup: &mut Setup<'_>, position: u16, index: u16, sub: u8) -> Vec<u8> {
    let mut port = SetupPort { setup, position };
    let g = Geometry::read(&mut port, position).expect("mailbox geometry");
    let mut c = Client::new(port, position, g, Timeouts::default());
    c.upload(index, sub)
        .unwrap_or_else(|e| panic!("upload {index:#06x}:{sub:02x}: {e}"))
}

fn download(setup: &mut Setup<'_>, position: u16, index: u16, sub: u8, data: &[u8]) {
    let mut port = SetupPort { setup, position };
    let g = Geometry::read(&mut port, position).expect("mailbox geometry");
    let mut c = Client::new(port, position, g, Timeouts::default());
    c.download(index, sub, data)
        .unwrap_or_else(|e| panic!("download {index:#06x}:{sub:02x}: {e}"));
}

/// What one bring-up showed.
#[derive(Debug, Default)]
struct Generation {
    layout: Layout,
    /// (position, index, sub, bytes) read by SDO in `configure`.
    sdos: Vec<(u16, u16, u8, Vec<u8>)>,
    /// Cycles whose every device's inputs matched the `pdi` rule.
    checked: u64,
    /// Cycles where they did not (with the first device that did not).
    bad: Vec<(u64, usize)>,
    /// Typed named entries that did not read what their bytes hold.
    named_bad: u64,
}

/// The servo's named entries of the configured mapping.
struct Servo {
    target: Output<i32>,
    velocity: Output<i32>,
    mode: Output<i8>,
    actual: Input<i32>,
    status: Input<u16>,
}

struct Probe {
    faults: Faults,
    stop: Stop,
    /// SDOs read in every `configure`.
    read: Vec<(u16, u16, u8)>,
    /// Inject this fault at this cycle of the first bring-up.
    fault: Option<(u32, FaultCommand)>,
    /// Stop after this many good cycles of the last bring-up.
    cycles: u64,
    gens: Vec<Generation>,
    /// Outputs written in the last cycle and in the one before.
    prev: Vec<Vec<u8>>,
    prev2: Vec<Vec<u8>>,
    counters: Vec<Option<u32>>,
    servo: Option<Servo>,
    first_cycle: Option<u64>,
}

impl Probe {
    fn new(faults: Faults, stop: Stop, read: Vec<(u16, u16, u8)>) -> Self {
        Probe {
            faults,
            stop,
            read,
            fault: None,
            cycles: 60,
            gens: Vec::new(),
            prev: Vec::new(),
            prev2: Vec::new(),
            counters: Vec::new(),
            servo: None,
            first_cycle: None,
        }
    }
}

impl Application for Probe {
    fn configure(&mut self, setup: &mut Setup<'_>) -> Result<(), AppError> {
        let mut g = Generation {
            layout: setup.layout().clone(),
            ..Generation::default()
        };
        for &(p, i, s) in &self.read {
            g.sdos.push((p, i, s, upload(setup, p, i, s)));
        }
        if self.gens.is_empty() && self.fault.is_some() {
            // A value no [[device]] entry writes: a power cycle resets it to its default.
            download(setup, 2, 0x6071, 0, &1234i16.to_le_bytes());
        }
        self.servo = setup
            .output_of::<i32>(2, "Target position")
            .ok()
            .map(|target| Servo {
                target,
                velocity: setup
                    .output_of(2, "Target velocity")
                    .expect("Target velocity"),
                mode: setup.output_of(2, "Modes of operation").expect("mode"),
                actual: setup.input_of(2, "Position actual value").expect("actual"),
                status: setup.input_of(2, "Statusword").expect("Statusword"),
            });
        self.prev = setup
            .subdevices()
            .iter()
            .map(|s| vec![0; s.output_bytes as usize])
            .collect();
        self.prev2 = self.prev.clone();
        self.counters = vec![None; self.prev.len()];
        self.first_cycle = None;
        self.gens.push(g);
        Ok(())
    }

    fn cycle(&mut self, cx: &mut Cycle<'_>) {
        let c = cx.status.cycle;
        let first = *self.first_cycle.get_or_insert(c);
        let n = (c - first) as u32;
        let last = self.gens.len() - 1;
        if cx.status.is_good() && n > 0 {
            let g = &mut self.gens[last];
            // Byte for byte: the image is one frame, so the inputs of this exchange echo the
            // outputs of the exchange before (ecsim::pdi), which carried what the application
            // wrote two cycles ago; the counter advances by one per exchange.
            let bad = (0..cx.image.subdevices()).find(|&p| {
                let i = cx.image.inputs_of(p);
                let counter = pdi::check_inputs(i, &self.prev2[p]);
                let mask = match i.len() {
                    0 => 0,
                    1..=3 => (1u32 << (8 * i.len())) - 1,
                    _ => u32::MAX,
                };
                let ok = counter.is_some()
                    && (self.counters[p].is_none()
                        || counter == self.counters[p].map(|c| c.wrapping_add(1) & mask));
                self.counters[p] = counter;
                !ok
            });
            match bad {
                None => g.checked += 1,
                Some(p) => g.bad.push((c, p)),
            }
            if let Some(s) = &self.servo {
                let i = cx.image.inputs_of(2);
                let actual = i32::from_le_bytes([i[2], i[3], i[4], i[5]]);
                let status = u16::from_le_bytes([i[0], i[1]]);
                if cx.get(&s.actual) != actual || cx.get(&s.status) != status {
                    g.named_bad += 1;
                }
            }
        }
        if self.gens.len() == 1
            && let Some((at, f)) = self.fault.clone()
            && at == n
        {
            self.faults.apply(f);
        }
        // Outputs: a pattern through the typed entries, raw bytes elsewhere.
        for p in 0..cx.image.subdevices() {
            for (k, b) in cx.image.outputs_of_mut(p).iter_mut().enumerate() {
                *b = (n as u8).wrapping_mul(7).wrapping_add((p * 31 + k) as u8);
            }
        }
        if let Some(s) = &self.servo {
            cx.set(&s.target, 1_000_000 + n as i32);
            cx.set(&s.velocity, -(n as i32));
            cx.set(&s.mode, 8);
            let o = cx.image.outputs_of(2);
            let target = i32::from_le_bytes([o[2], o[3], o[4], o[5]]);
            let velocity = i32::from_le_bytes([o[6], o[7], o[8], o[9]]);
            if target != 1_000_000 + n as i32 || velocity != -(n as i32) || o[10] != 8 {
                self.gens[last].named_bad += 1;
            }
        }
        std::mem::swap(&mut self.prev, &mut self.prev2);
        for p in 0..cx.image.subdevices() {
            self.prev[p].copy_from_slice(cx.image.outputs_of(p));
        }
        let want = if self.fault.is_some() { 2 } else { 1 };
        if self.gens.len() == want && u64::from(n) >= self.cycles {
            self.stop.request();
        }
    }
}

fn run(
    cfg: Config,
    probe: &mut Probe,
    faults: Faults,
) -> rtcat_master::Result<rtcat_master::Outcome> {
    run_on(segment(), cfg, probe, faults)
}

fn run_on(
    seg: SegmentSpec,
    cfg: Config,
    probe: &mut Probe,
    faults: Faults,
) -> rtcat_master::Result<rtcat_master::Outcome> {
    let mut spec = RunSpec::new(cfg, Target::Sim { spec: seg, faults }, probe.stop.clone());
    spec.no_rt = true;
    spec.duration = Some(Duration::from_secs(60));
    rtcat_master::run_simple(spec, probe)
}

/// (index, subindex, bits, name, bit offset) of a subdevice's PDO `pdo`.
fn entries(l: &Layout, position: u16, pdo: u16) -> Vec<(u16, u8, u8, String, u32)> {
    let s = &l.subdevices[usize::from(position)];
    let p = l.pdos[s.pdos.clone()]
        .iter()
        .find(|p| p.index == pdo)
        .unwrap_or_else(|| panic!("position {position} has no PDO {pdo:#06x}"));
    l.entries[p.entries.clone()]
        .iter()
        .map(|e| (e.index, e.subindex, e.bits, e.name.clone(), e.bit_offset))
        .collect()
}

fn pdo_list(l: &Layout, position: u16) -> Vec<u16> {
    let s = &l.subdevices[usize::from(position)];
    l.pdos[s.pdos.clone()].iter().map(|p| p.index).collect()
}

#[test]
fn default_and_configured_layouts_of_the_coe_example() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // The devices' default mapping.
    let faults = Faults::new();
    let mut probe = Probe::new(faults.clone(), Stop::new(), Vec::new());
    let out = run(unconfigured(), &mut probe, faults).expect("default run");
    assert!(out.fatal.is_none(), "{:?}", out.fatal);
    let g = &probe.gens[0];
    let l = &g.layout;
    assert_eq!(
        pdo_list(l, 1),
        [0x1a00, 0x1a01],
        "AI4 default: channels 1 and 2"
    );
    // Inputs first, then outputs (the layout's order within a subdevice).
    assert_eq!(pdo_list(l, 2), [0x1a00, 0x1600]);
    assert_eq!(entries(l, 2, 0x1600).len(), 1);
    assert_eq!(entries(l, 2, 0x1600)[0].0, 0x6040);
    assert_eq!(entries(l, 2, 0x1a00)[0].0, 0x6041);
    assert_eq!((l.input_bytes, l.output_bytes), (1 + 8 + 2, 1 + 2));
    assert_eq!(out.expected_wkc, 7);
    assert!(
        probe.servo.is_none(),
        "no Target position in the default mapping"
    );
    assert!(g.bad.is_empty(), "{:?}", g.bad);
    assert!(g.checked >= 50, "{} cycles checked", g.checked);

    // The configured mapping of examples/coe/rtcat.toml.
    let faults = Faults::new();
    let mut probe = Probe::new(faults.clone(), Stop::new(), Vec::new());
    let out = run(configured(), &mut probe, faults).expect("configured run");
    assert!(out.fatal.is_none(), "{:?}", out.fatal);
    let g = &probe.gens[0];
    let l = &g.layout;
    assert_eq!(pdo_list(l, 1), [0x1a00, 0x1a01, 0x1a02, 0x1a03]);
    assert_eq!(l.subdevices[1].input_bytes, 16);
    // Inputs: DIO8 (1 byte), AI4 (16 bytes), then the servo from byte 17 (bit 136).
    assert_eq!(
        entries(l, 2, 0x1a00),
        [
            (0x6041, 0, 16, "Statusword".to_string(), 136),
            (0x6064, 0, 32, "Position actual value".to_string(), 152),
            (0x606c, 0, 32, "Velocity actual value".to_string(), 184),
            (0x6061, 0, 8, "Modes of operation display".to_string(), 216),
        ]
    );
    // Outputs: DIO8 (1 byte), the AI4 has none, the servo from byte 1 (bit 8).
    assert_eq!(
        entries(l, 2, 0x1600),
        [
            (0x6040, 0, 16, "Controlword".to_string(), 8),
            (0x607a, 0, 32, "Target position".to_string(), 24),
            (0x60ff, 0, 32, "Target velocity".to_string(), 56),
            (0x6060, 0, 8, "Modes of operation".to_string(), 88),
        ]
    );
    assert_eq!((l.input_bytes, l.output_bytes), (1 + 16 + 11, 1 + 11));
    assert_eq!(out.expected_wkc, 7);
    assert_eq!(out.pdi_bytes, 28 + 12);
    assert!(probe.servo.is_some());
    assert!(g.bad.is_empty(), "{:?}", g.bad);
    assert!(g.checked >= 50, "{} cycles checked", g.checked);
    assert_eq!(g.named_bad, 0, "typed entries at the wrong offsets");
}

#[test]
fn startup_sdos_are_in_the_dictionary_and_a_power_cycle_reapplies_everything() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let faults = Faults::new();
    // 0x6060 is also written (8) but mapped into the RxPDO: the simulator's upload of a mapped
    // output object reads the output image, which is all zero before the first cycle.
    let read = vec![
        (2, 0x6085, 0),
        (2, 0x6071, 0),
        (2, 0x1600, 0),
        (2, 0x1600, 2),
        (2, 0x1c13, 0),
        (1, 0x8000, 0x06),
        (1, 0x8010, 0x06),
        (1, 0x1c13, 0),
        (1, 0x1c13, 4),
    ];
    let mut probe = Probe::new(faults.clone(), Stop::new(), read);
    probe.fault = Some((30, FaultCommand::PowerCycle));
    // The whole segment's recovery (the per-subdevice one re-applies the same configuration:
    // tests/subdevice_recovery.rs).
    let mut cfg = configured();
    cfg.health.recovery = rtcat_master::config::RecoveryPolicy::Segment;
    let out = run(cfg, &mut probe, faults).expect("run");
    assert!(out.fatal.is_none(), "{:?}", out.fatal);
    assert_eq!(out.rec.recoveries, 1, "one recovery after the power cycle");
    assert_eq!(
        probe.gens.len(),
        2,
        "configure at the bring-up and at the recovery"
    );
    let want = |torque: i16| {
        vec![
            (2, 0x6085, 0, 50_000u32.to_le_bytes().to_vec()),
            (2, 0x6071, 0, torque.to_le_bytes().to_vec()),
            (2, 0x1600, 0, vec![4]),
            (2, 0x1600, 2, 0x607a_0020u32.to_le_bytes().to_vec()),
            (2, 0x1c13, 0, vec![1]),
            (1, 0x8000, 0x06, vec![1]),
            (1, 0x8010, 0x06, vec![0]),
            (1, 0x1c13, 0, vec![4]),
            (1, 0x1c13, 4, 0x1a03u16.to_le_bytes().to_vec()),
        ]
    };
    // First bring-up: 0x6071 still at its default (the test writes it after reading).
    assert_eq!(probe.gens[0].sdos, want(0));
    // After the power cycle: the test's 0x6071 = 1234 is gone (the dictionary was reset), and
    // everything the configuration writes is back.
    assert_eq!(probe.gens[1].sdos, want(0));
    assert_eq!(probe.gens[0].layout.entries, probe.gens[1].layout.entries);
    for g in &probe.gens {
        assert!(g.bad.is_empty(), "{:?}", g.bad);
        assert_eq!(g.named_bad, 0);
    }
    assert!(probe.gens[1].checked >= 50, "{}", probe.gens[1].checked);
}

/// A startup write the device takes long to answer (the simulator's `slow_object`: the servo
/// answers a write of 0x6085 after 1.5 s) fails the bring-up on the mailbox's 1 s, naming the
/// write and the time waited; with `timeout_ms` on that SDO the bring-up waits for it, and the
/// value is in the device's dictionary.
#[test]
fn a_slow_startup_write_is_waited_for_as_long_as_its_timeout_ms_says() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut seg = segment();
    seg.devices[2].timing.slow_object = Some(0x6085);
    seg.devices[2].timing.slow_object_ns = 1_500_000_000;

    let faults = Faults::new();
    let mut probe = Probe::new(faults.clone(), Stop::new(), Vec::new());
    let e = match run_on(seg.clone(), configured(), &mut probe, faults) {
        Ok(_) => panic!("the bring-up succeeded without timeout_ms"),
        Err(e) => e,
    };
    let m = e.to_string();
    for w in [
        "subdevice at position 2 (SERVO-COE, device[1])",
        "write 0x6085:00 = 50000 (u32)",
        "no answer within 1000 ms",
    ] {
        assert!(m.contains(w), "{m}\nwanted {w}");
    }

    let text = CONFIG.replace(
        "value = 50000\ntransition = \"PS\"",
        "value = 50000\ntransition = \"PS\"\ntimeout_ms = 3000",
    );
    assert_ne!(text, CONFIG, "the replacement must change the file");
    let cfg = Config::parse(&text, "slow.toml").expect("timeout_ms parses");
    let faults = Faults::new();
    let mut probe = Probe::new(faults.clone(), Stop::new(), vec![(2, 0x6085, 0)]);
    let out = run_on(seg, cfg, &mut probe, faults).expect("run with timeout_ms");
    assert!(out.fatal.is_none(), "{:?}", out.fatal);
    assert_eq!(
        probe.gens[0].sdos,
        vec![(2, 0x6085, 0, 50_000u32.to_le_bytes().to_vec())]
    );
    assert!(probe.gens[0].checked >= 50, "{}", probe.gens[0].checked);
}

/// The expected working counter follows the configured mapping: an AI4 assigned no PDO has no
/// inputs and no share of the LRW's working counter (ETG.1000.4 §5.4.3.3: +1 per subdevice read).
#[test]
fn the_expected_wkc_follows_the_configured_mapping() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut cfg = configured();
    cfg.segment.expected_wkc = None;
    let ai4 = &mut cfg.device[0];
    ai4.pdo_assign.as_mut().expect("AI4 assignment").sm3 = Some(Vec::new());
    ai4.input_bytes = Some(0);
    ai4.sdo.clear();
    cfg.validate("test").expect("valid");
    let faults = Faults::new();
    let mut probe = Probe::new(faults.clone(), Stop::new(), Vec::new());
    let out = run(cfg, &mut probe, faults).expect("run");
    assert!(out.fatal.is_none(), "{:?}", out.fatal);
    assert_eq!(out.expected_wkc, 3 + 3, "DIO8 and SERVO only");
    assert_eq!(probe.gens[0].layout.subdevices[1].input_bytes, 0);
    assert!(probe.gens[0].bad.is_empty(), "{:?}", probe.gens[0].bad);
}

/// One identity entry configures every subdevice with that identity.
#[test]
fn an_identity_entry_configures_every_matching_subdevice() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut seg = segment();
    let again = seg.devices.clone();
    seg.devices.extend(again);
    for (i, d) in seg.devices.iter_mut().enumerate() {
        d.serial = 100 + i as u32;
    }
    let mut cfg = configured();
    cfg.segment = Default::default();
    let servo = &mut cfg.device[1];
    servo.position = None;
    servo.vendor_id = Some(0x0000_0766);
    servo.product_id = Some(0x0003_0003);
    cfg.validate("test").expect("valid");
    let faults = Faults::new();
    let mut probe = Probe::new(faults.clone(), Stop::new(), Vec::new());
    let out = run_on(seg, cfg, &mut probe, faults).expect("run");
    assert!(out.fatal.is_none(), "{:?}", out.fatal);
    let l = &probe.gens[0].layout;
    for p in [1, 4] {
        assert_eq!(
            pdo_list(l, p),
            [0x1a00, 0x1a01, 0x1a02, 0x1a03],
            "AI4 at {p}"
        );
    }
    for p in [2, 5] {
        assert_eq!(l.subdevices[usize::from(p)].input_bytes, 11, "servo at {p}");
        assert_eq!(entries(l, p, 0x1600)[1].3, "Target position");
    }
    assert_eq!(out.expected_wkc, 14);
    assert!(probe.gens[0].bad.is_empty(), "{:?}", probe.gens[0].bad);
    assert!(probe.gens[0].checked >= 50);
}

/// The control of the test above: the test's own write of 0x6071 survives a recovery that is
/// not a power cycle (lost frames), so the reset seen there is the power cycle's.
#[test]
fn a_recovery_without_power_cycle_keeps_the_dictionary() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let faults = Faults::new();
    let mut probe = Probe::new(
        faults.clone(),
        Stop::new(),
        vec![(2, 0x6071, 0), (2, 0x6060, 0)],
    );
    probe.fault = Some((30, FaultCommand::DropNext(15)));
    let out = run(configured(), &mut probe, faults).expect("run");
    assert!(out.fatal.is_none(), "{:?}", out.fatal);
    assert!(out.rec.recoveries >= 1, "the lost frames caused a recovery");
    let last = probe.gens.last().expect("a bring-up");
    assert_eq!(
        last.sdos,
        [
            (2, 0x6071, 0, 1234i16.to_le_bytes().to_vec()),
            (2, 0x6060, 0, vec![8])
        ]
    );
}

#[test]
fn refused_configurations_fail_the_bring_up_naming_device_object_and_abort() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    for (what, text, want) in [
        (
            "an unknown object",
            CONFIG.replace(
                "[[device.sdo]]\nindex = 0x6085",
                "[[device.sdo]]\nindex = 0x2000\nsub = 0\ntype = \"u16\"\nvalue = 5\n\n\
                 [[device.sdo]]\nindex = 0x6085",
            ),
            vec![
                "subdevice at position 2 (SERVO-COE, device[1])",
                "write 0x2000:00 = 5 (u16)",
                "0x06020000",
                "does not exist in the object directory",
            ],
        ),
        (
            "an object that cannot be mapped",
            CONFIG.replace("\"0x6060:00:8\"", "\"0x6077:00:8\""),
            vec![
                "subdevice at position 2 (SERVO-COE, device[1])",
                "write 0x1600:04 = 0x60770008 (0x6077:00:8)",
                "0x0604",
            ],
        ),
        (
            "more entries than the PDO takes",
            CONFIG.replace(
                "  { entry = \"0x6060:00:8\", name = \"Modes of operation\" },\n]",
                "  { entry = \"0x6060:00:8\", name = \"Modes of operation\" },\n  \"0:0:8\",\n  \
                 \"0:0:8\",\n  \"0:0:8\",\n  \"0:0:8\",\n  \"0:0:8\",\n]",
            )
            .replace("output_bytes = 11", "output_bytes = 16"),
            vec!["subdevice at position 2 (SERVO-COE, device[1])", "0x1600:09"],
        ),
        (
            "a value the device refuses",
            CONFIG.replace(
                "[[device.sdo]]\nindex = 0x8000",
                "[[device.sdo]]\nindex = 0x8000\nsub = 0x15\ntype = \"u16\"\nvalue = 8\n\n\
                 [[device.sdo]]\nindex = 0x8000",
            ),
            vec![
                "subdevice at position 1 (AI4-COE, device[0])",
                "write 0x8000:15 = 8 (u16)",
                "0x06090030",
            ],
        ),
        (
            "a read-only assignment",
            CONFIG.replace(
                "# AI4-COE:",
                "[[device]]\nposition = 0\npdo_assign = { sm3 = [0x1A00] }\n\n# AI4-COE:",
            ),
            vec!["subdevice at position 0 (DIO8-COE, device[0])", "write 0x1c13:00 = 0 (u8)"],
        ),
    ] {
        assert_ne!(text, CONFIG, "{what}: the replacement must change the file");
        let cfg = Config::parse(&text, "bad.toml").unwrap_or_else(|e| panic!("{what}: {e}"));
        let faults = Faults::new();
        let mut probe = Probe::new(faults.clone(), Stop::new(), Vec::new());
        let e = match run(cfg, &mut probe, faults) {
            Ok(_) => panic!("{what}: the bring-up succeeded"),
            Err(e) => e,
        };
        assert!(matches!(e, Error::Device(_)), "{what}: {e:?}");
        assert!(!e.is_usage(), "{what}: a runtime failure (exit 1)");
        let m = e.to_string();
        for w in want {
            assert!(m.contains(w), "{what}: {m}\nwanted {w}");
        }
        assert!(probe.gens.is_empty(), "{what}: configure must not run");
    }
}
