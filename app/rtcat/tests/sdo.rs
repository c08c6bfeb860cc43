//! `rtcat sdo read|write|list` and `rtcat config from-bus` against the CoE example segment
//! (`examples/coe/segment.toml`): the commands as a user runs them with `--sim` (values, tables,
//! JSON, exit codes, messages naming the value), the library API where a write must be seen by
//! a read (the in-process simulator lives as long as one process), and over a veth pair against
//! `rtcat sim` (root only), where a write is seen by a later command.

use ecsim::netns::{VethPair, root_or_skip};
use ecsim::{Faults, SegmentSpec};
use rtcat_master::coe::segment::{self, PreOp};
use rtcat_master::coe::{SdoType, Timeouts};
use rtcat_master::config::Config;
use rtcat_master::{Session, Target};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

#[path = "support/slow_drive.rs"]
mod slow_drive;

const BIN: &str = env!("CARGO_BIN_EXE_rtcat");

fn coe_segment() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/coe/segment.toml")
}

/// A string longer than a 128-byte mailbox holds (the simulator allows 255): its upload is
/// segmented. (Device names, 0x1008, are at most 64 characters in the simulator: one mailbox.)
fn long_text() -> String {
    "a text long enough that it does not fit one mailbox of 128 bytes; ".repeat(3)
}

/// The example segment with a writable string object 0x2000 holding [`long_text`] appended to
/// the drive (the last device of the file).
fn long_segment(dir: &Path) -> PathBuf {
    let mut s = std::fs::read_to_string(coe_segment()).unwrap();
    s.push_str(&format!(
        "\n[[device.object]]\nindex = 0x2000\nname = \"Text\"\ntype = \"VISIBLE_STRING\"\n\
         access = \"rw\"\ndefault = {:?}\n",
        long_text()
    ));
    let p = dir.join("segment.toml");
    std::fs::write(&p, s).unwrap();
    p
}

fn run(mut c: Command) -> Output {
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("{c:?} did not return within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// A configuration with a PDU timeout of 1 s during initialisation (default 100 ms): the tests
/// run side by side on a shared machine, and a slow answer is not what they check.
fn patient() -> &'static Path {
    static P: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        let p = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sdo-patient.toml");
        std::fs::write(&p, "[bus]\ninit_pdu_timeout_ms = 1000\n").unwrap();
        p
    })
}

/// `rtcat ARGS --config patient` (the command's bus arguments come after it).
fn rtcat(args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args).arg("--config").arg(patient());
    c
}

fn sim(args: &[&str]) -> Output {
    let mut c = rtcat(args);
    c.arg("--sim").arg("--segment").arg(coe_segment());
    run(c)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn ok(o: &Output) -> String {
    assert!(o.status.success(), "{:?}: {}", o.status, stderr(o));
    stdout(o)
}

fn fails(o: &Output, code: i32, text: &str) {
    assert_eq!(o.status.code(), Some(code), "{}{}", stdout(o), stderr(o));
    assert!(
        stderr(o).contains(text),
        "{:?} not in {:?}",
        text,
        stderr(o)
    );
}

// ---------------------------------------------------------------- the commands, --sim

#[test]
fn read_identity_and_a_segmented_string() {
    let dir = tempfile::tempdir().unwrap();
    let seg = long_segment(dir.path());
    let mut c = rtcat(&["sdo", "read", "2", "0x2000:00", "--type", "string", "--sim"]);
    c.arg("--segment").arg(&seg);
    assert_eq!(ok(&run(c)), format!("{}\n", long_text()));
    assert_eq!(
        ok(&sim(&["sdo", "read", "2", "0x1008:00", "--type", "string"])),
        "SERVO-COE\n"
    );

    assert_eq!(
        ok(&sim(&["sdo", "read", "2", "0x1018:02", "--type", "u32"])),
        "0x00030003\n"
    );
    // Without --type: the bytes, and the value as SDO information describes it.
    assert_eq!(
        ok(&sim(&["sdo", "read", "2", "1018:2"])),
        "03 00 03 00  = 0x00030003 (u32, \"Product code\")\n"
    );
    assert_eq!(
        ok(&sim(&["sdo", "read", "0", "0x1000:00", "--type", "u32"])),
        "0x00001389\n"
    );
    assert_eq!(
        ok(&sim(&["sdo", "read", "2", "0x6502:00", "--type", "u32"])),
        "0x00000380\n"
    );
    let v: serde_json::Value =
        serde_json::from_str(&ok(&sim(&["sdo", "read", "2", "0x1008:00", "--json"]))).unwrap();
    assert_eq!(v["value"], "SERVO-COE");
    assert_eq!(v["type"], "string");
    assert_eq!(v["hex"], "53 45 52 56 4f 2d 43 4f 45");
    // Complete access: the identity record, subindex 0 (u8) then four u32.
    let v: serde_json::Value = serde_json::from_str(&ok(&sim(&[
        "sdo",
        "read",
        "2",
        "0x1018:00",
        "--complete",
        "--json",
    ])))
    .unwrap();
    let hex = v["hex"].as_str().unwrap();
    assert!(hex.starts_with("04 "), "{hex}");
    assert!(
        hex.contains("66 07 00 00 03 00 03 00 01 00 00 00 03 00 00 00"),
        "{hex}"
    );
}

#[test]
fn write_prints_what_it_wrote_and_says_the_simulator_forgets() {
    let o = sim(&["sdo", "write", "2", "0x6085:00", "u32", "50000"]);
    assert_eq!(ok(&o), "position 2: 0x6085:00 <- 0x0000c350 (u32)\n");
    assert!(stderr(&o).contains("note: --sim"), "{}", stderr(&o));
    let o = sim(&["sdo", "write", "2", "0x6060:00", "i8", "-3", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&ok(&o)).unwrap();
    assert_eq!(
        (v["type"].as_str(), v["hex"].as_str()),
        (Some("i8"), Some("fd"))
    );
}

/// A write the device answers late (the drive's 0x6085 after 3 s: firmware that acts on the
/// value first): the default second fails naming the time (1 s, and 1 s more for the
/// transport's repeat of a first request), `--timeout-ms 5000` writes it, a timeout out of
/// range is the user's input.
#[test]
fn a_slow_write_waits_as_long_as_timeout_ms_says() {
    let d = tempfile::tempdir().unwrap();
    let seg = slow_drive::segment(d.path(), 3_000_000);
    let write = |extra: &[&str]| {
        let mut c = rtcat(&["sdo", "write", "2", "0x6085:00", "u32", "50000"]);
        c.args(extra).arg("--sim").arg("--segment").arg(&seg);
        run(c)
    };
    fails(&write(&[]), 1, "no answer within 1000 ms");
    let o = write(&["--timeout-ms", "5000"]);
    assert_eq!(ok(&o), "position 2: 0x6085:00 <- 0x0000c350 (u32)\n");
    for bad in ["0", "120001"] {
        fails(
            &write(&["--timeout-ms", bad]),
            2,
            &format!("--timeout-ms {bad}: must be 1..=120000 ms"),
        );
    }
}

#[test]
fn list_shows_objects_and_entries() {
    let t = ok(&sim(&["sdo", "list", "2"]));
    assert!(t.lines().next().unwrap().starts_with("INDEX"), "{t}");
    let line = |t: &str, p: &str| {
        t.lines()
            .find(|l| l.starts_with(p))
            .unwrap_or_else(|| panic!("no {p} in {t}"))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(line(&t, "0x6040"), "0x6040 VAR u16 0 Controlword");
    // A record's type is the device's type index; the rest is fixed.
    let id = line(&t, "0x1018");
    assert!(
        id.starts_with("0x1018 RECORD ") && id.ends_with(" 4 Identity"),
        "{id}"
    );
    assert_eq!(line(&t, "0x1c12"), "0x1c12 ARRAY u16 2 RxPDO assign");
    let t = ok(&sim(&["sdo", "list", "2", "--entries"]));
    assert_eq!(line(&t, "    :02"), ":02 ro 32 bits u32 - Product code");
    let v: serde_json::Value =
        serde_json::from_str(&ok(&sim(&["sdo", "list", "2", "--entries", "--json"]))).unwrap();
    let cw = v
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["index"] == 0x6040)
        .unwrap();
    assert_eq!(cw["name"], "Controlword");
    assert_eq!(cw["entries"][0]["bits"], 16);
}

#[test]
fn aborts_exit_1_with_the_code_and_text() {
    fails(
        &sim(&["sdo", "read", "2", "0x7777:00"]),
        1,
        "position 2: SDO 0x7777:00: abort 0x06020000: The object does not exist in the object \
         directory",
    );
    fails(
        &sim(&["sdo", "read", "2", "0x1018:09"]),
        1,
        "abort 0x06090011: Subindex does not exist",
    );
    fails(
        &sim(&["sdo", "write", "2", "0x6041:00", "u16", "1"]),
        1,
        "abort 0x06010002: Attempt to write a read only object",
    );
    fails(
        &sim(&["sdo", "write", "1", "0x8000:15", "u16", "8"]),
        1,
        "abort 0x06090030: Value range of parameter exceeded",
    );
    fails(
        &sim(&["sdo", "write", "2", "0x6085:00", "u16", "1"]),
        1,
        "abort 0x0607",
    );
}

#[test]
fn bad_input_exits_2_naming_the_value() {
    fails(
        &sim(&["sdo", "read", "3", "0x1008:00"]),
        2,
        "position 3: the segment has 3 subdevices (positions 0..=2)",
    );
    fails(
        &sim(&["sdo", "read", "2", "0x1008"]),
        2,
        "INDEX:SUB \"0x1008\"",
    );
    fails(&sim(&["sdo", "read", "2", "zz:1"]), 2, "INDEX:SUB \"zz:1\"");
    fails(
        &sim(&["sdo", "read", "2", "0x1008:00", "--type", "u24"]),
        2,
        "unknown type \"u24\"",
    );
    fails(
        &sim(&["sdo", "read", "2", "0x1018:02", "--type", "u16"]),
        2,
        "--type u16: 4 bytes read, a u16 has 2 (03 00 03 00)",
    );
    fails(
        &sim(&["sdo", "write", "2", "0x6060:00", "i8", "200"]),
        2,
        "value \"200\" is not a i8: out of range -128..=127",
    );
    fails(
        &sim(&["sdo", "write", "2", "0x6060:00", "bool", "yes"]),
        2,
        "value \"yes\" is not a bool",
    );
    fails(
        &sim(&["sdo", "write", "2", "0x2000:00", "string", ""]),
        2,
        "VALUE is empty",
    );
    fails(
        &sim(&["sdo", "write", "2", "0x1c12:05", "u16", "1", "--complete"]),
        2,
        "complete access starts at subindex 0 or 1",
    );
    // The reference segment has no CoE: a runtime failure that says so.
    let c = rtcat(&["sdo", "read", "0", "0x1000:00", "--sim"]);
    let o = run(c);
    fails(&o, 1, "position 0: no CoE mailbox");
}

// ---------------------------------------------------------------- config from-bus

fn devices(t: &str) -> Vec<toml::Value> {
    let v: toml::Value = toml::from_str(t).unwrap_or_else(|e| panic!("{e}\n{t}"));
    v.get("device")
        .and_then(|d| d.as_array())
        .cloned()
        .unwrap_or_default()
}

fn pdo_map(d: &toml::Value, index: i64) -> Vec<(String, Option<String>)> {
    d["pdo_map"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["index"].as_integer() == Some(index))
        .unwrap_or_else(|| panic!("no pdo_map {index:#x}"))["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| match e {
            toml::Value::String(s) => (s.clone(), None),
            t => (
                t["entry"].as_str().unwrap().to_string(),
                t.get("name").and_then(|n| n.as_str()).map(String::from),
            ),
        })
        .collect()
}

#[test]
fn from_bus_prints_the_default_mapping_as_device_sections() {
    let t = ok(&sim(&["config", "from-bus"]));
    let d = devices(&t);
    assert_eq!(d.len(), 3, "{t}");
    // Only the keys of the [[device]] schema (it refuses unknown keys).
    let keys = |v: &toml::Value, allowed: &[&str]| {
        for k in v.as_table().unwrap().keys() {
            assert!(allowed.contains(&k.as_str()), "key {k} in {v}");
        }
    };
    for dev in &d {
        keys(
            dev,
            &[
                "position",
                "name",
                "input_bytes",
                "output_bytes",
                "pdo_assign",
                "pdo_map",
            ],
        );
        if let Some(a) = dev.get("pdo_assign") {
            keys(a, &["sm2", "sm3"]);
        }
        for m in dev
            .get("pdo_map")
            .and_then(|m| m.as_array())
            .into_iter()
            .flatten()
        {
            keys(m, &["index", "entries"]);
            for e in m["entries"].as_array().unwrap() {
                if e.is_table() {
                    keys(e, &["entry", "name"]);
                }
            }
        }
    }
    let int = |v: &toml::Value, k: &str| v[k].as_integer().unwrap();
    for (i, (name, inb, outb)) in [("DIO8-COE", 1, 1), ("AI4-COE", 8, 0), ("SERVO-COE", 2, 2)]
        .into_iter()
        .enumerate()
    {
        assert_eq!(int(&d[i], "position"), i as i64);
        assert_eq!(d[i]["name"].as_str(), Some(name));
        assert_eq!(
            (int(&d[i], "input_bytes"), int(&d[i], "output_bytes")),
            (inb, outb)
        );
    }
    // The identity is in a comment; the DIO8's fixed assignment and mapping are comments.
    assert!(t.contains("# Position 2: SERVO-COE: vendor_id = 0x00000766, product_id = 0x00030003"));
    assert!(
        d[0].get("pdo_assign").is_none() && d[0].get("pdo_map").is_none(),
        "{t}"
    );
    assert!(t.contains("# index = 0x1600"), "{t}");
    // AI4: the assignment is writable, the mappings fixed.
    let a = d[1]["pdo_assign"]["sm3"].as_array().unwrap();
    assert_eq!(
        a,
        &[toml::Value::Integer(0x1a00), toml::Value::Integer(0x1a01)]
    );
    assert!(d[1].get("pdo_map").is_none());
    // The drive: controlword / statusword.
    assert_eq!(d[2]["pdo_assign"]["sm2"][0].as_integer(), Some(0x1600));
    assert_eq!(d[2]["pdo_assign"]["sm3"][0].as_integer(), Some(0x1a00));
    assert_eq!(
        pdo_map(&d[2], 0x1600),
        [("0x6040:00:16".to_string(), Some("Controlword".to_string()))]
    );
    assert_eq!(
        pdo_map(&d[2], 0x1a00),
        [("0x6041:00:16".to_string(), Some("Statusword".to_string()))]
    );
    // AI4's padding keeps its place (commented PDO, as plain text).
    assert!(t.contains("#   \"0x0000:00:14\",  # padding"), "{t}");

    let j: serde_json::Value =
        serde_json::from_str(&ok(&sim(&["config", "from-bus", "--json"]))).unwrap();
    assert_eq!(j[2]["pdos"][0]["entries"][0]["name"], "Controlword");
}

#[test]
fn from_bus_of_a_segment_without_coe_is_comments() {
    let c = rtcat(&["config", "from-bus", "--sim"]);
    let t = ok(&run(c));
    assert!(devices(&t).is_empty(), "{t}");
    assert_eq!(
        t.matches("# No CoE: its process data is fixed by its SII")
            .count(),
        3
    );
    assert!(t.contains("# position = 2"), "{t}");
}

// ---------------------------------------------------------------- the library, in-process

fn session(spec: SegmentSpec) -> Session {
    // As patient as the commands above.
    let mut cfg = Config::default();
    cfg.bus.init_pdu_timeout_ms = 1000;
    Session::open(
        &Target::Sim {
            spec,
            faults: Faults::new(),
        },
        &cfg,
    )
    .unwrap()
}

fn on_coe<R: Send>(
    spec: SegmentSpec,
    f: impl FnOnce(&PreOp<'_>) -> rtcat_master::diag::Result<R> + Send,
) -> R {
    let s = session(spec);
    segment::with_pre_op(s.maindevice(), Timeouts::default(), f).unwrap()
}

#[test]
fn write_then_read_in_one_process() {
    let dir = tempfile::tempdir().unwrap();
    let spec = SegmentSpec::load(&long_segment(dir.path())).unwrap();
    let text = "a string of 300 bytes: ".repeat(13);
    let text = &text[..255];
    let (qs, mode, back, before) = on_coe(spec, |seg| {
        let before = seg.client(2)?.upload(0x2000, 0)?;
        let mut c = seg.client(2)?;
        c.download(0x6085, 0, &SdoType::U32.encode("50000").unwrap())?;
        c.download(0x6060, 0, &SdoType::I8.encode("8").unwrap())?;
        // 255 bytes: a normal initiate and segments (the mailbox holds 128).
        c.download(0x2000, 0, text.as_bytes())?;
        Ok((
            c.upload(0x6085, 0)?,
            c.upload(0x6060, 0)?,
            c.upload(0x2000, 0)?,
            before,
        ))
    });
    assert_eq!(SdoType::U32.format(&qs).unwrap(), "0x0000c350");
    assert_eq!(SdoType::I8.format(&mode).unwrap(), "8");
    assert_eq!(back, text.as_bytes());
    assert_eq!(String::from_utf8(before).unwrap(), long_text());
}

/// The mappings of the CoE example after writing, by hand, what `examples/coe/rtcat.toml` asks.
fn configured_mappings() -> Vec<segment::DeviceMapping> {
    let spec = SegmentSpec::load(&coe_segment()).unwrap();
    on_coe(spec, |seg| {
        let mut c = seg.client(2)?;
        // The contract's drive mapping: clear :00, entries, :00 = n; then the assignment.
        let rx = [0x6040_0010u32, 0x607a_0020, 0x60ff_0020, 0x6060_0008];
        let tx = [0x6041_0010u32, 0x6064_0020, 0x606c_0020, 0x6061_0008];
        for (pdo, entries) in [(0x1600u16, rx), (0x1a00, tx)] {
            c.download(pdo, 0, &[0])?;
            for (i, e) in entries.iter().enumerate() {
                c.download(pdo, i as u8 + 1, &e.to_le_bytes())?;
            }
            c.download(pdo, 0, &[entries.len() as u8])?;
        }
        let mut ai = seg.client(1)?;
        ai.download(0x1c13, 0, &[0])?;
        for (i, p) in [0x1a00u16, 0x1a01, 0x1a02, 0x1a03].iter().enumerate() {
            ai.download(0x1c13, i as u8 + 1, &p.to_le_bytes())?;
        }
        ai.download(0x1c13, 0, &[4])?;
        segment::read_mappings(seg)
    })
}

#[test]
fn a_written_mapping_is_what_from_bus_reads() {
    let maps = configured_mappings();
    let servo = &maps[2];
    assert_eq!((servo.input_bytes, servo.output_bytes), (11, 11));
    let names: Vec<_> = servo.pdos[0]
        .entries
        .iter()
        .map(|e| e.name.clone().unwrap_or_default())
        .collect();
    assert_eq!(
        names,
        [
            "Controlword",
            "Target position",
            "Target velocity",
            "Modes of operation"
        ]
    );
    assert_eq!(maps[1].input_bytes, 16);
    let sm3 = maps[1].assignments.iter().find(|a| a.sm == 3).unwrap();
    assert_eq!(sm3.pdos, [0x1a00, 0x1a01, 0x1a02, 0x1a03]);
    // And the text the command prints for it says the same.
    let t = rtcat::cmd::config::from_bus_toml(&maps, "a test");
    let d = devices(&t);
    assert_eq!(d[2]["output_bytes"].as_integer(), Some(11));
    assert_eq!(
        pdo_map(&d[2], 0x1a00)
            .into_iter()
            .map(|e| e.0)
            .collect::<Vec<_>>(),
        [
            "0x6041:00:16",
            "0x6064:00:32",
            "0x606C:00:32",
            "0x6061:00:8"
        ]
    );
}

/// Every entry of the layout a run with `cfg` brings up on the CoE example: subdevice, direction,
/// object, bit offset and width (names left out: from-bus takes the device's, the example file
/// its own), with the sizes of each subdevice.
fn layout_of(cfg: Config) -> (Vec<(u16, u32, u32)>, Vec<String>) {
    struct Capture(Option<rtcat_master::Layout>);
    impl rtcat_master::Application for Capture {
        fn configure(
            &mut self,
            setup: &mut rtcat_master::Setup<'_>,
        ) -> Result<(), rtcat_master::AppError> {
            self.0 = Some(setup.layout().clone());
            Ok(())
        }
        fn cycle(&mut self, _cx: &mut rtcat_master::Cycle<'_>) {}
    }
    let mut spec = rtcat_master::RunSpec::new(
        cfg,
        Target::Sim {
            spec: SegmentSpec::load(&coe_segment()).unwrap(),
            faults: Faults::new(),
        },
        rtcat_master::Stop::new(),
    );
    spec.no_rt = true;
    spec.duration = Some(std::time::Duration::from_millis(200));
    let mut app = Capture(None);
    rtcat_master::run_simple(spec, &mut app).expect("run");
    let l = app.0.expect("configured");
    let sizes = l
        .subdevices
        .iter()
        .map(|s| (s.position, s.input_bytes, s.output_bytes))
        .collect();
    let entries = l
        .entries
        .iter()
        .map(|e| {
            format!(
                "{} {:?} {:#06x}:{:02x} @{} {}",
                e.position, e.direction, e.index, e.subindex, e.bit_offset, e.bits
            )
        })
        .collect();
    (sizes, entries)
}

#[test]
fn from_bus_output_fed_back_gives_the_same_layout() {
    // What from-bus prints for the configured segment is a valid configuration...
    let text = rtcat::cmd::config::from_bus_toml(&configured_mappings(), "a test");
    let generated =
        Config::parse(&text, "from-bus output").unwrap_or_else(|e| panic!("{e}\n{text}"));
    // ...that, applied to a segment in its default state, gives the layout the example
    // configuration gives.
    let example = Config::load(&coe_segment().with_file_name("rtcat.toml")).unwrap();
    let want = layout_of(example);
    let got = layout_of(generated);
    assert_eq!(got, want);
    // And not the default one (the comparison would be empty otherwise).
    assert_ne!(got, layout_of(Config::default()));
}

/// Issue 27: `rtcat pdos --config FILE` shows the layout `run` brings up with that file (its
/// `[[device]]` mapping applied in PRE-OP), not the segment's default mapping.
#[test]
fn pdos_with_a_config_shows_the_configured_layout() {
    let example = coe_segment().with_file_name("rtcat.toml");
    let pdos = |config: &Path| -> rtcat_master::Layout {
        let mut c = Command::new(BIN);
        c.args(["pdos", "--json", "--sim", "--segment"])
            .arg(coe_segment())
            .arg("--config")
            .arg(config);
        serde_json::from_str(&ok(&run(c))).expect("pdos --json is a layout")
    };
    let shown = pdos(&example);
    let (sizes, entries) = layout_of(Config::load(&example).unwrap());
    let as_run = |l: &rtcat_master::Layout| {
        let sizes: Vec<_> = l
            .subdevices
            .iter()
            .map(|s| (s.position, s.input_bytes, s.output_bytes))
            .collect();
        let entries: Vec<_> = l
            .entries
            .iter()
            .map(|e| {
                format!(
                    "{} {:?} {:#06x}:{:02x} @{} {}",
                    e.position, e.direction, e.index, e.subindex, e.bit_offset, e.bits
                )
            })
            .collect();
        (sizes, entries)
    };
    assert_eq!(as_run(&shown), (sizes, entries));
    // And the default mapping without the [[device]] entries (else the check proves nothing).
    assert_ne!(as_run(&pdos(patient())), as_run(&shown));
}

// ---------------------------------------------------------------- over a veth pair (root)

#[path = "support/sim_proc.rs"]
mod sim_proc;
use sim_proc::SimProc;

#[test]
fn veth_a_write_is_seen_by_the_next_command() {
    if !root_or_skip("veth_a_write_is_seen_by_the_next_command") {
        return;
    }
    let net = VethPair::create("sdo").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let _sim = SimProc::start_segment(
        BIN.as_ref(),
        &net,
        &dir.path().join("sim.sock"),
        Some(&coe_segment()),
    );
    let ns = |args: &[&str]| {
        let mut c = net.master_cmd(BIN);
        c.args(args)
            .args(["--iface", &net.master_if])
            .arg("--config")
            .arg(patient());
        run(c)
    };
    assert_eq!(
        ok(&ns(&["sdo", "read", "2", "0x6085:00", "--type", "u32"])),
        "0x00002710\n"
    );
    ok(&ns(&["sdo", "write", "2", "0x6085:00", "u32", "50000"]));
    // The simulator is another process: the value stays for the next command.
    assert_eq!(
        ok(&ns(&["sdo", "read", "2", "0x6085:00", "--type", "u32"])),
        "0x0000c350\n"
    );
    assert_eq!(
        ok(&ns(&["sdo", "read", "2", "0x1008:00", "--type", "string"])),
        "SERVO-COE\n"
    );
    let d = devices(&ok(&ns(&["config", "from-bus"])));
    assert_eq!(d.len(), 3);
    assert_eq!(d[2]["output_bytes"].as_integer(), Some(2));
    fails(
        &ns(&["sdo", "read", "2", "0x7777:00"]),
        1,
        "abort 0x06020000",
    );
}
