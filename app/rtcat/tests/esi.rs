//! `rtcat esi` on the shipped ESI files of `examples/coe` and the crate's hand-made test files:
//! the listing, `--json`, `--emit-config` (parsed back as TOML) and the exit codes.

use std::path::PathBuf;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_rtcat");

fn example(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/coe")
        .join(name);
    p.display().to_string()
}

fn data(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../esi/tests/data")
        .join(name);
    p.display().to_string()
}

fn esi(args: &[&str]) -> Output {
    Command::new(BIN).arg("esi").args(args).output().unwrap()
}

fn ok(args: &[&str]) -> String {
    let o = esi(args);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// Exit 2 with one `rtcat: ` line on stderr containing every `want`.
fn usage(args: &[&str], want: &[&str]) {
    let o = esi(args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert!(o.stdout.is_empty(), "{args:?}: nothing on stdout");
    for w in want {
        assert!(err.contains(w), "{args:?}: {err} (want {w:?})");
    }
}

#[test]
fn listing_of_the_shipped_files() {
    let s = ok(&[&example("SERVO-COE.xml")]);
    assert!(
        s.starts_with("SERVO-COE  product 0x00030003  revision 0x00000001"),
        "{s}"
    );
    assert!(s.contains("PDO assign, PDO config"), "{s}");
    assert!(s.contains("SM0  0x1000  128 bytes"), "{s}");
    assert!(s.contains("0x1600 \"RxPDO 1\"  SM2  16 bits"), "{s}");
    assert!(s.contains("0x6040:00   16  UINT    Controlword"), "{s}");
    assert!(s.contains("0x6041:00   16  UINT    Statusword"), "{s}");
    assert!(s.contains("dictionary: "), "{s}");
    let s = ok(&[&example("DIO8-COE.xml")]);
    assert!(
        s.contains("0x1600 \"Outputs\"  SM2  8 bits  [fixed, mandatory]"),
        "{s}"
    );
    let s = ok(&[&example("AI4-COE.xml")]);
    assert!(
        s.contains("0x1A02 \"AI Channel 3\"  not assigned  32 bits  [fixed]"),
        "{s}"
    );
    assert!(s.contains("0x0000:00   14  (padding)"), "{s}");
    assert!(s.contains("RxPDOs (outputs): none"), "{s}");
}

#[test]
fn several_devices_are_listed_and_selected() {
    let f = data("two-devices.xml");
    let s = ok(&[&f]);
    assert!(s.contains("2 devices, 1 modules"), "{s}");
    assert!(
        s.contains("EX3102  0x0C1E3052  0x00100000  EX3102 2Ch. Ana. Input"),
        "{s}"
    );
    assert!(
        s.contains("EX3102  0x0C1E3052  0x00110000  EX3102 2K. Ana. Eingang"),
        "{s}"
    );
    assert!(s.contains("module EX3102-CH (0x00001000): Channel"), "{s}");
    // Issue 31, item 6: the listing says the devices differ only by revision.
    assert!(
        s.contains(
            "EX3102 comes in 2 revisions (0x00100000, 0x00110000): choose one with --revision REV."
        ),
        "{s}"
    );
    let s = ok(&[&f, "--product", "#x0c1e3052", "--revision", "0x00110000"]);
    assert!(
        s.starts_with("EX3102  product 0x0C1E3052  revision 0x00110000"),
        "{s}"
    );
    assert!(!s.contains("0x00100000"), "{s}");
    // --revision alone selects too.
    let s = ok(&[&f, "--revision", "0x00100000"]);
    assert!(
        s.starts_with("EX3102  product 0x0C1E3052  revision 0x00100000"),
        "{s}"
    );
    assert!(!s.contains("0x00110000"), "{s}");
    // Both revisions share the type name: both shown.
    let s = ok(&[&f, "--device", "ex3102"]);
    assert_eq!(s.matches("product 0x0C1E3052").count(), 2, "{s}");
    assert!(s.contains("[fixed, excludes 0x1A01]"), "{s}");
    // --emit-config needs one device.
    usage(
        &[&f, "--emit-config", "0x1A02"],
        &[
            "2 devices match (EX3102 rev 0x00100000, EX3102 rev 0x00110000)",
            "they differ only by revision: choose one with --revision REV",
        ],
    );
    usage(
        &[&f, "--device", "EX3102", "--emit-config", "0x1A02"],
        &["they differ only by revision: choose one with --revision REV"],
    );
    // An exclusion between chosen PDOs.
    usage(
        &[
            &f,
            "--revision",
            "0x100000",
            "--emit-config",
            "0x1A00",
            "0x1A01",
            "0x1A02",
        ],
        &["EX3102: PDO 0x1A00 excludes 0x1A01 (its Exclude list)"],
    );
    let s = ok(&[
        &f,
        "--revision",
        "#x00100000",
        "--emit-config",
        "0x1A00",
        "0x1A02",
    ]);
    assert!(s.contains("pdo_assign = { sm3 = [0x1A00, 0x1A02] }"), "{s}");
}

#[test]
fn json_is_the_model() {
    let s = ok(&[&example("SERVO-COE.xml"), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&s).unwrap();
    assert_eq!(v["vendor"]["id"], 0x766);
    let d = &v["devices"][0];
    assert_eq!(d["name"], "SERVO-COE");
    assert_eq!(d["rx_pdos"][0]["index"], 0x1600);
    assert_eq!(d["tx_pdos"][0]["entries"][0]["name"], "Statusword");
    assert_eq!(d["mailbox"]["coe"]["pdo_config"], true);
    assert!(d["dictionary"]["objects"].as_array().unwrap().len() > 10);
    // Filtered by the selector.
    let s = ok(&[
        &data("two-devices.xml"),
        "--json",
        "--revision",
        "0x00110000",
    ]);
    let v: serde_json::Value = serde_json::from_str(&s).unwrap();
    assert_eq!(v["devices"].as_array().unwrap().len(), 1);
    assert_eq!(v["devices"][0]["revision"], 0x0011_0000);
    assert_eq!(v["modules"][0]["name"], "EX3102-CH");
}

fn device_of(block: &str) -> toml::Table {
    let t: toml::Table = toml::from_str(block).unwrap_or_else(|e| panic!("{e}\n{block}"));
    let devs = t["device"].as_array().unwrap();
    assert_eq!(devs.len(), 1, "{block}");
    devs[0].as_table().unwrap().clone()
}

fn ints(v: &toml::Value) -> Vec<i64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_integer().unwrap())
        .collect()
}

fn map_entries(d: &toml::Table, index: i64) -> Vec<(String, Option<String>)> {
    let m = d["pdo_map"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["index"].as_integer() == Some(index))
        .unwrap_or_else(|| panic!("no pdo_map 0x{index:04X}"));
    m["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| match e {
            toml::Value::String(s) => (s.clone(), None),
            t => (
                t["entry"].as_str().unwrap().to_string(),
                t.get("name").and_then(|n| n.as_str()).map(str::to_string),
            ),
        })
        .collect()
}

#[test]
fn emitted_configuration_has_the_contract_keys_and_sizes() {
    // The servo's ESI describes its default mapping: controlword / statusword.
    let d = device_of(&ok(&[
        &example("SERVO-COE.xml"),
        "--emit-config",
        "0x1600",
        "0x1A00",
    ]));
    assert_eq!(d["vendor_id"].as_integer(), Some(0x766));
    assert_eq!(d["product_id"].as_integer(), Some(0x0003_0003));
    assert_eq!(d["revision"].as_integer(), Some(1));
    assert_eq!(d["name"].as_str(), Some("SERVO-COE"));
    assert_eq!(
        (
            d["output_bytes"].as_integer(),
            d["input_bytes"].as_integer()
        ),
        (Some(2), Some(2))
    );
    let a = d["pdo_assign"].as_table().unwrap();
    assert_eq!(
        (ints(&a["sm2"]), ints(&a["sm3"])),
        (vec![0x1600], vec![0x1A00])
    );
    assert_eq!(
        map_entries(&d, 0x1600),
        vec![("0x6040:00:16".into(), Some("Controlword".into()))]
    );
    assert_eq!(
        map_entries(&d, 0x1A00),
        vec![("0x6041:00:16".into(), Some("Statusword".into()))]
    );
    for k in d.keys() {
        assert!(
            [
                "vendor_id",
                "product_id",
                "revision",
                "name",
                "input_bytes",
                "output_bytes",
                "pdo_assign",
                "pdo_map"
            ]
            .contains(&k.as_str()),
            "key {k} is not in the [[device]] format"
        );
    }

    // AI4: all four channels assigned, fixed mappings not written; 16 bytes in, none out.
    let ai = ok(&[
        &example("AI4-COE.xml"),
        "--emit-config",
        "0x1A00",
        "0x1A01",
        "0x1A02",
        "0x1A03",
    ]);
    let d = device_of(&ai);
    assert_eq!(
        (
            d["output_bytes"].as_integer(),
            d["input_bytes"].as_integer()
        ),
        (Some(0), Some(16))
    );
    let a = d["pdo_assign"].as_table().unwrap();
    assert_eq!(ints(&a["sm3"]), vec![0x1A00, 0x1A01, 0x1A02, 0x1A03]);
    assert!(
        a.get("sm2").is_none(),
        "the AI4 has no RxPDOs: 0x1C12 left alone"
    );
    assert!(d.get("pdo_map").is_none(), "{ai}");

    // DIO8: nothing writable: identity and sizes only.
    let dio = ok(&[
        &example("DIO8-COE.xml"),
        "--emit-config",
        "0x1600",
        "0x1A00",
    ]);
    let d = device_of(&dio);
    assert!(
        d.get("pdo_assign").is_none() && d.get("pdo_map").is_none(),
        "{dio}"
    );
    assert_eq!(
        (
            d["output_bytes"].as_integer(),
            d["input_bytes"].as_integer()
        ),
        (Some(1), Some(1))
    );
}

#[test]
fn bad_input_exits_2_naming_the_value() {
    let servo = example("SERVO-COE.xml");
    usage(&["no-such-file.xml"], &["no-such-file.xml", "No such file"]);
    usage(
        &[&servo, "--device", "EL3102"],
        &["no device \"EL3102\"", "SERVO-COE (0x00030003)"],
    );
    usage(
        &[&servo, "--product", "0x42"],
        &["no product code 0x00000042"],
    );
    usage(
        &[&servo, "--product", "zz"],
        &["\"zz\" is not a 32-bit number"],
    );
    usage(&[&servo, "--revision", "7"], &["no revision 0x00000007"]);
    usage(
        &[&servo, "--emit-config", "0x1234"],
        &["SERVO-COE: 0x1234 is not a PDO index"],
    );
    usage(
        &[&servo, "--emit-config", "0x10000"],
        &["\"0x10000\" is not a PDO index"],
    );
    usage(
        &[&servo, "--emit-config", "#xZZ"],
        &["\"#xZZ\" is not a number"],
    );
    usage(
        &[&servo, "--emit-config", "0x1602"],
        &["SERVO-COE: PDO 0x1602 is not in its ESI"],
    );
    usage(&[&servo, "--emit-config"], &["--emit-config"]);
    usage(
        &[&servo, "--json", "--emit-config", "0x1600"],
        &["cannot be used with"],
    );
    usage(
        &[&example("DIO8-COE.xml"), "--emit-config", "0x1600"],
        &["0x1A00 \"Inputs\" is mandatory"],
    );
    usage(
        &[&data("bad-number.xml")],
        &["bad-number.xml:18: Device/RxPdo/Entry/Index: \"#xZZ\" is not a number"],
    );
    usage(
        &[&data("unclosed.xml")],
        &["unclosed.xml:25: not well-formed XML"],
    );
    let dir = tempfile::tempdir().unwrap();
    usage(
        &[&dir.path().display().to_string()],
        &["not a regular file"],
    );
}

/// What `--emit-config` prints is a configuration the master takes (its own parser and
/// validation, as `rtcat config check` runs them), for every shipped device.
#[test]
fn emitted_configuration_is_valid_for_the_master() {
    for (file, pdos) in [
        ("SERVO-COE.xml", &["0x1600", "0x1A00"][..]),
        ("AI4-COE.xml", &["0x1A00", "0x1A01", "0x1A02", "0x1A03"][..]),
        ("AI4-COE.xml", &["0x1A02"][..]),
        ("DIO8-COE.xml", &["0x1600", "0x1A00"][..]),
        ("../sm01/SM01-TERMINALS.xml", &["--device", "DO16-SM01"][..]),
        ("../sm01/SM01-TERMINALS.xml", &["--device", "DIO8-SM01"][..]),
    ] {
        let mut args = vec![example(file), "--emit-config".to_string()];
        args.extend(pdos.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let text = ok(&args);
        let cfg = rtcat_master::Config::parse(&text, file)
            .unwrap_or_else(|e| panic!("{file} {pdos:?}: {e}\n{text}"));
        assert_eq!(cfg.device.len(), 1, "{file}");
    }
}

// Issue 26, item 8: an entry of BitLen 0 (or above 64) is never emitted into a mapping that
// `config check` refuses; the PDO is assigned and its mapping left to the device.
#[test]
fn entries_the_master_cannot_map_are_not_emitted() {
    let xml = std::fs::read_to_string(example("SERVO-COE.xml")).unwrap();
    for bits in ["0", "65"] {
        let i = xml.find("<RxPdo Sm=\"2\">").unwrap();
        let j = i + xml[i..].find("<BitLen>16</BitLen>").unwrap();
        let bad = format!(
            "{}<BitLen>{bits}</BitLen>{}",
            &xml[..j],
            &xml[j + "<BitLen>16</BitLen>".len()..]
        );
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("bad.xml");
        std::fs::write(&f, bad).unwrap();
        let text = ok(&[f.to_str().unwrap(), "--emit-config", "0x1600", "0x1A00"]);
        assert!(text.contains(&format!("has BitLen {bits}")), "{text}");
        rtcat_master::Config::parse(&text, "emitted").unwrap_or_else(|e| panic!("{e}\n{text}"));
    }
}

/// `rtcat esi` with its stderr (for the warnings), exit 0.
fn ok_err(args: &[&str]) -> (String, String) {
    let o = esi(args);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(0), "{args:?}: {err}");
    (String::from_utf8(o.stdout).unwrap(), err)
}

// Issue 31, items 1 and 7: passive devices listed and refused for configuration by name; the
// active ones of the same file shown; SM0/SM1 process data refused saying what the device is.
#[test]
fn passive_devices_and_mailboxless_terminals() {
    let f = data("passive.xml");
    let s = ok(&[&f]);
    assert!(s.contains("2 devices, 2 passive, 0 modules"), "{s}");
    assert!(
        s.contains(
            "EX9011  passive (no ESC: not on the bus, not configured)  EX9011 Bus end cover cap"
        ),
        "{s}"
    );
    assert!(s.contains("EX1008  0x03F03052  0x00120000"), "{s}");
    let s = ok(&[&f, "--device", "EX1008"]);
    assert!(s.contains("mailbox: none"), "{s}");
    usage(
        &[&f, "--device", "ex9100", "--emit-config", "0x1600"],
        &["EX9100 (EX9100 Potential feed terminal 24 V, line 28) is a passive device"],
    );
    // A terminal without a mailbox: its SII's assignment (SM0), with or without the PDOs named.
    for args in [&[][..], &["0x1A00"][..]] {
        let mut a = vec![f.as_str(), "--device", "EX1008", "--emit-config"];
        a.extend_from_slice(args);
        let text = ok(&a);
        assert!(text.contains("pdo_assign = { sm0 = [0x1A00] }"), "{text}");
        let cfg = rtcat_master::Config::parse(&text, "emitted").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cfg.device[0].input_bytes, Some(1));
    }
}

// Issue 31, items 2 and 6: a one-digit DefaultData is a warning on stderr, the output is the
// same; a PDO without entries is assigned without an empty mapping, and the master takes it.
#[test]
fn odd_hex_warns_and_empty_pdos_are_assigned_only() {
    let f = data("odd-hex.xml");
    let (s, err) = ok_err(&[&f]);
    assert!(s.starts_with("EXD-100  product 0x00040001"), "{s}");
    assert!(
        err.contains("rtcat: warning: odd-hex.xml:85: Device/Profile/Dictionary/Objects/Object/Info/DefaultData: object 0x6061: \"2\" has one hex digit"),
        "{err}"
    );
    let (text, _) = ok_err(&[&f, "--emit-config", "0x1600", "0x1601", "0x1A00"]);
    assert!(!text.contains("entries = [\n]"), "{text}");
    assert!(
        text.contains("pdo_assign = { sm2 = [0x1600, 0x1601], sm3 = [0x1A00] }"),
        "{text}"
    );
    let cfg =
        rtcat_master::Config::parse(&text, "odd-hex").unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(cfg.device[0].pdo_map.len(), 2, "{text}");
}

// Issue 31, item 5: an SoE drive's AT/MDT indices pass argument parsing; the device is named.
#[test]
fn an_soe_drive_is_named_for_its_profile() {
    let f = data("soe.xml");
    let s = ok(&[&f]);
    assert!(
        s.contains("profile: this is a SoE (Servo Drive over EtherCAT) device; rtcat supports CoE"),
        "{s}"
    );
    assert!(s.contains("0x0018 \"MDT\"  SM2  16 bits  [fixed]"), "{s}");
    usage(
        &[&f, "--emit-config", "0x0018", "0x0010"],
        &["EXS-501: this is a SoE (Servo Drive over EtherCAT) device; rtcat supports CoE"],
    );
}

// Issue 31, items 3 and 4: a coupler whose modules are in a referenced module file, and a
// two-axis drive: slots listed with the modules they accept; --slot chooses the module set and
// the block is one the master takes.
#[test]
fn modular_devices_list_slots_and_emit_a_chosen_module_set() {
    let c = data("modular/coupler.xml");
    let s = ok(&[&c]);
    assert!(
        s.contains("slots (modular device; per slot number: PDO index +0x1, object index +0x10):"),
        "{s}"
    );
    assert!(
        s.contains("slot 0..3 \"I/O module\"  1..4 module(s): accepts EXM-DI8 (0x00001008, default), EXM-DO8 (0x00002008)"),
        "{s}"
    );
    let text = ok(&[
        &c,
        "--emit-config",
        "--slot",
        "0=EXM-DI8",
        "--slot",
        "1=#x2008",
        "--slot",
        "3=exm-di8",
    ]);
    let d = device_of(&text);
    let a = d["pdo_assign"].as_table().unwrap();
    assert_eq!(
        (ints(&a["sm2"]), ints(&a["sm3"])),
        (vec![0x1601], vec![0x1BFF, 0x1A00, 0x1A03]),
        "{text}"
    );
    assert_eq!(
        (
            d["output_bytes"].as_integer(),
            d["input_bytes"].as_integer()
        ),
        (Some(1), Some(4))
    );
    assert_eq!(
        map_entries(&d, 0x1601),
        vec![("0x7010:01:8".into(), Some("Outputs".into()))]
    );
    rtcat_master::Config::parse(&text, "coupler").unwrap_or_else(|e| panic!("{e}\n{text}"));

    let f = data("modular-drive.xml");
    let text = ok(&[
        &f,
        "--emit-config",
        "--slot",
        "0=CSP-AXIS",
        "--slot",
        "1=CSV-AXIS",
    ]);
    let d = device_of(&text);
    assert_eq!(
        map_entries(&d, 0x1611),
        vec![
            ("0x6840:00:16".into(), Some("Controlword".into())),
            ("0x68FF:00:32".into(), Some("Target velocity".into()))
        ]
    );
    rtcat_master::Config::parse(&text, "drive").unwrap_or_else(|e| panic!("{e}\n{text}"));
    usage(
        &[&f, "--emit-config", "--slot", "1=CSV-AXIS"],
        &["EXD-200: slot \"Axis A\" needs at least 1 module(s)"],
    );
    usage(&[&f, "--slot", "0=CSP-AXIS"], &["--emit-config"]);
    usage(
        &[&f, "--emit-config", "--slot", "zero"],
        &["\"zero\" is not N=MODULE"],
    );
    usage(
        &[
            &example("SERVO-COE.xml"),
            "--emit-config",
            "0x1600",
            "0x1A00",
            "--slot",
            "0=X",
        ],
        &["SERVO-COE has no slots (not a modular device)"],
    );
}
