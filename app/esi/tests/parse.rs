//! The shipped ESI files of `examples/coe` against the segment they describe, the hand-made
//! vendor-like and malformed files of `tests/data`, the configuration emitter, and a fuzz over
//! mutated versions of the shipped files.

use proptest::prelude::*;
use rtcat_esi::{AccessKind, DefaultValue, Device, Error, EsiFile, PdoMapping, parse, read_file};
use std::path::PathBuf;

mod mutate;
use mutate::{apply, edit};

fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/coe")
        .join(name)
}

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn one(f: &EsiFile) -> &Device {
    assert_eq!(f.devices.len(), 1, "{:?}", f.devices);
    &f.devices[0]
}

/// 1-based line of the first line of `path` containing `needle`.
fn line_of(path: &PathBuf, needle: &str) -> u32 {
    let text = std::fs::read_to_string(path).unwrap();
    let n = text.lines().position(|l| l.contains(needle)).expect(needle);
    n as u32 + 1
}

fn entries(d: &Device, pdo: u16) -> Vec<(u16, u8, u16, String)> {
    d.pdo(pdo)
        .unwrap()
        .0
        .entries
        .iter()
        .map(|e| (e.index, e.sub, e.bits, e.name.clone()))
        .collect()
}

fn default_u64(d: &Device, index: u16) -> Option<u64> {
    d.dictionary
        .as_ref()
        .unwrap()
        .object(index)
        .unwrap()
        .default
        .as_ref()
        .and_then(DefaultValue::as_u64)
}

#[test]
fn servo_esi_is_the_contract_device() {
    let f = read_file(&example("SERVO-COE.xml")).unwrap();
    assert_eq!(f.vendor.id, 0x0000_0766);
    let d = one(&f);
    assert_eq!(d.name, "SERVO-COE");
    assert_eq!((d.product_code, d.revision), (0x0003_0003, Some(1)));
    let coe = d.coe().unwrap();
    assert!(coe.sdo_info && coe.complete_access && coe.pdo_assign && coe.pdo_config);
    let sms: Vec<(u16, Option<u16>, &str)> = d
        .sync_managers
        .iter()
        .map(|s| (s.start, s.default_size, s.usage.as_str()))
        .collect();
    assert_eq!(sms[0], (0x1000, Some(128), "MBoxOut"));
    assert_eq!(sms[1], (0x1080, Some(128), "MBoxIn"));
    assert_eq!((sms[2].2, sms[3].2), ("Outputs", "Inputs"));
    // The default mapping: controlword / statusword only.
    assert_eq!(
        entries(d, 0x1600),
        vec![(0x6040, 0, 16, "Controlword".into())]
    );
    assert_eq!(
        entries(d, 0x1A00),
        vec![(0x6041, 0, 16, "Statusword".into())]
    );
    assert!(entries(d, 0x1601).is_empty() && entries(d, 0x1A01).is_empty());
    let (p, rx) = d.pdo(0x1600).unwrap();
    assert!(rx && !p.fixed && p.sm == Some(2));
    assert_eq!(d.pdo(0x1601).unwrap().0.sm, None);
    let dict = d.dictionary.as_ref().unwrap();
    assert_eq!(default_u64(d, 0x1000), Some(0x0002_0192));
    assert_eq!(default_u64(d, 0x6085), Some(10000));
    assert_eq!(default_u64(d, 0x6502), Some(0x380));
    for (i, kind, map) in [
        (0x6040, AccessKind::Rw, Some(PdoMapping::R)),
        (0x6041, AccessKind::Ro, Some(PdoMapping::T)),
        (0x6060, AccessKind::Rw, Some(PdoMapping::R)),
        (0x6061, AccessKind::Ro, Some(PdoMapping::T)),
        (0x607A, AccessKind::Rw, Some(PdoMapping::R)),
        (0x6064, AccessKind::Ro, Some(PdoMapping::T)),
        (0x60FF, AccessKind::Rw, Some(PdoMapping::R)),
        (0x606C, AccessKind::Ro, Some(PdoMapping::T)),
        (0x6071, AccessKind::Rw, Some(PdoMapping::R)),
        (0x6077, AccessKind::Ro, Some(PdoMapping::T)),
        (0x6085, AccessKind::Rw, None),
        (0x6502, AccessKind::Ro, None),
    ] {
        let o = dict.object(i).unwrap();
        assert_eq!(o.access.as_ref().unwrap().kind, kind, "0x{i:04X}");
        assert_eq!(o.pdo_mapping, map, "0x{i:04X}");
    }
    // The mapping examples/coe/rtcat.toml asks for: each object exists, may go into PDOs of
    // that direction, and has the size the mapping gives it.
    for (rx, i, bits, ty) in [
        (true, 0x6040, 16, "UINT"),
        (true, 0x607A, 32, "DINT"),
        (true, 0x60FF, 32, "DINT"),
        (true, 0x6060, 8, "SINT"),
        (false, 0x6041, 16, "UINT"),
        (false, 0x6064, 32, "DINT"),
        (false, 0x606C, 32, "DINT"),
        (false, 0x6061, 8, "SINT"),
    ] {
        let o = dict.object(i).unwrap();
        let want = if rx { PdoMapping::R } else { PdoMapping::T };
        assert_eq!(
            (o.pdo_mapping, o.bit_size, o.type_name.as_str()),
            (Some(want), bits, ty)
        );
    }
    assert_eq!(default_u64(d, 0x6060), Some(0));
    // Mapping and assignment writable in PRE-OP only; 8 entries per mapping, 2 PDOs per SM.
    for i in [0x1600, 0x1601, 0x1A00, 0x1A01, 0x1C12, 0x1C13] {
        let a = dict.object(i).unwrap().access.clone().unwrap();
        assert_eq!(
            (a.kind, a.write_restrictions.as_deref()),
            (AccessKind::Rw, Some("PreOP")),
            "0x{i:04X}"
        );
    }
    assert_eq!(dict.object(0x1600).unwrap().sub_items.len(), 9);
    assert_eq!(dict.object(0x1C12).unwrap().sub_items.len(), 3);
    // 0x1600:01 = 0x60400010 (index << 16 | sub << 8 | bits, ETG.1000.6 PDO mapping).
    let s1 = &dict.object(0x1600).unwrap().sub_items[1];
    assert_eq!(s1.default.as_ref().unwrap().as_u64(), Some(0x6040_0010));
    let id = dict.object(0x1018).unwrap();
    let sub = |n: usize| id.sub_items[n].default.as_ref().unwrap().as_u64();
    assert_eq!(
        (sub(1), sub(2), sub(3)),
        (Some(0x766), Some(0x0003_0003), Some(1))
    );
    let c00: Vec<_> = dict.object(0x1C00).unwrap().sub_items[1..]
        .iter()
        .map(|s| s.default.as_ref().unwrap().as_u64())
        .collect();
    assert_eq!(c00, vec![Some(1), Some(2), Some(3), Some(4)]);
    assert!(dict.object(0x1008).unwrap().default == Some(DefaultValue::String("SERVO-COE".into())));
}

#[test]
fn ai4_and_dio8_esis_are_the_contract_devices() {
    let f = read_file(&example("AI4-COE.xml")).unwrap();
    let d = one(&f);
    assert_eq!((d.name.as_str(), d.product_code), ("AI4-COE", 0x0003_0002));
    assert!(d.rx_pdos.is_empty());
    let coe = d.coe().unwrap();
    assert!(coe.pdo_assign && !coe.pdo_config);
    for n in 0..4u16 {
        let base = 0x6000 + 0x10 * n;
        let (p, rx) = d.pdo(0x1A00 + n).unwrap();
        assert!(!rx && p.fixed && p.bits() == 32);
        assert_eq!(p.name, format!("AI Channel {}", n + 1));
        assert_eq!(
            p.sm,
            (n < 2).then_some(3),
            "default assignment 0x1A00, 0x1A01"
        );
        assert_eq!(
            entries(d, 0x1A00 + n),
            vec![
                (base, 1, 1, "Underrange".into()),
                (base, 2, 1, "Overrange".into()),
                (0, 0, 14, String::new()),
                (base, 0x11, 16, "Value".into()),
            ]
        );
        let dict = d.dictionary.as_ref().unwrap();
        let set = dict.object(0x8000 + 0x10 * n).unwrap();
        assert_eq!(set.sub_items[1].name, "Enable filter");
        assert_eq!(set.sub_items[2].name, "Filter settings");
    }
    assert_eq!(default_u64(d, 0x1000), Some(0x1389));
    assert_eq!(d.sync_managers[2].default_size, Some(0));
    assert!(!d.sync_managers[2].enable);

    let f = read_file(&example("DIO8-COE.xml")).unwrap();
    let d = one(&f);
    assert_eq!((d.name.as_str(), d.product_code), ("DIO8-COE", 0x0003_0001));
    let coe = d.coe().unwrap();
    assert!(!coe.pdo_assign && !coe.pdo_config);
    let out: Vec<_> = (1..=8)
        .map(|i| (0x7000, i, 1, format!("Output {i}")))
        .collect();
    let inp: Vec<_> = (1..=8)
        .map(|i| (0x6000, i, 1, format!("Input {i}")))
        .collect();
    assert_eq!(entries(d, 0x1600), out);
    assert_eq!(entries(d, 0x1A00), inp);
    assert!(d.rx_pdos[0].fixed && d.rx_pdos[0].mandatory && d.tx_pdos[0].mandatory);
    let dict = d.dictionary.as_ref().unwrap();
    assert_eq!(
        dict.object(0x1C12).unwrap().access.as_ref().unwrap().kind,
        AccessKind::Ro
    );
}

#[test]
fn two_devices_localized_names_modules() {
    let f = read_file(&data("two-devices.xml")).unwrap();
    assert_eq!(
        f.vendor.name, "Example Automation Ltd",
        "English over the first name"
    );
    assert_eq!(f.groups[0].name, "Analog Input Terminals (EX3xxx)");
    assert_eq!(f.devices.len(), 2);
    let (a, b) = (&f.devices[0], &f.devices[1]);
    assert_eq!((a.name.as_str(), b.name.as_str()), ("EX3102", "EX3102"));
    assert_eq!(
        (a.revision, b.revision),
        (Some(0x0010_0000), Some(0x0011_0000))
    );
    assert_eq!(a.display_name(), "EX3102 2Ch. Ana. Input +/-10V, Diff.");
    assert_eq!(
        b.display_name(),
        "EX3102 2K. Ana. Eingang (Rev. 11)",
        "no English: the first"
    );
    assert_eq!(a.names.len(), 2);
    assert_eq!(a.pdo(0x1A00).unwrap().0.excludes, vec![0x1A01]);
    assert_eq!(a.mailbox.as_ref().unwrap().protocols, vec!["CoE", "FoE"]);
    let p = a.pdo(0x1A02).unwrap().0;
    assert!(p.fixed && p.mandatory, "Fixed=\"true\"");
    assert_eq!(
        (p.entries[1].index, p.entries[1].sub, p.entries[1].bits),
        (0, 0, 8)
    );
    assert!(b.coe().unwrap().pdo_config, "PdoConfig=\"1\"");
    assert_eq!(a.line, line_of(&data("two-devices.xml"), "<Device Physics"));
    assert_eq!(f.modules.len(), 1);
    assert_eq!(f.modules[0].ident, Some(0x1000));
    assert_eq!(f.modules[0].display_name, "Channel");
    assert_eq!(f.modules[0].tx_pdos[0].entries[0].sub, 17);
}

#[test]
fn numbers_in_every_vendor_form() {
    let f = read_file(&data("mixed-numbers.xml")).unwrap();
    assert_eq!(f.vendor.id, 0x9A, "#X");
    let d = one(&f);
    assert_eq!(d.product_code, 198657, "decimal");
    assert_eq!(d.revision, Some(10), "0x");
    let sm: Vec<_> = d
        .sync_managers
        .iter()
        .map(|s| (s.start, s.control_byte))
        .collect();
    assert_eq!(
        sm,
        vec![
            (0x1000, Some(38)),
            (0x1080, Some(0x22)),
            (0x1100, Some(0x64)),
            (0x1180, Some(0x20))
        ]
    );
    assert_eq!(d.sync_managers[0].default_size, Some(0x80));
    let p = d.pdo(5632).unwrap().0;
    assert_eq!((p.index, p.fixed, p.mandatory), (0x1600, false, false));
    assert_eq!((p.entries[0].index, p.entries[0].bits), (0x6040, 16));
    assert_eq!(
        (p.entries[1].index, p.entries[1].sub, p.entries[1].bits),
        (0, 0, 8),
        "<SubIndex/>"
    );
    assert!(
        d.sync_managers.iter().all(|s| s.enable),
        "Enable=\"1\" and Enable=\"true\""
    );
    let dict = d.dictionary.as_ref().unwrap();
    let arr = dict.data_type("DT1C12ARR").unwrap();
    assert_eq!(arr.array.map(|a| (a.lbound, a.elements)), Some((1, 2)));
    assert_eq!(arr.base_type.as_deref(), Some("UINT"));
    let rec = dict.data_type("DT1C12").unwrap();
    assert_eq!(rec.sub_items[1].sub_idx, None);
    assert_eq!(rec.sub_items[1].bit_offset, 16);
    let cw = dict.object(0x6040).unwrap();
    assert_eq!(cw.default, Some(DefaultValue::Value("#x0006".into())));
    assert_eq!(cw.default.as_ref().unwrap().as_u64(), Some(6));
    let assign = dict.object(0x1C12).unwrap();
    assert_eq!(
        assign.sub_items[1].default,
        Some(DefaultValue::Data(vec![0x00, 0x16]))
    );
    assert_eq!(
        assign.sub_items[1].default.as_ref().unwrap().as_u64(),
        Some(0x1600),
        "LE"
    );
}

#[test]
fn iso_8859_1_is_decoded() {
    let path = data("latin1.xml");
    let raw = std::fs::read(&path).unwrap();
    assert!(
        std::str::from_utf8(&raw).is_err(),
        "the test file must not be UTF-8"
    );
    let f = read_file(&path).unwrap();
    assert_eq!(f.vendor.name, "Gr\u{fc}n & S\u{f6}hne GmbH");
    let d = one(&f);
    assert_eq!(d.display_name(), "4 Ausg\u{e4}nge, Schlie\u{df}er");
    assert_eq!(d.rx_pdos[0].entries[0].name, "Ausg\u{e4}nge 1..4");
    // The same bytes without the declaration are not UTF-8: refused with the line.
    let text = String::from_utf8_lossy(&raw).into_owned();
    let undeclared = raw
        .strip_prefix(b"<?xml version=\"1.0\" encoding=\"ISO-8859-1\"?>".as_slice())
        .unwrap();
    let e = parse(undeclared, "x.xml").unwrap_err();
    let want = text.lines().position(|l| l.contains("<Name>Gr")).unwrap() as u32 + 1;
    assert!(
        matches!(&e, Error::Encoding { line, .. } if *line == want),
        "{e} (want line {want})"
    );
    assert!(e.to_string().contains("ISO-8859-1"), "{e}");
}

/// Each malformed file fails with its name, the line and the element path.
#[test]
fn malformed_files_name_element_and_line() {
    for (file, needle, path, why) in [
        (
            "bad-number.xml",
            "#xZZ",
            "Device/RxPdo/Entry/Index",
            "\"#xZZ\" is not a number",
        ),
        (
            "missing-index.xml",
            "<RxPdo",
            "Device/RxPdo/Index",
            "missing",
        ),
        (
            "no-bitlen.xml",
            "<Entry>",
            "Device/RxPdo/Entry/BitLen",
            "missing",
        ),
        (
            "bad-attribute.xml",
            "Sm=\"two\"",
            "Device/RxPdo@Sm",
            "\"two\" is not a number",
        ),
    ] {
        let p = data(file);
        let e = read_file(&p).unwrap_err();
        let line = line_of(&p, needle);
        assert_eq!(
            e.to_string(),
            format!("{file}:{line}: {path}: {why}"),
            "{file}"
        );
    }
    let p = data("unclosed.xml");
    let e = read_file(&p).unwrap_err();
    let line = line_of(&p, "</Device>");
    let s = e.to_string();
    assert!(matches!(e, Error::Xml { .. }), "{s}");
    assert!(
        s.starts_with(&format!("unclosed.xml:{line}: not well-formed XML")),
        "{s}"
    );
    assert!(s.contains("'RxPdo'"), "names the unclosed element: {s}");
}

#[test]
fn other_bad_inputs_are_errors_not_panics() {
    let cases: &[(&str, &str)] = &[
        ("", "not well-formed"),
        ("<a/>", "neither EtherCATInfo nor EtherCATModule"),
        ("<EtherCATInfo/>", "Vendor: missing"),
        (
            "<EtherCATInfo><Vendor><Id>1</Id></Vendor></EtherCATInfo>",
            "Descriptions: missing",
        ),
        (
            "<EtherCATInfo><Vendor><Id>#x1FFFFFFFF</Id></Vendor><Descriptions/></EtherCATInfo>",
            "Vendor/Id: #x1FFFFFFFF is out of range for a 32-bit value",
        ),
        (
            "<EtherCATInfo><Vendor><Id>1</Id></Vendor><Descriptions><Devices><Device>\
             <Type>X</Type><Sm StartAddress='#x1000'>MBoxOut</Sm></Device></Devices>\
             </Descriptions></EtherCATInfo>",
            "Device/Type@ProductCode: missing (the device has sync managers",
        ),
        (
            "<EtherCATInfo><Vendor><Id>1</Id></Vendor><Descriptions><Devices><Device>\
             <Type ProductCode='1'>X</Type><RxPdo Fixed='yes'><Index>#x1600</Index></RxPdo>\
             </Device></Devices></Descriptions></EtherCATInfo>",
            "Device/RxPdo@Fixed: \"yes\" is not a boolean",
        ),
        (
            "<EtherCATInfo><Vendor><Id>1</Id></Vendor><Descriptions><Devices><Device>\
             <Type ProductCode='1'>X</Type><RxPdo><Index>#x1600</Index><Entry><Index>1</Index>\
             <SubIndex>256</SubIndex><BitLen>8</BitLen></Entry></RxPdo>\
             </Device></Devices></Descriptions></EtherCATInfo>",
            "Device/RxPdo/Entry/SubIndex: 256 is out of range for a 8-bit value",
        ),
        (
            "<EtherCATInfo><Vendor><Id>1</Id></Vendor><Descriptions><Devices><Device>\
             <Type ProductCode='1'>X</Type><Profile><Dictionary><Objects><Object>\
             <Index>#x1000</Index><Name>x</Name><Type>UDINT</Type><BitSize>32</BitSize>\
             <Info><DefaultData>123</DefaultData></Info></Object></Objects></Dictionary>\
             </Profile></Device></Devices></Descriptions></EtherCATInfo>",
            "DefaultData: \"123\" has an odd number of hex digits (3): which byte lacks a \
             digit is ambiguous",
        ),
        (
            "<EtherCATInfo><Vendor><Id>1</Id></Vendor><Descriptions><Devices><Device>\
             <Type ProductCode='1'>X</Type><Profile><Dictionary><Objects><Object>\
             <Index>#x1000</Index><Name>x</Name><Type>UDINT</Type><BitSize>32</BitSize>\
             <Flags><Access>rx</Access></Flags></Object></Objects></Dictionary>\
             </Profile></Device></Devices></Descriptions></EtherCATInfo>",
            "Flags/Access: \"rx\" is not ro, rw or wo",
        ),
        (
            "<EtherCATInfo><Vendor><Id>1</Id></Vendor><Descriptions><Devices><Device>\
             <Type ProductCode='1'>X</Type><Profile><Dictionary><Objects><Object>\
             <Index>#x1000</Index><Name>x</Name><Type>UDINT</Type><BitSize>32</BitSize>\
             <Info><DefaultData>1g</DefaultData></Info></Object></Objects></Dictionary>\
             </Profile></Device></Devices></Descriptions></EtherCATInfo>",
            "DefaultData: \"1g\" is not hex data",
        ),
        (
            "<!DOCTYPE x [<!ENTITY a 'aaaa'>]><EtherCATInfo/>",
            "not well-formed XML",
        ),
        (
            "<?xml version='1.0' encoding='EBCDIC'?><EtherCATInfo/>",
            "\"ebcdic\" is not supported",
        ),
    ];
    for (xml, want) in cases {
        let e = parse(xml.as_bytes(), "t.xml").unwrap_err().to_string();
        assert!(e.starts_with("t.xml:"), "{e}");
        assert!(e.contains(want), "{xml}: {e} (want {want:?})");
    }
    // Deep nesting inside an unread element: no stack overflow, a parse or an error.
    let deep = format!(
        "<EtherCATInfo><Vendor><Id>1</Id></Vendor><Descriptions>{}{}</Descriptions></EtherCATInfo>",
        "<x>".repeat(100_000),
        "</x>".repeat(100_000)
    );
    let _ = parse(deep.as_bytes(), "deep.xml");
}

#[test]
fn read_file_refuses_a_fifo_and_names_a_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("esi.xml");
    nix_mkfifo(&fifo);
    let e = read_file(&fifo).unwrap_err();
    assert!(
        e.is_input() && e.to_string().contains("not a regular file"),
        "{e}"
    );
    let e = read_file(&dir.path().join("none.xml")).unwrap_err();
    assert!(e.is_input() && e.to_string().contains("none.xml"), "{e}");
}

fn nix_mkfifo(p: &std::path::Path) {
    let st = std::process::Command::new("mkfifo")
        .arg(p)
        .status()
        .unwrap();
    assert!(st.success());
}

fn servo() -> Device {
    one(&read_file(&example("SERVO-COE.xml")).unwrap()).clone()
}

#[test]
fn config_for_checks_the_chosen_pdos() {
    let f = read_file(&data("two-devices.xml")).unwrap();
    let a = &f.devices[0];
    let e = a
        .config_for(&[0x1A00, 0x1A01, 0x1A02])
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "EX3102: PDO 0x1A00 excludes 0x1A01 (its Exclude list): choose one of them"
    );
    let e = a.config_for(&[0x1A00]).unwrap_err().to_string();
    assert!(
        e.contains("PDO 0x1A02 \"AI Standard Channel 2\" is mandatory"),
        "{e}"
    );
    let e = a.config_for(&[0x1A02, 0x1A02]).unwrap_err().to_string();
    assert!(e.contains("0x1A02 is chosen twice"), "{e}");
    let e = a.config_for(&[0x1A02, 0x1600]).unwrap_err().to_string();
    assert!(
        e.contains("PDO 0x1600 is not in its ESI (RxPDOs: none; TxPDOs: 0x1A00, 0x1A01, 0x1A02)"),
        "{e}"
    );
    // 0x1A01 has no Sm: it goes to the Inputs SM (SM3) like the others.
    let block = a.config_for(&[0x1A01, 0x1A02]).unwrap();
    assert!(
        block.contains("pdo_assign = { sm3 = [0x1A01, 0x1A02] }"),
        "{block}"
    );
    assert!(block.contains("input_bytes = 5"), "16 + 24 bits: {block}");

    let s = servo();
    let e = s.config_for(&[0x1A07]).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("SERVO-COE: PDO 0x1A07 is not in its ESI"),
        "{e}"
    );
    // No PDO at all: both assignments cleared (the device has PDOs of both directions).
    let block = s.config_for(&[]).unwrap();
    assert!(
        block.contains("pdo_assign = { sm2 = [], sm3 = [] }"),
        "{block}"
    );
    assert!(block.contains("input_bytes = 0"), "{block}");
    let mut s2 = s.clone();
    s2.rx_pdos[1].sm = Some(4);
    let e = s2.config_for(&[0x1600, 0x1601]).unwrap_err().to_string();
    assert!(
        e.contains("RxPDOs 0x1600 (SM2) and 0x1601 (SM4) are on different sync managers"),
        "{e}"
    );
    let e = s2.config_for(&[0x1601]).unwrap_err().to_string();
    assert!(
        e.contains(
            "RxPDO 0x1601 is on SM4: a device with a mailbox has it on SM0/SM1, and an rtcat \
             configuration assigns its RxPDOs to sm2"
        ),
        "{e}"
    );
    let mut big = s.clone();
    big.sync_managers[2].max_size = Some(1);
    let e = big.config_for(&[0x1600]).unwrap_err().to_string();
    assert!(
        e.contains("the chosen RxPDOs take 2 bytes, more than SM2's MaxSize of 1"),
        "{e}"
    );

    // A device without PdoAssign keeps its default PDOs.
    let dio = one(&read_file(&example("DIO8-COE.xml")).unwrap()).clone();
    let mut d = dio.clone();
    d.rx_pdos[0].mandatory = false;
    let e = d.config_for(&[0x1A00]).unwrap_err().to_string();
    assert!(e.contains("PDO assignment is fixed (Mailbox/CoE@PdoAssign is not set): its RxPDOs are always 0x1600"), "{e}");
}

/// A minimal TOML reading of the emitted block: the keys of the `[[device]]` format.
fn device_table(block: &str) -> toml::Table {
    let v: toml::Table = toml::from_str(block).unwrap_or_else(|e| panic!("{e}\n{block}"));
    let devs = v["device"].as_array().unwrap();
    assert_eq!(devs.len(), 1);
    devs[0].as_table().unwrap().clone()
}

#[test]
fn config_for_emits_the_device_format() {
    let block = servo().config_for(&[0x1600, 0x1A00]).unwrap();
    let d = device_table(&block);
    assert_eq!(d["vendor_id"].as_integer(), Some(0x766));
    assert_eq!(d["product_id"].as_integer(), Some(0x0003_0003));
    assert_eq!(d["revision"].as_integer(), Some(1));
    assert_eq!(d["name"].as_str(), Some("SERVO-COE"));
    assert_eq!(d["input_bytes"].as_integer(), Some(2));
    assert_eq!(d["output_bytes"].as_integer(), Some(2));
    let assign = d["pdo_assign"].as_table().unwrap();
    assert_eq!(
        assign["sm2"].as_array().unwrap()[0].as_integer(),
        Some(0x1600)
    );
    assert_eq!(
        assign["sm3"].as_array().unwrap()[0].as_integer(),
        Some(0x1A00)
    );
    let maps = d["pdo_map"].as_array().unwrap();
    assert_eq!(maps.len(), 2);
    assert_eq!(maps[0]["index"].as_integer(), Some(0x1600));
    let e = &maps[0]["entries"].as_array().unwrap()[0];
    assert_eq!(e["entry"].as_str(), Some("0x6040:00:16"));
    assert_eq!(e["name"].as_str(), Some("Controlword"));
    assert_eq!(
        maps[1]["entries"].as_array().unwrap()[0]["entry"].as_str(),
        Some("0x6041:00:16")
    );

    // Fixed PDOs are assigned, not mapped; padding is a plain entry string.
    let f = read_file(&data("two-devices.xml")).unwrap();
    let mut a = f.devices[0].clone();
    for p in &mut a.tx_pdos {
        p.fixed = false;
    }
    a.mailbox.as_mut().unwrap().coe.as_mut().unwrap().pdo_config = true;
    let d = device_table(&a.config_for(&[0x1A02]).unwrap());
    let entries = d["pdo_map"].as_array().unwrap()[0]["entries"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(entries[1].as_str(), Some("0x0000:00:8"));
    assert_eq!(entries[0]["entry"].as_str(), Some("0x3102:02:16"));
    assert!(d.get("output_bytes").is_some() && d["input_bytes"].as_integer() == Some(3));

    // A name needing TOML escapes survives the round trip.
    let mut s = servo();
    s.rx_pdos[0].entries[0].name = "say \"hi\" \\ now".into();
    s.name = "A\"B".into();
    let d = device_table(&s.config_for(&[0x1600, 0x1A00]).unwrap());
    assert_eq!(d["name"].as_str(), Some("A\"B"));
    let e = &d["pdo_map"].as_array().unwrap()[0]["entries"]
        .as_array()
        .unwrap()[0];
    assert_eq!(e["name"].as_str(), Some("say \"hi\" \\ now"));
}

#[test]
fn json_model_serializes() {
    let f = read_file(&example("SERVO-COE.xml")).unwrap();
    let v = serde_json::to_value(&f).unwrap();
    let d = &v["devices"][0];
    assert_eq!(d["product_code"], 0x0003_0003);
    assert_eq!(d["rx_pdos"][0]["entries"][0]["name"], "Controlword");
    let o = d["dictionary"]["objects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["index"] == 0x6502)
        .unwrap();
    assert_eq!(o["default"]["data"], "80030000");
    assert_eq!(o["access"]["kind"], "ro");
}

fn shipped() -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = ["DIO8-COE.xml", "AI4-COE.xml", "SERVO-COE.xml"]
        .iter()
        .map(|n| std::fs::read(example(n)).unwrap())
        .collect();
    // The issue 31 shapes: passive devices, one-digit hex, SoE, slots and module files.
    for n in [
        "passive.xml",
        "odd-hex.xml",
        "soe.xml",
        "modular-drive.xml",
        "modular/coupler.xml",
        "modular/coupler-modules.xml",
    ] {
        v.push(std::fs::read(data(n)).unwrap());
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Never a panic: every mutated file parses or fails with an error naming a line, and
    /// whatever parses can be asked for a configuration of any PDO set.
    #[test]
    fn mutated_shipped_files_never_panic(
        which in 0usize..9,
        edits in proptest::collection::vec(edit(), 1..6),
        pdos in proptest::collection::vec(prop_oneof![0x1600u16..0x1604, 0x1A00u16..0x1A04], 0..5),
    ) {
        let b = apply(shipped()[which].clone(), &edits);
        match parse(&b, "m.xml") {
            Ok(f) => {
                for d in &f.devices {
                    let _ = d.config_for(&pdos);
                    let _ = serde_json::to_string(d);
                    let chosen: Vec<(u32, String)> = f
                        .modules
                        .iter()
                        .enumerate()
                        .map(|(n, m)| (n as u32, m.name.clone()))
                        .collect();
                    if let Ok((m, extra)) = d.with_modules(&f.modules, &chosen) {
                        let _ = m.config_for(&extra);
                    }
                }
            }
            Err(e) => {
                let s = e.to_string();
                prop_assert!(s.starts_with("m.xml:"), "{}", s);
                let line: u32 = s["m.xml:".len()..].split(':').next().unwrap().parse().unwrap();
                prop_assert!(line >= 1 && line as usize <= b.split(|&c| c == b'\n').count(), "{}", s);
            }
        }
    }
}

/// The shipped files are coherent: every mapped entry is an object (or a record's sub-item) of
/// the dictionary with the entry's size, PDO-mappable in the PDO's direction; every PDO's
/// mapping object exists with one sub-index per entry and its default entries.
#[test]
fn shipped_files_are_self_consistent() {
    for name in ["DIO8-COE.xml", "AI4-COE.xml", "SERVO-COE.xml"] {
        let f = read_file(&example(name)).unwrap();
        let d = one(&f);
        let dict = d.dictionary.as_ref().unwrap();
        for (p, rx) in d
            .rx_pdos
            .iter()
            .map(|p| (p, true))
            .chain(d.tx_pdos.iter().map(|p| (p, false)))
        {
            let m = dict
                .object(p.index)
                .unwrap_or_else(|| panic!("{name}: no object 0x{:04X}", p.index));
            let n = m.sub_items[0].default.as_ref().unwrap().as_u64().unwrap();
            assert_eq!(n as usize, p.entries.len(), "{name}: 0x{:04X}:00", p.index);
            for (k, e) in p.entries.iter().enumerate() {
                let word = m.sub_items[k + 1]
                    .default
                    .as_ref()
                    .unwrap()
                    .as_u64()
                    .unwrap();
                let want = (u64::from(e.index) << 16) | (u64::from(e.sub) << 8) | u64::from(e.bits);
                assert_eq!(word, want, "{name}: 0x{:04X}:{:02X}", p.index, k + 1);
                if e.index == 0 {
                    continue;
                }
                let o = dict
                    .object(e.index)
                    .unwrap_or_else(|| panic!("{name}: no 0x{:04X}", e.index));
                let (bits, map) = if e.sub == 0 && o.sub_items.is_empty() {
                    (o.bit_size, o.pdo_mapping)
                } else {
                    let t = dict.data_type(&o.type_name).unwrap();
                    let s = t
                        .sub_items
                        .iter()
                        .find(|s| s.sub_idx == Some(e.sub))
                        .unwrap();
                    (s.bit_size, s.pdo_mapping)
                };
                assert_eq!(
                    bits,
                    u32::from(e.bits),
                    "{name}: 0x{:04X}:{:02X}",
                    e.index,
                    e.sub
                );
                let want = if rx { PdoMapping::R } else { PdoMapping::T };
                assert_eq!(map, Some(want), "{name}: 0x{:04X}:{:02X}", e.index, e.sub);
            }
        }
        // The sync managers' default sizes are the default assignment's.
        let size = |pdos: &[rtcat_esi::Pdo]| -> u16 {
            let bits: u32 = pdos
                .iter()
                .filter(|p| p.sm.is_some())
                .map(|p| p.bits())
                .sum();
            bits.div_ceil(8) as u16
        };
        assert_eq!(
            d.sync_managers[2].default_size,
            Some(size(&d.rx_pdos)),
            "{name}"
        );
        assert_eq!(
            d.sync_managers[3].default_size,
            Some(size(&d.tx_pdos)),
            "{name}"
        );
    }
}

/// An ESI whose root element has `n` attributes besides its own, and whose text has `<` in a
/// comment and `>` and quotes in quoted values (which the attribute scan must step over).
fn with_attributes(n: usize) -> String {
    let attrs: Vec<String> = (0..n).map(|i| format!("a{i}=\"1\"")).collect();
    let xml = std::fs::read_to_string(example("DIO8-COE.xml")).unwrap();
    let open = xml.find("<EtherCATInfo").unwrap();
    let at = open + "<EtherCATInfo".len();
    format!(
        "{}<!-- <x {} --> {} {} q=\"a > b\" r='c \" d'{}",
        &xml[..open],
        "b=\"1\" ".repeat(300),
        &xml[open..at],
        attrs.join(" "),
        &xml[at..]
    )
}

// Issue 26, item 8: parse time is linear in the input: an element with 80 000 attributes
// (0.87 MB; minutes before, roxmltree compares each attribute with every earlier one) is
// refused at once, naming the element and the line; a file at the limit parses.
#[test]
fn an_element_with_too_many_attributes_is_refused_at_once() {
    // EtherCATInfo has its own few (xmlns:xsi, Version, ...) and q.
    let ok = with_attributes(rtcat_esi::MAX_ATTRIBUTES - 8);
    let f = parse(ok.as_bytes(), "ok.xml").unwrap();
    assert_eq!(f.devices.len(), 1);
    let bad = with_attributes(80_000);
    assert!(bad.len() > 800_000);
    let t = std::time::Instant::now();
    let e = parse(bad.as_bytes(), "bad.xml").unwrap_err().to_string();
    assert!(
        t.elapsed() < std::time::Duration::from_secs(2),
        "{:?}",
        t.elapsed()
    );
    assert!(
        e.contains("<EtherCATInfo>: more than 256 attributes on one element"),
        "{e}"
    );
}

// Issue 31, item 1: a terminal library's passive devices (no ProductCode, no ESC) are listed as
// passive; the active devices of the same file read.
#[test]
fn passive_devices_are_listed_and_the_active_ones_read() {
    let p = data("passive.xml");
    let f = read_file(&p).unwrap();
    let names: Vec<&str> = f.devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["EX1008", "EX2008"]);
    let passive: Vec<(&str, &str, u32)> = f
        .passive
        .iter()
        .map(|d| (d.name.as_str(), d.display_name(), d.line))
        .collect();
    assert_eq!(
        passive,
        [
            (
                "EX9011",
                "EX9011 Bus end cover cap",
                line_of(&p, "<Type>EX9011") - 1
            ),
            (
                "EX9100",
                "EX9100 Potential feed terminal 24 V",
                line_of(&p, "<Type>EX9100") - 1
            ),
        ]
    );
    assert!(f.warnings.is_empty());
}

// Issue 31, item 2: a one-digit DefaultData is read as one byte with a warning naming the file,
// line and element; more digits in odd number stay an error (see `other_bad_inputs_...`).
#[test]
fn one_digit_default_data_is_padded_with_a_warning() {
    let p = data("odd-hex.xml");
    let f = read_file(&p).unwrap();
    let d = one(&f);
    assert_eq!(default_u64(d, 0x6060), Some(8));
    assert_eq!(default_u64(d, 0x6061), Some(2));
    let w: Vec<String> = f.warnings.iter().map(|w| w.to_string()).collect();
    let line = line_of(&p, "<DefaultData>2<");
    assert_eq!(w.len(), 2, "{w:?}");
    assert_eq!(
        w[1],
        format!(
            "odd-hex.xml:{line}: Device/Profile/Dictionary/Objects/Object/Info/DefaultData: \
             object 0x6061: \"2\" has one hex digit: read as \"02\" (one byte)"
        )
    );
}

// Issue 31, item 5: an SoE drive is named for what it is, not refused for its PDO indices.
#[test]
fn an_soe_device_is_named_for_its_profile() {
    let f = read_file(&data("soe.xml")).unwrap();
    let d = one(&f);
    let why = d.unsupported_profile().unwrap();
    assert!(
        why.starts_with("this is a SoE (Servo Drive over EtherCAT) device; rtcat supports CoE"),
        "{why}"
    );
    let e = d.config_for(&[0x0018, 0x0010]).unwrap_err().to_string();
    assert_eq!(e, format!("EXS-501: {why}"));
    assert!(servo().unsupported_profile().is_none());
    // A CoE device and an index outside the mapping objects: the CoE range is said.
    let e = servo().config_for(&[0x1234]).unwrap_err().to_string();
    assert!(e.contains("0x1234 is not a PDO index"), "{e}");
}

// Issue 31, item 6: a PDO without entries is assigned, never given an empty mapping.
#[test]
fn a_pdo_without_entries_gets_no_empty_mapping() {
    let f = read_file(&data("odd-hex.xml")).unwrap();
    let block = one(&f).config_for(&[0x1600, 0x1601, 0x1A00]).unwrap();
    assert!(!block.contains("index = 0x1601"), "{block}");
    assert!(!block.contains("entries = [\n]"), "{block}");
    assert!(
        block.contains("# RxPDO 0x1601 \"Reserved\": no entries (0 bits), assigned only"),
        "{block}"
    );
    let d = device_table(&block);
    assert_eq!(d["pdo_map"].as_array().unwrap().len(), 2, "{block}");
}

// Issue 31, SM0/SM1: a device without a mailbox has its SII's assignment, often on SM0/SM1; the
// block lists it per SM for the master to compare, and only the fixed set can be chosen.
#[test]
fn process_data_on_sm0_and_sm1_are_emitted_per_sync_manager() {
    let f = read_file(&data("passive.xml")).unwrap();
    for (d, pdo, key, size) in [
        (&f.devices[0], 0x1A00, "sm0 = [0x1A00]", "input_bytes = 1"),
        (&f.devices[1], 0x1600, "sm0 = [0x1600]", "output_bytes = 1"),
    ] {
        let block = d.config_for(&[pdo]).unwrap();
        assert!(
            block.contains(&format!("pdo_assign = {{ {key} }}")),
            "{block}"
        );
        assert!(block.contains(size), "{block}");
        assert!(
            block.contains("the master compares it, writes nothing"),
            "{block}"
        );
        let e = d.config_for(&[]).unwrap_err().to_string();
        assert!(e.contains("is mandatory"), "{e}");
    }
    // Split over SM0 and SM1 (a 16-channel output), and SM1 carrying inputs.
    let mut d = f.devices[1].clone();
    let mut sm1 = d.sync_managers[0].clone();
    sm1.start = 0x0f01;
    d.sync_managers.push(sm1);
    let mut p = d.rx_pdos[0].clone();
    p.index = 0x1601;
    p.sm = Some(1);
    d.rx_pdos.push(p);
    let block = d.config_for(&[0x1600, 0x1601]).unwrap();
    assert!(
        block.contains("pdo_assign = { sm0 = [0x1600], sm1 = [0x1601] }"),
        "{block}"
    );
    assert!(block.contains("output_bytes = 2"), "{block}");
    assert!(block.contains("(SM0, 1 byte; SM1, 1 byte)"), "{block}");
    // A PDO on an SM of the other direction, and one past sm3, are refused naming them.
    d.sync_managers[1].usage = "Inputs".into();
    let e = d.config_for(&[0x1600, 0x1601]).unwrap_err().to_string();
    assert!(
        e.contains("RxPDO 0x1601 is on SM1, whose usage is \"Inputs\""),
        "{e}"
    );
    d.sync_managers[1].usage = "Outputs".into();
    d.rx_pdos[1].sm = Some(5);
    let e = d.config_for(&[0x1600, 0x1601]).unwrap_err().to_string();
    assert!(
        e.contains("RxPDO 0x1601 is on SM5: an rtcat pdo_assign names sm0..sm3"),
        "{e}"
    );
}

// Issue 31, items 3 and 4: a module file (root EtherCATModule) reads; a coupler's InfoReference
// to it is followed; modules go into slots with their index increments.
#[test]
fn module_files_and_info_references() {
    let m = read_file(&data("modular/coupler-modules.xml")).unwrap();
    assert!(m.devices.is_empty());
    let names: Vec<&str> = m.modules.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["EXM-DI8", "EXM-DO8"]);
    assert!(m.modules[0].tx_pdos[0].depend_on_slot);
    assert!(m.modules[0].tx_pdos[0].entries[0].depend_on_slot);

    let f = read_file(&data("modular/coupler.xml")).unwrap();
    assert_eq!(f.modules.len(), 2, "{:?}", f.modules);
    assert_eq!(f.modules[1].source.as_deref(), Some("coupler-modules.xml"));
    let d = one(&f);
    let sl = d.slots.as_ref().unwrap();
    assert_eq!((sl.pdo_increment, sl.index_increment), (1, 0x10));
    assert_eq!(d.slot_positions().len(), 4);
    // parse() alone lists the reference and reads nothing else.
    let bytes = std::fs::read(data("modular/coupler.xml")).unwrap();
    let p = parse(&bytes, "coupler.xml").unwrap();
    assert!(p.modules.is_empty());
    assert_eq!(p.references[0].file, "coupler-modules.xml");
}

fn coupler_with(dir: &std::path::Path, reference: &str) -> PathBuf {
    let xml = std::fs::read_to_string(data("modular/coupler.xml"))
        .unwrap()
        .replace("coupler-modules.xml", reference);
    let f = dir.join("coupler.xml");
    std::fs::write(&f, xml).unwrap();
    f
}

#[test]
fn info_references_stay_inside_the_tree_and_are_bounded() {
    let top = tempfile::tempdir().unwrap();
    let inner = top.path().join("esi");
    std::fs::create_dir(&inner).unwrap();
    let modules = std::fs::read(data("modular/coupler-modules.xml")).unwrap();
    std::fs::write(top.path().join("outside.xml"), &modules).unwrap();
    std::fs::write(inner.join("m.xml"), &modules).unwrap();
    // Relative, inside: followed.
    let f = read_file(&coupler_with(&inner, "m.xml")).unwrap();
    assert_eq!(f.modules.len(), 2);
    // "..", an absolute path and a symbolic link out are refused, naming the reference.
    let e = read_file(&coupler_with(&inner, "../outside.xml")).unwrap_err();
    let line = 6;
    assert_eq!(
        e.to_string(),
        format!(
            "coupler.xml:{line}: InfoReference \"../outside.xml\": it leads outside the \
             directory of the file given (by \"..\" or a symbolic link): not followed"
        )
    );
    let abs = top.path().join("outside.xml").display().to_string();
    let e = read_file(&coupler_with(&inner, &abs))
        .unwrap_err()
        .to_string();
    assert!(e.contains("an absolute path"), "{e}");
    std::os::unix::fs::symlink(top.path().join("outside.xml"), inner.join("link.xml")).unwrap();
    let e = read_file(&coupler_with(&inner, "link.xml"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("leads outside the directory"), "{e}");
    // Missing: a warning, the device reads.
    let f = read_file(&coupler_with(&inner, "gone.xml")).unwrap();
    assert!(f.modules.is_empty());
    assert!(
        f.warnings[0].to_string().contains("\"gone.xml\" not found"),
        "{:?}",
        f.warnings
    );
    // A file referring to itself is read once; a chain deeper than the bound is refused.
    let f = read_file(&coupler_with(&inner, "coupler.xml")).unwrap();
    assert!(f.modules.is_empty());
    let chain = |k: usize| {
        format!(
            "<EtherCATModule><InfoReference>c{}.xml</InfoReference><Modules/></EtherCATModule>",
            k + 1
        )
    };
    for k in 0..=rtcat_esi::MAX_REFERENCE_DEPTH + 1 {
        std::fs::write(inner.join(format!("c{k}.xml")), chain(k)).unwrap();
    }
    let e = read_file(&coupler_with(&inner, "c0.xml"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("references nest deeper than"), "{e}");
    // Many references: at most MAX_REFERENCES files.
    let many: String = (0..rtcat_esi::MAX_REFERENCES + 1)
        .map(|k| format!("<InfoReference>n{k}.xml</InfoReference>"))
        .collect();
    for k in 0..=rtcat_esi::MAX_REFERENCES {
        std::fs::write(
            inner.join(format!("n{k}.xml")),
            "<EtherCATModule><Modules/></EtherCATModule>",
        )
        .unwrap();
    }
    let xml = std::fs::read_to_string(data("modular/coupler.xml"))
        .unwrap()
        .replace("<InfoReference>coupler-modules.xml</InfoReference>", &many);
    std::fs::write(inner.join("many.xml"), xml).unwrap();
    let e = read_file(&inner.join("many.xml")).unwrap_err().to_string();
    assert!(e.contains("more than 64 referenced files"), "{e}");
}

#[test]
fn modules_in_slots_get_their_index_increments() {
    let f = read_file(&data("modular-drive.xml")).unwrap();
    let d = one(&f);
    let (dev, extra) = d
        .with_modules(
            &f.modules,
            &[(0, "CSP-AXIS".into()), (1, "#x00402002".into())],
        )
        .unwrap();
    assert_eq!(extra, [0x1600, 0x1A00, 0x1611, 0x1A11]);
    let e: Vec<u16> = dev
        .pdo(0x1611)
        .unwrap()
        .0
        .entries
        .iter()
        .map(|e| e.index)
        .collect();
    assert_eq!(e, [0x6840, 0x68FF]);
    let block = dev.config_for(&extra).unwrap();
    let t = device_table(&block);
    assert_eq!(t["output_bytes"].as_integer(), Some(12));
    assert_eq!(t["input_bytes"].as_integer(), Some(8));
    for (chosen, want) in [
        (
            vec![(1, "CSV-AXIS")],
            "slot \"Axis A\" needs at least 1 module(s), 0 given",
        ),
        (vec![(2, "CSV-AXIS")], "no slot 2: it has slots 0..1"),
        (
            vec![(0, "CSP-AXIS"), (0, "CSP-AXIS")],
            "slot 0 is given twice",
        ),
        (vec![(0, "NOPE")], "slot 0: no module \"NOPE\""),
    ] {
        let c: Vec<(u32, String)> = chosen.iter().map(|(n, m)| (*n, m.to_string())).collect();
        let e = d.with_modules(&f.modules, &c).unwrap_err().to_string();
        assert!(e.contains(want), "{e} (want {want:?})");
    }
    // A module the slot does not list is refused, naming what it accepts.
    let mut ms = f.modules.clone();
    ms[1].ident = Some(0x99);
    let e = d
        .with_modules(&ms, &[(0, "CSV-AXIS".into())])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("slot 0 (\"Axis A\") does not accept module CSV-AXIS (0x00000099); it accepts"),
        "{e}"
    );
    assert!(servo().with_modules(&f.modules, &[]).is_err());
    // A slot of huge MaxInstances: at most MAX_SLOT_POSITIONS positions, and a slot after them
    // is said to lie beyond, not to lack a module.
    let mut big = d.clone();
    let sl = big.slots.as_mut().unwrap();
    let mut first = sl.slots[1].clone();
    first.max_instances = u32::MAX;
    sl.slots.insert(0, first);
    assert_eq!(
        big.slot_positions().len() as u32,
        rtcat_esi::MAX_SLOT_POSITIONS
    );
    let e = big.with_modules(&f.modules, &[]).unwrap_err().to_string();
    assert!(
        e.contains("slot \"Axis A\" (line 32) lies beyond the first 1024 slot positions"),
        "{e}"
    );
}
