use super::*;
use crate::config::Config;

const AXES: &str = r#"
[[axis]]
name = "x"
position = 0
counts_per_unit = 10000.0
max_velocity = 100.0
max_acceleration = 1000.0
min_position = -50.0
max_position = 50.0
moves = [10.0, -10.0, 0.0]
dwell_s = 0.2

[[axis]]
name = "y"
position = 1
mode = "csv"
counts_per_unit = 1000.0
max_velocity = 10.0
max_acceleration = 100.0
max_jerk = 1000.0
on_bad_cycles = "hold"
after_recovery = "re_enable"
profile = { from = 0.0, to = 5.0, dwell_s = 0.5, cycles = 3 }
"#;

fn err(text: &str) -> String {
    Config::parse(text, "t.toml").unwrap_err().to_string()
}

#[test]
fn axes_bring_their_device_configuration() {
    let c = Config::parse(AXES, "t.toml").unwrap();
    assert_eq!(c.axis.len(), 2);
    assert_eq!(c.device.len(), 2, "one generated [[device]] per axis");
    let x = &c.device[0];
    assert_eq!(x.position, Some(0));
    let rx: Vec<&str> = x.pdo_map[0].entries.iter().map(|e| e.text()).collect();
    assert_eq!(rx, ["0x6040:00:16", "0x6060:00:8", "0x607a:00:32"]);
    let tx: Vec<&str> = x.pdo_map[1].entries.iter().map(|e| e.text()).collect();
    assert_eq!(
        tx,
        [
            "0x6041:00:16",
            "0x6061:00:8",
            "0x6064:00:32",
            "0x606c:00:32",
            "0x60f4:00:32",
            "0x603f:00:16"
        ]
    );
    assert_eq!(x.sdo[0].index, 0x6060);
    assert_eq!(x.sdo[0].value, toml::Value::Integer(8));
    assert_eq!(c.device[1].sdo[0].value, toml::Value::Integer(9));
    assert!(
        c.device[1].pdo_map[0]
            .entries
            .iter()
            .any(|e| e.text() == "0x60ff:00:32")
    );
    assert_eq!(
        c.axis[1].policy(),
        Policy {
            on_bad_cycles: OnBadCycles::Hold,
            after_recovery: AfterRecovery::ReEnable
        }
    );
    assert_eq!(
        c.axis[0].program(),
        Some(crate::motion::Program::Moves {
            positions: vec![10.0, -10.0, 0.0],
            dwell: 0.2
        })
    );
    assert_eq!(
        c.axis[1].program(),
        Some(crate::motion::Program::BackAndForth {
            a: 0.0,
            b: 5.0,
            dwell: 0.5,
            cycles: Some(3)
        })
    );
    assert_eq!(c.axis[1].limits().jerk, Some(1000.0));
    // on_bad_cycles = "quick_stop" (the default) holds the default number of bad cycles
    // first, or hold_bad_cycles of them.
    assert_eq!(
        c.axis[0].policy().on_bad_cycles,
        OnBadCycles::QuickStopAfter(crate::cia402::DEFAULT_HOLD_BAD_CYCLES)
    );
    let c2 = Config::parse(
        &AXES.replacen("dwell_s = 0.2", "dwell_s = 0.2\nhold_bad_cycles = 0", 1),
        "t.toml",
    )
    .unwrap();
    assert_eq!(
        c2.axis[0].policy().on_bad_cycles,
        OnBadCycles::QuickStopAfter(0)
    );
    // The generated entries pass the [[device]] checks themselves.
    crate::devices::validate(&c.device, None).unwrap();
}

#[test]
fn an_explicit_device_is_used_and_checked() {
    let ok = format!(
        "{AXES}\n[[device]]\nposition = 0\npdo_assign = {{ sm2 = [0x1600], sm3 = [0x1a00] }}\n\
         [[device.pdo_map]]\nindex = 0x1600\nentries = [\"0x6040:00:16\", \"0x6060:00:8\", \"0x607A:00:32\", \"0x60FF:00:32\"]\n\
         [[device.pdo_map]]\nindex = 0x1a00\nentries = [\"0x6041:00:16\", \"0x6061:00:8\", \"0x6064:00:32\", \"0x606C:00:32\", \"0x60F4:00:32\", \"0x603F:00:16\"]\n"
    );
    let c = Config::parse(&ok, "t.toml").unwrap();
    assert_eq!(
        c.device.len(),
        2,
        "the explicit entry plus the generated one of axis y"
    );
    assert_eq!(c.device[0].pdo_map[0].entries.len(), 4);
    // 0x60F4 is shown when mapped, not needed; the position actual is.
    let without_ferr = ok.replace(", \"0x60F4:00:32\"", "");
    assert_ne!(without_ferr, ok);
    Config::parse(&without_ferr, "t.toml").unwrap();
    let missing = ok.replace("\"0x6064:00:32\", ", "");
    assert_ne!(missing, ok);
    let e = err(&missing);
    assert!(
        e.contains("axis[0]")
            && e.contains("0x6064:00:32")
            && e.contains("inputs")
            && e.contains("device[0], position 0")
            && e.contains("delete that [[device]] entry"),
        "{e}"
    );
    // A device without a mapping keeps the drive's own (checked at bring-up).
    let sdo_only = format!("{AXES}\n[[device]]\nposition = 1\n");
    assert_eq!(Config::parse(&sdo_only, "t.toml").unwrap().device.len(), 2);
}

#[test]
fn bad_axes_are_refused_naming_the_key() {
    for (from, to, want) in [
        (
            "counts_per_unit = 10000.0",
            "counts_per_unit = 0.0",
            "axis[0].counts_per_unit",
        ),
        (
            "max_velocity = 100.0",
            "max_velocity = -1.0",
            "axis[0].max_velocity",
        ),
        (
            "max_acceleration = 1000.0",
            "max_acceleration = nan",
            "axis[0].max_acceleration",
        ),
        ("max_jerk = 1000.0", "max_jerk = 0.0", "axis[1].max_jerk"),
        (
            "min_position = -50.0",
            "min_position = 60.0",
            "axis[0].min_position",
        ),
        (
            "max_position = 50.0",
            "max_position = 1e9",
            "axis[0].max_position",
        ),
        ("name = \"y\"", "name = \"x\"", "axis[1].name"),
        ("position = 1", "position = 0", "axis[1].position"),
        (
            "position = 1",
            "alias = 3\nposition = 1",
            "axis[1].position",
        ),
        ("position = 1", "vendor_id = 1", "axis[1].product_id"),
        ("mode = \"csv\"", "mode = \"cst\"", "unknown variant"),
        (
            "on_bad_cycles = \"hold\"",
            "on_bad_cycles = \"ignore\"",
            "unknown variant",
        ),
        ("name = \"y\"", "name = \"y\"\nspeed = 3", "unknown field"),
        (
            "on_bad_cycles = \"hold\"",
            "on_bad_cycles = \"hold\"\nhold_bad_cycles = 2",
            "axis[1].hold_bad_cycles = 2: only with on_bad_cycles = \"quick_stop\"",
        ),
        (
            "dwell_s = 0.2",
            "dwell_s = 0.2\nhold_bad_cycles = 1001",
            "axis[0].hold_bad_cycles = 1001: must be 0..1000",
        ),
        (
            "dwell_s = 0.2",
            "dwell_s = 0.2\nhold_bad_cycles = -1",
            "hold_bad_cycles",
        ),
        (
            "moves = [10.0, -10.0, 0.0]",
            "moves = [10.0, 60.0]",
            "axis[0].moves[1]",
        ),
        (
            "moves = [10.0, -10.0, 0.0]",
            "moves = [nan]",
            "axis[0].moves[0]",
        ),
        ("dwell_s = 0.2", "dwell_s = -1.0", "axis[0].dwell_s"),
        (
            "from = 0.0, to = 5.0",
            "from = 5.0, to = 5.0",
            "axis[1].profile.to",
        ),
        ("dwell_s = 0.5", "dwell_s = 1e9", "axis[1].profile.dwell_s"),
        ("cycles = 3", "cycles = 3, speed = 1", "unknown field"),
        (
            "mode = \"csv\"",
            "moves = [1.0]\nmode = \"csv\"",
            "axis[1].profile",
        ),
    ] {
        let t = AXES.replacen(from, to, 1);
        assert_ne!(t, AXES, "{from}");
        let e = err(&t);
        assert!(e.contains(want), "{to}: {e}");
    }
}
