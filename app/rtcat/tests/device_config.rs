//! `[[device]]` through the binary: what `rtcat config check` refuses offline exits 2 naming the
//! key and the value; the shipped CoE example passes.

use std::process::Command;

fn rtcat() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rtcat"))
}

const EXAMPLE: &str = include_str!("../../../examples/coe/rtcat.toml");

#[test]
fn the_coe_example_passes_config_check() {
    let f = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/coe/rtcat.toml");
    let out = rtcat().args(["config", "check", f]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn bad_device_configurations_exit_2_naming_device_and_object() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("bad.toml");
    for (what, text, want) in [
        (
            "a value out of range",
            EXAMPLE.replace("value = 50000", "value = 5000000000"),
            "device[1].sdo[1].value = 5000000000 (u32): value \"5000000000\" is not a u32: out of range",
        ),
        (
            "a type mismatch (the value)",
            EXAMPLE.replace("value = 8\n", "value = \"CSP\"\n"),
            "device[1].sdo[0].value = \"CSP\" (i8): value \"CSP\" is not a i8: not an integer",
        ),
        (
            "a type mismatch (an i8 object mapped as 16 bits)",
            EXAMPLE
                .replace("\"0x6060:00:8\"", "\"0x6060:00:16\"")
                .replace("output_bytes = 11", "output_bytes = 12"),
            "device[1].pdo_map[0].entries[3] = \"0x6060:00:16\": 16 bits, but device[1].sdo[0] \
             writes 0x6060:00 as i8 (8 bits)",
        ),
        (
            "a mapping larger than the SM",
            EXAMPLE.replace("input_bytes = 11", "input_bytes = 8"),
            "device[1].input_bytes = 8: the PDOs assigned to sm3 map 88 bits (11 bytes)",
        ),
        (
            "a malformed entry",
            EXAMPLE.replace("\"0x607A:00:32\"", "\"0x607A:32\""),
            "device[1].pdo_map[0].entries[1] = \"0x607A:32\"",
        ),
    ] {
        assert_ne!(
            text, EXAMPLE,
            "{what}: the replacement must change the file"
        );
        std::fs::write(&f, &text).unwrap();
        let out = rtcat().args(["config", "check"]).arg(&f).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{what}: {err}");
        assert!(err.contains(want), "{what}: {err}\nwanted {want}");
    }
}

/// What only the subdevice can refuse fails the bring-up at run time: exit 1, naming the
/// subdevice, the object and the abort; the example itself runs.
#[test]
fn a_write_the_subdevice_refuses_exits_1_naming_device_object_and_abort() {
    let dir = tempfile::tempdir().unwrap();
    let top = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let segment = format!("{top}/examples/coe/segment.toml");
    let bench = |config: &std::path::Path| {
        rtcat()
            .args([
                "bench",
                "--sim",
                "--no-rt",
                "--duration",
                "1",
                "--segment",
                &segment,
            ])
            .arg("--config")
            .arg(config)
            .arg("--out")
            .arg(dir.path().join("out"))
            .output()
            .unwrap()
    };
    let good = std::path::PathBuf::from(format!("{top}/examples/coe/rtcat.toml"));
    let out = bench(&good);
    assert!(
        out.status.success(),
        "the example: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        EXAMPLE.replace(
            "[[device.sdo]]\nindex = 0x6085",
            "[[device.sdo]]\nindex = 0x2000\nsub = 0\ntype = \"u16\"\nvalue = 5\n\n\
             [[device.sdo]]\nindex = 0x6085",
        ),
    )
    .unwrap();
    let out = bench(&bad);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    for want in [
        "subdevice at position 2 (SERVO-COE, device[1])",
        "write 0x2000:00 = 5 (u16)",
        "0x06020000: The object does not exist in the object directory",
    ] {
        assert!(err.contains(want), "{err}\nwanted {want}");
    }
}
