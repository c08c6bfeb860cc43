//! `rtcat config from-eni` on the project's ENI of the CoE example: the configuration it makes
//! passes `config check`, runs the simulated segment to OP with the expected WKC, and gives the
//! master the same process-data layout as the hand-written `examples/coe/rtcat.toml`; what is
//! not run is on stderr; bad input exits 2 naming the place.

use rtcat_control::{Client, Request};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rtcat");

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/coe")
        .join(name)
}

fn rtcat(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn from_eni(file: &Path) -> Output {
    rtcat(&["config".as_ref(), "from-eni".as_ref(), file.as_os_str()])
}

/// The configuration made from the example ENI, with a patient bring-up (a loaded machine).
fn generated(dir: &Path) -> PathBuf {
    let o = from_eni(&example("network.eni.xml"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let mut text = String::from_utf8(o.stdout).unwrap();
    text.push_str("\n[bus]\ninit_pdu_timeout_ms = 1000\n");
    let p = dir.join("from-eni.toml");
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn the_import_passes_config_check_and_lists_what_is_not_run() {
    let d = tempfile::tempdir().unwrap();
    let o = from_eni(&example("network.eni.xml"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let notes: Vec<&str> = err.lines().collect();
    assert_eq!(notes.len(), 8, "{err}");
    for n in &notes {
        assert!(
            n.starts_with("rtcat: note: network.eni.xml: not run: line "),
            "{n}"
        );
    }
    assert!(
        err.contains("position 2: register init command at IP: APWR"),
        "{err}"
    );
    // --out writes the same text.
    let out = d.path().join("out.toml");
    let o2 = rtcat(&[
        "config".as_ref(),
        "from-eni".as_ref(),
        example("network.eni.xml").as_os_str(),
        "--out".as_ref(),
        out.as_os_str(),
    ]);
    assert!(o2.status.success() && o2.stdout.is_empty(), "{o2:?}");
    assert_eq!(std::fs::read(&out).unwrap(), o.stdout);
    let c = rtcat(&["config".as_ref(), "check".as_ref(), out.as_os_str()]);
    assert!(c.status.success(), "{c:?}");
}

#[test]
fn bad_input_exits_2_naming_the_place() {
    let d = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(example("network.eni.xml")).unwrap();
    for (what, body, want) in [
        (
            "malformed",
            "<EtherCATConfig><Config>".to_string(),
            "bad.xml:1: not well-formed XML",
        ),
        (
            "a bad number",
            text.replacen(
                "<VendorId>#x00000766</VendorId>",
                "<VendorId>x</VendorId>",
                1,
            ),
            "bad.xml:",
        ),
        (
            "inconsistent",
            text.replacen("<Data>20007a60</Data>", "<Data>10007a60</Data>", 1),
            "the init commands map 0x1600",
        ),
        (
            "an ESI",
            std::fs::read_to_string(example("DIO8-COE.xml")).unwrap(),
            "an ESI device description, not an ENI",
        ),
        (
            // Values the ENI format allows and rtcat's configuration does not: the master's
            // own parser names the key.
            "a cycle time rtcat does not run",
            text.replacen("<CycleTime>1000</CycleTime>", "<CycleTime>1</CycleTime>", 1),
            "cycle.period_us",
        ),
    ] {
        let f = d.path().join("bad.xml");
        std::fs::write(&f, body).unwrap();
        let o = from_eni(&f);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{what}: {err}");
        assert!(o.stdout.is_empty(), "{what}");
        assert!(err.contains(want), "{what}: {err} (want {want:?})");
    }
    let o = from_eni(&d.path().join("missing.xml"));
    assert_eq!(o.status.code(), Some(2), "{o:?}");
}

/// `rtcat bench` on the CoE example segment with `config`, in the background.
struct Bench {
    child: Option<Child>,
    sock: PathBuf,
    out: PathBuf,
}

impl Bench {
    fn start(dir: &Path, config: &Path) -> Bench {
        let sock = dir.join("ctl.sock");
        let out = dir.join("out");
        let child = Command::new(BIN)
            .args(["bench", "--sim", "--no-rt", "--duration", "4", "--segment"])
            .arg(example("segment.toml"))
            .arg("--config")
            .arg(config)
            .arg("--control")
            .arg(&sock)
            .arg("--out")
            .arg(&out)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let b = Bench {
            child: Some(child),
            sock,
            out,
        };
        let t = Instant::now();
        loop {
            if let Ok(mut c) = Client::connect(&b.sock)
                && let Ok(s) = c.call(&Request::Status)
                && s["state"] == "op"
            {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "bench did not come up"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        b
    }

    /// The layout the running master reports (`rtcat pdos --control --json`).
    fn layout(&self) -> Value {
        let o = rtcat(&[
            "pdos".as_ref(),
            "--json".as_ref(),
            "--control".as_ref(),
            self.sock.as_os_str(),
        ]);
        assert!(o.status.success(), "{o:?}");
        serde_json::from_slice(&o.stdout).unwrap()
    }

    fn finish(mut self) -> Value {
        let mut child = self.child.take().unwrap();
        let t = Instant::now();
        while child.try_wait().unwrap().is_none() {
            if t.elapsed() > Duration::from_secs(60) {
                let _ = child.kill();
                panic!("bench did not end");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let s = std::fs::read_to_string(self.out.join("summary.json")).unwrap();
        serde_json::from_str(&s).unwrap()
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn the_imported_configuration_runs_with_the_hand_written_layout() {
    let d = tempfile::tempdir().unwrap();
    let gen_dir = d.path().join("gen");
    let hand_dir = d.path().join("hand");
    std::fs::create_dir_all(&gen_dir).unwrap();
    std::fs::create_dir_all(&hand_dir).unwrap();
    let hand = hand_dir.join("rtcat.toml");
    let mut text = std::fs::read_to_string(example("rtcat.toml")).unwrap();
    text = text.replace("[bus]\n", "[bus]\ninit_pdu_timeout_ms = 1000\n");
    std::fs::write(&hand, text).unwrap();
    let generated = generated(&gen_dir);

    // One at a time: the machine is shared.
    let mut layouts = Vec::new();
    let mut summaries = Vec::new();
    for (dir, cfg) in [(&gen_dir, &generated), (&hand_dir, &hand)] {
        let b = Bench::start(dir, cfg);
        layouts.push(b.layout());
        summaries.push(b.finish());
    }
    for s in &summaries {
        assert_eq!(s["wkc"]["expected"], 7, "{s}");
        assert_eq!(s["wkc"]["mismatches"], 0, "{s}");
        assert_eq!(s["pdi_bytes"], 40, "{s}");
    }
    // The configured layout: the drive's 11 bytes each way, the AI4's four channels.
    let l = &layouts[0];
    assert_eq!(
        (l["input_bytes"].clone(), l["output_bytes"].clone()),
        (28.into(), 12.into())
    );
    assert_eq!(
        layouts[0], layouts[1],
        "the ENI's layout differs from the hand-written one"
    );
}

fn check(config: &Path, segment: &Path) -> Output {
    rtcat(&[
        "config".as_ref(),
        "check".as_ref(),
        "--config".as_ref(),
        config.as_os_str(),
        "--sim".as_ref(),
        "--segment".as_ref(),
        segment.as_os_str(),
    ])
}

#[test]
fn config_check_on_the_bus_names_every_difference() {
    let d = tempfile::tempdir().unwrap();
    let generated = generated(d.path());
    // The segment the ENI describes: it fits, and so does the hand-written file.
    let seg = example("segment.toml");
    for cfg in [generated.clone(), example("rtcat.toml")] {
        let o = check(&cfg, &seg);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{cfg:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(
            out.contains("bus: 3 subdevices fit the configuration"),
            "{out}"
        );
    }

    // Over the control socket the master's own view is no check of a configuration.
    let o = rtcat(&[
        "config".as_ref(),
        "check".as_ref(),
        generated.as_os_str(),
        "--control".as_ref(),
        d.path().join("none.sock").as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("--control: this command reads the bus"));

    // The same devices in another order, and one missing.
    let text = std::fs::read_to_string(&seg).unwrap();
    let parts: Vec<&str> = text.split("\n[[device]]\n").collect();
    assert_eq!(parts.len(), 4, "head + three devices");
    let swapped = d.path().join("swapped.toml");
    std::fs::write(
        &swapped,
        [parts[0], parts[1], parts[3], parts[2]].join("\n[[device]]\n"),
    )
    .unwrap();
    let o = check(&generated, &swapped);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    for want in [
        "order: segment.device[1] expects vendor_id 0x00000766 product_id 0x00030002 at \
         position 1, the bus has it at position 2 and SERVO-COE",
        "order: segment.device[2] expects vendor_id 0x00000766 product_id 0x00030003 at \
         position 2, the bus has it at position 1 and AI4-COE",
        // What the drive's entry asks of the AI4 now at its position follows.
        "mapping: device[2] at position 2 AI4-COE (vendor_id 0x00000766 product_id \
         0x00030002): the sm2 assignment is fixed at [], configured [0x1600]",
        "5 differences with the bus",
    ] {
        assert!(err.contains(want), "{err}\n(want {want:?})");
    }
    let short = d.path().join("short.toml");
    std::fs::write(
        &short,
        [parts[0], parts[1], parts[2]].join("\n[[device]]\n"),
    )
    .unwrap();
    let err = String::from_utf8_lossy(&check(&generated, &short).stderr).into_owned();
    for want in [
        "count: segment.subdevices = 3, the bus has 2 subdevices",
        "count: segment.device[2] expects vendor_id 0x00000766 product_id 0x00030003 at \
         position 2, the bus has 2 subdevices",
        "identity: device[2] (position 2): no subdevice on the bus matches",
    ] {
        assert!(err.contains(want), "{err}\n(want {want:?})");
    }
    // The drive an optional member (absent here): its entry gives the mapping it will join
    // with, which is no difference with the bus.
    let optional = d.path().join("optional.toml");
    let text = std::fs::read_to_string(&generated).unwrap();
    assert!(!text.contains("[health]"), "{text}");
    std::fs::write(
        &optional,
        format!(
            "[health]\nrecovery = \"subdevice\"\n{text}\n\
             [[group]]\nname = \"drive\"\noptional = true\nmembers = [{{ position = 2 }}]\n"
        ),
    )
    .unwrap();
    let err = String::from_utf8_lossy(&check(&optional, &short).stderr).into_owned();
    assert!(err.contains("count: segment.subdevices = 3"), "{err}");
    assert!(!err.contains("identity: device[2]"), "{err}");

    // Mapping: a size the DIO8 does not have, an assignment it fixes.
    let cfg = std::fs::read_to_string(&generated).unwrap();
    let bad = cfg.replacen(
        "name = \"DIO8-COE\"\ninput_bytes = 1\n",
        "name = \"DIO8-COE\"\ninput_bytes = 2\npdo_assign = { sm2 = [0x1601] }\n",
        1,
    );
    assert_ne!(bad, cfg);
    let f = d.path().join("bad.toml");
    std::fs::write(&f, bad).unwrap();
    let o = check(&f, &seg);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    for want in [
        "mapping: device[0] at position 0 DIO8-COE (vendor_id 0x00000766 product_id \
         0x00030001): the sm2 assignment is fixed at [0x1600], configured [0x1601]",
        "mapping: device[0] at position 0 DIO8-COE (vendor_id 0x00000766 product_id \
         0x00030001): input_bytes = 2, the PDOs it would run with ([0x1A00]) map 8 bits (1 \
         bytes)",
        "2 differences with the bus",
    ] {
        assert!(err.contains(want), "{err}\n(want {want:?})");
    }
}

#[test]
fn a_network_too_large_for_a_configuration_file_is_refused() {
    // 1024 drives like the example's: the configuration would exceed what rtcat reads.
    let t = std::fs::read_to_string(example("network.eni.xml")).unwrap();
    let start = t.find("    <Slave>").unwrap();
    let servo_at = t.rfind("    <Slave>").unwrap();
    let end = t.find("    <Cyclic>").unwrap();
    let mut big = String::from(&t[..start]);
    for k in 0..1024u32 {
        big.push_str(&t[servo_at..end].replace(
            "<AutoIncAddr>65534</AutoIncAddr>",
            &format!("<AutoIncAddr>{}</AutoIncAddr>", 0u16.wrapping_sub(k as u16)),
        ));
    }
    big.push_str(&t[end..]);
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("big.xml");
    std::fs::write(&f, big).unwrap();
    let o = from_eni(&f);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(o.stdout.is_empty());
    assert!(
        err.contains("(1024 subdevices) is ") && err.contains("more than rtcat reads"),
        "{err}"
    );
}
