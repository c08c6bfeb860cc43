//! The bus commands (`scan`, `pdos`, `sii`, `counters`, `regs`): the library part
//! (`rtcat_master::diag`) against the in-process simulated segment with faults injected, the
//! commands as a user runs them with `--sim` (tables, JSON, exit codes, messages naming the
//! value), and over a veth pair against `rtcat sim` (root only) with faults from `rtcat sim-ctl`
//! and a NIC already used by a running master.

use ecsim::faults::FaultCommand;
use ecsim::netns::{VethPair, root_or_skip};
use ecsim::{Faults, SegmentSpec};
use rtcat_master::config::Config;
use rtcat_master::diag::{self, AlState, PortKind, Probe};
use rtcat_master::sii::Sii;
use rtcat_master::{Session, Target};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rtcat");
/// An interface name that is valid but (almost certainly) not present.
const NO_IF: &str = "rtcatnoif0";

fn sim_session(spec: SegmentSpec, faults: &Faults) -> Session {
    Session::open(
        &Target::Sim {
            spec,
            faults: faults.clone(),
        },
        &Config::default(),
    )
    .unwrap()
}

fn segment_io() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/segment-io.toml")
}

// ---------------------------------------------------------------- the library, in-process

#[test]
fn scan_reads_identity_names_ports_and_changes_nothing() {
    let spec = SegmentSpec::reference();
    let s = sim_session(spec.clone(), &Faults::new());
    let p = Probe::new(s.maindevice(), &Config::default()).unwrap();
    assert_eq!(usize::from(p.count()), spec.devices.len());
    let entries = p.scan();
    assert_eq!(entries.len(), 3);
    for (e, d) in entries.iter().zip(&spec.devices) {
        assert!(e.errors.is_empty(), "{:?}", e.errors);
        assert_eq!(e.vendor_id, Some(d.vendor_id));
        assert_eq!(e.product_code, Some(d.product_id));
        assert_eq!(e.revision, Some(d.revision));
        assert_eq!(e.serial, Some(d.serial));
        assert_eq!(e.name.as_deref(), Some(d.name.as_str()));
        assert_eq!(e.al_state, AlState::Init);
        assert!(!e.al_error);
        assert_eq!(e.al_status_code, 0);
        assert_eq!((e.sync_managers, e.fmmus), (8, 8));
        assert!(!e.dc.supported);
        assert_eq!(e.ports.len(), 4);
        assert!(e.ports[0].link && !e.ports[0].loop_closed);
        assert_eq!(e.ports[2].kind, PortKind::NotImplemented);
    }
    // Port 1 has a link where a device follows; at the end of the chain it is closed.
    assert!(entries[1].ports[1].link && !entries[1].ports[1].loop_closed);
    assert!(!entries[2].ports[1].link && entries[2].ports[1].loop_closed);
    // The scan set no station address and moved no state.
    for pos in 0..3 {
        let mut r = [0u8; 2];
        p.read(pos, 0x0010, &mut r).unwrap();
        assert_eq!(r, [0, 0], "station address of {pos}");
        p.read(pos, 0x0130, &mut r).unwrap();
        assert_eq!(r[0], 1, "AL status of {pos}");
    }
}

#[test]
fn scan_shows_dc_support_of_a_dc_segment() {
    let s = sim_session(SegmentSpec::reference().with_dc(true), &Faults::new());
    let p = Probe::new(s.maindevice(), &Config::default()).unwrap();
    assert!(p.scan().iter().all(|e| e.dc.supported));
}

#[test]
fn subdevice_error_shows_its_al_status_code_text() {
    let faults = Faults::new();
    let s = sim_session(SegmentSpec::reference(), &faults);
    faults.apply(FaultCommand::SubdeviceError {
        position: 1,
        code: 0x001b,
    });
    // The fault reaches the device with the next frame: the count.
    let p = Probe::new(s.maindevice(), &Config::default()).unwrap();
    let e = p.scan();
    assert!(e[1].al_error);
    assert_eq!(e[1].al_state, AlState::SafeOp);
    assert_eq!(e[1].al_status_code, 0x001b);
    assert_eq!(e[1].al_status_text, "Sync manager watchdog");
    assert!(!e[0].al_error && !e[2].al_error);
    let j = serde_json::to_value(&e[1]).unwrap();
    assert_eq!(j["al_state"], "SAFEOP");
    assert_eq!(j["al_status_text"], "Sync manager watchdog");
    let t = rtcat::cmd::bus::scan_table(&e);
    assert!(t.contains("SAFEOP+ERR"), "{t}");
    assert!(
        t.contains("AL status code 0x001b: Sync manager watchdog"),
        "{t}"
    );
}

#[test]
fn scan_goes_on_past_a_lost_reply_and_a_pulled_cable_is_a_bus_failure() {
    let faults = Faults::new();
    let s = sim_session(SegmentSpec::reference(), &faults);
    let p = Probe::new(s.maindevice(), &Config::default()).unwrap();
    // The reply to the first register read of position 0 is lost: that block is named, the
    // rest of the entry and the other subdevices are still read.
    faults.apply(FaultCommand::DropNext(1));
    let e = p.scan();
    assert_eq!(e[0].errors.len(), 1, "{:?}", e[0].errors);
    assert!(e[0].errors[0].contains("APRD 0x0000"), "{:?}", e[0].errors);
    assert_eq!(e[0].name.as_deref(), Some("RZ/T2M-SIM"));
    assert_eq!(e[0].al_state, AlState::Init);
    assert!(e[1].errors.is_empty() && e[2].errors.is_empty());
    assert!(rtcat::cmd::bus::scan_table(&e).contains("error: position 0: APRD 0x0000"));

    faults.apply(FaultCommand::Link(false));
    let err = Probe::new(s.maindevice(), &Config::default())
        .err()
        .expect("no answer");
    assert!(!err.is_usage(), "{err}");
    assert!(err.to_string().contains("count the subdevices"), "{err}");
    faults.apply(FaultCommand::Link(true));
    let p = Probe::new(s.maindevice(), &Config::default()).unwrap();
    assert_eq!(p.count(), 3);
    // The cable pull counted as one lost link at port 0 of the first subdevice.
    let c = p.all_error_counters().unwrap();
    assert_eq!(c[0].ports[0].lost_link, 1, "{c:?}");
    assert_eq!(c[1].ports[0].lost_link, 0, "{c:?}");
}

#[test]
fn al_status_texts_cover_the_table() {
    for (code, text) in [
        (0x0000, "No error"),
        (0x0011, "Invalid requested state change"),
        (0x001b, "Sync manager watchdog"),
        (0x001d, "Invalid Output Configuration"),
        (0x002e, "Invalid input FMMU configuration"),
        (0x0052, "External hardware not ready"),
        (0x0083, "Temperature too high"),
        (0x00f0, "Application controller available"),
        (0x8001, "Vendor specific"),
        (0x0004, "Unknown code (reserved)"),
    ] {
        assert_eq!(diag::al_status_text(code), text, "code {code:#06x}");
    }
}

#[test]
fn crc_errors_show_in_the_counters_of_the_right_ports() {
    let faults = Faults::new();
    let s = sim_session(SegmentSpec::reference(), &faults);
    let p = Probe::new(s.maindevice(), &Config::default()).unwrap();
    let before = p.all_error_counters().unwrap();
    assert!(before.iter().all(|c| !c.any()), "{before:?}");
    assert!(before.iter().all(|c| c.ports.len() == 2));
    faults.apply(FaultCommand::CrcErrors {
        position: 1,
        port: 0,
        count: 5,
    });
    let c = p.all_error_counters().unwrap();
    // Device 1 saw the bad frames first at port 0; device 2 got them marked (forwarded); on the
    // way back every device with a following one counts them forwarded at port 1.
    assert_eq!(c[1].ports[0].invalid_frame, 5, "{c:?}");
    assert_eq!(c[1].ports[0].forwarded, 0);
    assert_eq!(c[1].processing_unit, 5);
    assert_eq!(c[0].ports[0].invalid_frame, 0);
    assert_eq!(c[0].processing_unit, 0);
    assert_eq!(c[2].ports[0].forwarded, 5);
    assert_eq!(c[0].ports[1].forwarded, 5);
    assert_eq!(c[1].ports[1].forwarded, 5);
    let t = rtcat::cmd::bus::counters_table(&c);
    assert!(t.lines().nth(2).unwrap().contains('5'), "{t}");
    let changes = rtcat::cmd::bus::counter_changes(&before, &c);
    assert!(
        changes.contains(&"pos 1 port 0 invalid frames: 0 -> 5 (+5)".to_string()),
        "{changes:?}"
    );
}

#[test]
fn sii_decodes_names_pdos_and_the_whole_image() {
    let spec = SegmentSpec::load(&segment_io()).unwrap();
    let s = sim_session(spec.clone(), &Faults::new());
    let p = Probe::new(s.maindevice(), &Config::default()).unwrap();
    for (pos, d) in spec.devices.iter().enumerate() {
        let img = p.read_sii(pos as u16, None).unwrap();
        assert!(!img.truncated);
        let sii = img.parse().unwrap();
        assert_eq!(sii.device_name(), Some(d.name.as_str()));
        assert_eq!(sii.serial, d.serial);
        // Every category up to the end marker, byte for byte as the simulated EEPROM holds it.
        let eeprom = ecsim::sii::build_image(d).unwrap();
        let n = img.bytes.len() - 4;
        assert_eq!(img.bytes[..n], eeprom[..n], "position {pos}");
        let names: Vec<_> = sii
            .pdos
            .iter()
            .flat_map(|p| p.entries.iter().filter_map(|e| e.name.clone()))
            .collect();
        let want: Vec<_> = d
            .tx_pdos()
            .iter()
            .chain(d.rx_pdos().iter())
            .flat_map(|p| p.entries.iter().filter_map(|e| e.name.clone()))
            .collect();
        assert_eq!(names.len(), want.len(), "position {pos}");
        for w in &want {
            assert!(names.contains(w), "position {pos}: {w:?} in {names:?}");
        }
        let text = rtcat::cmd::bus::sii_text(pos as u16, &sii, img.truncated);
        assert!(text.contains(&format!("name {:?}", d.name)), "{text}");
    }
}

/// The station alias written into the SII: word 4 and the configuration area's checksum in
/// word 7 (the simulator's own CRC of the 14 bytes agrees, as an ESC's at power-up would), the
/// ESC's register 0x0012 after the reload, the rest of the image untouched; the other devices'
/// aliases unchanged.
#[test]
fn the_station_alias_is_written_with_its_checksum_and_reloaded() {
    let spec = SegmentSpec::load(&segment_io()).unwrap();
    let s = sim_session(spec.clone(), &Faults::new());
    let p = Probe::new(s.maindevice(), &Config::default()).unwrap();
    let before = p.read_sii(1, None).unwrap().bytes;
    assert_eq!(p.write_alias(1, 0x0021).unwrap(), (0, 0x0021));
    let after = p.read_sii(1, None).unwrap().bytes;
    assert_eq!(after[8..10], [0x21, 0x00]);
    assert_eq!(after[14], ecsim::sii::config_crc(&after[..14]));
    assert_eq!(after[14], diag::config_area_checksum(&after[..14]));
    assert_ne!(after[14], before[14], "the checksum covers the alias");
    assert_eq!(after[..8], before[..8]);
    assert_eq!(after[10..14], before[10..14]);
    assert_eq!(after[15..], before[15..]);
    let alias_of = |pos: u16| {
        let mut a = [0u8; 2];
        p.read(pos, 0x0012, &mut a).unwrap();
        u16::from_le_bytes(a)
    };
    assert_eq!((alias_of(0), alias_of(1), alias_of(2)), (0, 0x0021, 0));
    // And back: written over again.
    assert_eq!(p.write_alias(1, 0).unwrap(), (0x0021, 0));
    assert_eq!(p.read_sii(1, None).unwrap().bytes, before);
}

#[test]
fn sii_read_gives_an_eeprom_offered_to_the_pdi_back() {
    let s = sim_session(SegmentSpec::reference(), &Faults::new());
    let md = s.maindevice();
    // The device application has the EEPROM offered (0x0500 bit 0), as many ESCs run.
    futures_lite::future::block_on(ethercrab::Command::apwr(1, 0x0500).send(md, [0x01u8])).unwrap();
    let p = Probe::new(md, &Config::default()).unwrap();
    let img = p.read_sii(1, None).unwrap();
    assert_eq!(img.parse().unwrap().serial, 1001);
    let mut r = [0u8; 1];
    p.read(1, 0x0500, &mut r).unwrap();
    assert_eq!(r[0], 0x01, "EEPROM configuration after the read");
    p.read(0, 0x0500, &mut r).unwrap();
    assert_eq!(r[0], 0x00, "a device that did not offer it is left alone");
}

#[test]
fn layout_matches_the_segment_and_leaves_it_in_init() {
    let spec = SegmentSpec::load(&segment_io()).unwrap();
    let s = sim_session(spec.clone(), &Faults::new());
    let l = rtcat_master::session::read_layout(s.maindevice()).unwrap();
    assert_eq!(l.subdevices.len(), spec.devices.len());
    for (sd, d) in l.subdevices.iter().zip(&spec.devices) {
        assert_eq!(sd.input_bytes, u32::from(d.inputs), "{}", d.name);
        assert_eq!(sd.output_bytes, u32::from(d.outputs), "{}", d.name);
        assert_eq!(sd.name, d.name);
    }
    let p = Probe::new(s.maindevice(), &Config::default()).unwrap();
    for e in p.scan() {
        assert_eq!(e.al_state, AlState::Init, "position {}", e.position);
    }
}

#[test]
fn register_reads_are_bounded_and_split_into_frames() {
    let s = sim_session(SegmentSpec::reference(), &Faults::new());
    let p = Probe::new(s.maindevice(), &Config::default()).unwrap();
    // 0x0000..0x0900 (three datagrams; the simulated ESC without DC has no 0x0900 block) equals
    // the reads of its pieces.
    let all = p.registers(0, 0, 0x900).unwrap();
    assert_eq!(all.len(), 0x900);
    let mut piece = vec![0u8; 16];
    p.read(0, 0x0130, &mut piece).unwrap();
    assert_eq!(all[0x130..0x140], piece[..]);
    p.read(0, 0x07f8, &mut piece).unwrap();
    assert_eq!(all[0x7f8..0x808], piece[..], "across a datagram boundary");
    let dc = sim_session(SegmentSpec::reference().with_dc(true), &Faults::new());
    let pdc = Probe::new(dc.maindevice(), &Config::default()).unwrap();
    assert_eq!(pdc.registers(2, 0, 4096).unwrap().len(), 4096);
    for (pos, addr, len, what) in [
        (3, 0, 1, "position 3"),
        (0, 0x1_0000, 1, "address 0x10000"),
        (0, 0, 0, "length 0"),
        (0, 0, 4097, "length 4097"),
        (0, 0xfff0, 32, "ends at 0x10010"),
    ] {
        let e = p.registers(pos, addr, len).unwrap_err();
        assert!(e.is_usage(), "{e}");
        assert!(e.to_string().contains(what), "{e}");
    }
    // Beyond the simulated ESC's memory nobody answers: a bus failure, not a usage error.
    let e = p.registers(0, 0x4000, 16).unwrap_err();
    assert!(!e.is_usage(), "{e}");
}

// ---------------------------------------------------------------- the commands with --sim

fn rtcat() -> Command {
    Command::new(BIN)
}

/// Run with a deadline: a command that hangs fails the test.
fn run(mut c: Command) -> Output {
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    // Drain stdout on a thread: a large output must not block the child.
    let mut out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut out, &mut v).unwrap();
        v
    });
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("{c:?} did not return within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut o = child.wait_with_output().unwrap();
    o.stdout = reader.join().unwrap();
    o
}

fn cmd(args: &[&str]) -> Output {
    let mut c = rtcat();
    c.args(args);
    run(c)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn ok(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "{:?}: {}", o.status, stderr(o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(o)))
}

#[test]
fn scan_sim_table_and_json() {
    let o = cmd(&["scan", "--sim"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let t = stdout(&o);
    assert_eq!(t.lines().count(), 4, "{t}");
    assert!(t.lines().next().unwrap().starts_with("POS"), "{t}");
    assert!(t.contains("RZ/T2M-SIM") && t.contains("1:closed"), "{t}");
    let v = ok(&cmd(&["scan", "--sim", "--json"]));
    let list = v.as_array().unwrap();
    assert_eq!(list.len(), 3);
    assert_eq!(list[2]["serial"], 1002);
    assert_eq!(list[0]["al_state"], "INIT");
    assert_eq!(list[0]["al_status_text"], "No error");
}

#[test]
fn pdos_json_is_the_layout_of_the_segment() {
    let seg = segment_io();
    let spec = SegmentSpec::load(&seg).unwrap();
    let v = ok(&cmd(&[
        "pdos",
        "--sim",
        "--segment",
        seg.to_str().unwrap(),
        "--json",
    ]));
    assert_eq!(v["schema"], "rtcat.layout/1");
    let subs = v["subdevices"].as_array().unwrap();
    assert_eq!(subs.len(), spec.devices.len());
    for (s, d) in subs.iter().zip(&spec.devices) {
        assert_eq!(s["input_bytes"], u64::from(d.inputs), "{}", d.name);
        assert_eq!(s["output_bytes"], u64::from(d.outputs), "{}", d.name);
    }
    let in_total: u64 = spec.devices.iter().map(|d| u64::from(d.inputs)).sum();
    assert_eq!(v["input_bytes"], in_total);
    // Every entry of the description, with its name and a bit offset inside the image.
    let entries = v["entries"].as_array().unwrap();
    let want: usize = spec
        .devices
        .iter()
        .map(|d| {
            d.tx_pdos()
                .iter()
                .chain(d.rx_pdos().iter())
                .map(|p| p.entries.len())
                .sum::<usize>()
        })
        .sum();
    assert_eq!(entries.len(), want);
    assert!(entries.iter().all(|e| e["name"].is_string()));
    let t = stdout(&cmd(&["pdos", "--sim", "--segment", seg.to_str().unwrap()]));
    assert!(t.contains("Process image:"), "{t}");
    assert!(
        t.lines()
            .any(|l| l.contains("0x6000:01") && l.trim_end().ends_with(" Input")),
        "{t}"
    );
}

#[test]
fn sii_sim_decodes_and_raw_is_the_image() {
    let t = stdout(&cmd(&["sii", "--sim", "1"]));
    assert!(t.starts_with("=== Subdevice 1 ==="), "{t}");
    assert!(t.contains("name \"RZ/T2M-SIM\""), "{t}");
    assert!(t.contains("\"Output 1\""), "{t}");
    let v = ok(&cmd(&["sii", "--sim", "--json"]));
    assert_eq!(v.as_array().unwrap().len(), 3);
    assert_eq!(v[2]["sii"]["serial"], 1002);
    let raw = cmd(&["sii", "--sim", "2", "--raw"]);
    assert!(raw.status.success(), "{}", stderr(&raw));
    let sii = Sii::parse(&raw.stdout).unwrap();
    assert_eq!(sii.serial, 1002);
}

#[test]
fn sii_raw_refuses_a_terminal() {
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty writes the two descriptors; null name/termios/winsize are allowed.
    let r = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(r, 0, "openpty");
    use std::os::fd::FromRawFd;
    // SAFETY: both descriptors are fresh and owned here.
    let (m, s) = unsafe {
        (
            std::fs::File::from_raw_fd(master),
            std::fs::File::from_raw_fd(slave),
        )
    };
    let o = rtcat()
        .args(["sii", "--sim", "0", "--raw"])
        .stdin(Stdio::null())
        .stdout(Stdio::from(s))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    drop(m);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--raw writes binary data"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn counters_sim_and_watch_until_sigterm() {
    let v = ok(&cmd(&["counters", "--sim", "--json"]));
    let list = v.as_array().unwrap();
    assert_eq!(list.len(), 3);
    assert_eq!(list[0]["ports"][0]["invalid_frame"], 0);
    assert_eq!(list[0]["processing_unit"], 0);
    let t = stdout(&cmd(&["counters", "--sim"]));
    assert!(t.starts_with("POS  PORT  INVALID"), "{t}");
    assert_eq!(t.lines().count(), 7, "{t}");

    let mut child = rtcat()
        .args(["counters", "--sim", "--json", "--watch", "0.1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(t.elapsed() < Duration::from_secs(10), "watch did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{:?} {}", o.status, stderr(&o));
    let lines: Vec<serde_json::Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines.len() >= 3, "{} readings in 0.8 s", lines.len());
    assert!(
        lines
            .iter()
            .all(|l| l["subdevices"].as_array().unwrap().len() == 3)
    );
}

#[test]
fn regs_sim_hex_dump_and_json() {
    let t = stdout(&cmd(&["regs", "--sim", "0", "0x0130", "6"]));
    assert_eq!(t, "0130: 01 00 00 00 00 00\n");
    let t = stdout(&cmd(&["regs", "--sim", "1", "304", "20"]));
    assert_eq!(t.lines().count(), 2, "{t}");
    assert!(t.starts_with("0130: 01"), "{t}");
    assert!(t.lines().nth(1).unwrap().starts_with("0140:"), "{t}");
    let v = ok(&cmd(&["regs", "--sim", "2", "0x12", "2", "--json"]));
    assert_eq!(v["address"], 0x12);
    assert_eq!(v["hex"], "0000");
}

#[test]
fn alias_writes_and_says_what_it_did() {
    let t = stdout(&cmd(&["alias", "--sim", "2", "0x0031"]));
    assert_eq!(
        t,
        "position 2: station alias 0x0000 -> 0x0031 (SII word 4 and the checksum in word 7 \
         written; register 0x0012 reads 0x0031)\n"
    );
    let v = ok(&cmd(&["alias", "--sim", "0", "5", "--json"]));
    assert_eq!((v["old"].as_u64(), v["alias"].as_u64()), (Some(0), Some(5)));
    assert_eq!(v["register"], 5);
}

#[test]
fn the_interface_comes_from_the_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("rtcat.toml");
    std::fs::write(&cfg, format!("[bus]\ninterface = \"{NO_IF}\"\n")).unwrap();
    let o = cmd(&["scan", "--config", cfg.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains(NO_IF), "{}", stderr(&o));
    // --iface wins over the file.
    let o = cmd(&[
        "scan",
        "--config",
        cfg.to_str().unwrap(),
        "--iface",
        "rtcatnoif1",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("rtcatnoif1"), "{}", stderr(&o));
}

/// Bad input exits 2 and names the value; nothing is opened for an argument that is wrong in
/// itself.
#[test]
fn bad_arguments_exit_2_naming_the_value() {
    for (args, what) in [
        (&["regs", "--sim", "3", "0", "1"][..], "position 3"),
        (&["regs", "--sim", "0", "0x10000", "1"], "0x10000"),
        (&["regs", "--sim", "0", "0", "0"], "LEN 0"),
        (&["regs", "--sim", "0", "0", "4097"], "LEN 4097"),
        (&["regs", "--sim", "0", "0xfff0", "0x20"], "0x10010"),
        (&["regs", "--sim", "0", "0xzz", "1"], "0xzz"),
        (&["sii", "--sim", "7"], "position 7"),
        (&["alias", "--sim", "3", "1"], "position 3"),
        (&["alias", "--sim", "1", "0x10000"], "0x10000"),
        (&["alias", "--sim", "1", "x"], "\"x\""),
        (&["sii", "--sim", "--raw"], "POS"),
        (&["scan", "--iface", NO_IF], NO_IF),
        (&["scan", "--iface", "bad/name"], "bad/name"),
        (&["counters", "--sim", "--watch", "0"], "--watch 0"),
        (
            &["pdos", "--sim", "--segment", "/nonexistent/seg.toml"],
            "seg.toml",
        ),
        (
            &["scan", "--sim", "--config", "/nonexistent/rtcat.toml"],
            "rtcat.toml",
        ),
        (&["scan", "--segment", "x.toml"], "--sim"),
    ] {
        let o = cmd(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(what), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{args:?}: {}", stderr(&o));
    }
}

// ---------------------------------------------------------------- over a veth pair (root)

#[path = "support/sim_proc.rs"]
mod sim_proc;
use sim_proc::SimProc as Sim;

// Each veth test runs a simulator in a busy loop: one at a time on two cores.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn in_ns(net: &VethPair, args: &[&str]) -> Output {
    let mut c = net.master_cmd(BIN);
    c.args(args);
    run(c)
}

#[test]
fn veth_scan_counters_pdos_sii_with_faults() {
    if !root_or_skip("veth_scan_counters_pdos_sii_with_faults") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let net = VethPair::create("bus").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sim = Sim::start(Path::new(BIN), &net, &dir.path().join("sim.sock"));
    let ifc = net.master_if.as_str();

    let v = ok(&in_ns(&net, &["scan", "--iface", ifc, "--json"]));
    assert_eq!(v.as_array().unwrap().len(), 3);
    assert_eq!(v[1]["name"], "RZ/T2M-SIM");
    assert_eq!(v[1]["al_error"], false);

    sim.ctl("subdevice-error 1 0x001d");
    let o = in_ns(&net, &["scan", "--iface", ifc]);
    assert!(o.status.success(), "{}", stderr(&o));
    let t = stdout(&o);
    assert!(
        t.contains("AL status code 0x001d: Invalid Output Configuration"),
        "{t}"
    );

    let v = ok(&in_ns(&net, &["counters", "--iface", ifc, "--json"]));
    assert_eq!(v[1]["ports"][0]["invalid_frame"], 0);
    sim.ctl("crc-errors 1 0 7");
    // The fault reaches the ESCs with the first frame of the next command.
    let v = ok(&in_ns(&net, &["counters", "--iface", ifc, "--json"]));
    assert_eq!(v[1]["ports"][0]["invalid_frame"], 7, "{v}");
    assert_eq!(v[2]["ports"][0]["forwarded"], 7, "{v}");
    let t = stdout(&in_ns(&net, &["counters", "--iface", ifc]));
    assert!(t.lines().nth(3).unwrap().contains(" 7 "), "{t}");

    // --watch prints the table, then the changes a new fault makes, until SIGTERM.
    let mut watch = net
        .master_cmd(BIN)
        .args(["counters", "--iface", ifc])
        .args(["--watch", "0.1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(600));
    sim.ctl("crc-errors 1 0 3");
    std::thread::sleep(Duration::from_millis(600));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(watch.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let t = Instant::now();
    while watch.try_wait().unwrap().is_none() {
        assert!(t.elapsed() < Duration::from_secs(10), "watch did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = watch.wait_with_output().unwrap();
    assert!(o.status.success(), "{:?} {}", o.status, stderr(&o));
    let t = stdout(&o);
    assert!(t.starts_with("POS  PORT"), "{t}");
    assert!(
        t.contains("pos 1 port 0 invalid frames: 7 -> 10 (+3)"),
        "{t}"
    );
    assert!(
        t.contains("pos 2 port 0 forwarded errors: 7 -> 10 (+3)"),
        "{t}"
    );

    let v = ok(&in_ns(&net, &["pdos", "--iface", ifc, "--json"]));
    assert_eq!(v["input_bytes"], 66);
    assert_eq!(v["output_bytes"], 66);

    let t = stdout(&in_ns(&net, &["sii", "--iface", ifc, "0"]));
    assert!(t.contains("\"Input 1\""), "{t}");
    let t = stdout(&in_ns(&net, &["regs", "--iface", ifc, "2", "0x0134", "2"]));
    assert_eq!(t, "0134: 00 00\n");
    let o = in_ns(&net, &["regs", "--iface", ifc, "3", "0x0134", "2"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("position 3"), "{}", stderr(&o));
    drop(sim);
}

#[test]
fn veth_a_nic_used_by_a_running_master_is_refused() {
    if !root_or_skip("veth_a_nic_used_by_a_running_master_is_refused") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let net = VethPair::create("busy").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let _sim = Sim::start(Path::new(BIN), &net, &dir.path().join("sim.sock"));
    let mut bench = net
        .master_cmd(BIN)
        .args(["bench", "--iface"])
        .arg(&net.master_if)
        .args([
            "--no-rt",
            "--duration",
            "20",
            "--period-us",
            "1000",
            "--out",
        ])
        .arg(dir.path().join("bench"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the bench has its EtherCAT socket (Proto 88a4 in the namespace's table).
    let t = Instant::now();
    loop {
        let o = net
            .master_cmd("cat")
            .arg("/proc/net/packet")
            .output()
            .unwrap();
        if String::from_utf8_lossy(&o.stdout).contains("88a4") {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "bench opened no socket"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for args in [
        &["scan", "--iface", &net.master_if][..],
        &["counters", "--iface", &net.master_if],
        &["pdos", "--iface", &net.master_if],
    ] {
        let o = in_ns(&net, args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("is in use by another EtherCAT master"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(bench.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = bench.wait();
    // With the master gone the NIC is free again.
    let o = in_ns(&net, &["scan", "--iface", &net.master_if, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
}
