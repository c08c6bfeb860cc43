//! ENI reading and import on files the project writes: the CoE example network
//! (`examples/coe/network.eni.xml`), variants of it with what rtcat does not run, malformed and
//! hostile files, and a large generated network.

use rtcat_esi::{EniFile, Error, parse_eni, read_eni};
use std::path::PathBuf;

fn example() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/coe/network.eni.xml")
}

fn text() -> String {
    std::fs::read_to_string(example()).unwrap()
}

/// The example with `from` replaced by `to` (which must occur).
fn variant(from: &str, to: &str) -> String {
    let t = text();
    assert!(t.contains(from), "{from:?} not in the example");
    t.replacen(from, to, 1)
}

fn parse(t: &str) -> Result<EniFile, Error> {
    parse_eni(t.as_bytes(), "v.eni.xml")
}

fn err(t: &str) -> String {
    match parse(t).and_then(|f| f.to_config("v.eni.xml").map(|_| f)) {
        Ok(_) => panic!("accepted"),
        Err(e) => e.to_string(),
    }
}

/// A minimal ENI of `slaves` (each a `<Slave>` body).
fn eni(slaves: &[&str]) -> String {
    let mut s = String::from("<EtherCATConfig><Config>");
    for b in slaves {
        s.push_str("<Slave>");
        s.push_str(b);
        s.push_str("</Slave>");
    }
    s.push_str("</Config></EtherCATConfig>");
    s
}

#[test]
fn the_example_network_reads_whole() {
    let f = read_eni(&example()).unwrap();
    assert_eq!(f.master.as_deref(), Some("rtcat CoE example"));
    assert_eq!(f.cycle_time_us, Some(1000));
    let ids: Vec<_> = f
        .slaves
        .iter()
        .map(|s| (s.position, s.name.as_str(), s.product_code, s.serial))
        .collect();
    assert_eq!(
        ids,
        [
            (0, "DIO8-COE", 0x0003_0001, Some(1)),
            (1, "AI4-COE", 0x0003_0002, Some(2)),
            (2, "SERVO-COE", 0x0003_0003, Some(3)),
        ]
    );
    let servo = &f.slaves[2];
    assert_eq!(servo.auto_inc_addr, Some(65534));
    assert_eq!(servo.phys_addr, Some(1003));
    let pd = &servo.process_data;
    assert_eq!(pd.send.map(|r| (r.start, r.length)), Some((8, 88)));
    assert_eq!(pd.rx_pdos[0].index, 0x1600);
    assert_eq!(pd.rx_pdos[0].entries[1].index, 0x607A);
    assert_eq!(pd.rx_pdos[0].entries[1].data_type.as_deref(), Some("DINT"));
    let sms: Vec<_> = pd.sms.iter().map(|s| (s.number, s.pdos.clone())).collect();
    assert_eq!(sms, [(2, vec![0x1600]), (3, vec![0x1A00])]);
    let cmds = &servo.mailbox.as_ref().unwrap().coe_init_cmds;
    // 7186 is 0x1C12 written in decimal, as tools do.
    assert_eq!(
        (cmds[0].index, cmds[0].sub, &cmds[0].data[..]),
        (0x1C12, 0, &[0][..])
    );
    let ca = cmds.iter().find(|c| c.complete_access).unwrap();
    assert_eq!((ca.index, &ca.data[..]), (0x1C12, &[1, 0, 0x00, 0x16][..]));
    assert_eq!(servo.init_cmds.len(), 2);
    assert_eq!(f.master_init_cmds.len(), 1);
    assert_eq!(f.cyclic.len(), 2);
    assert_eq!((f.cyclic[0].cmd, f.cyclic[0].cnt), (12, Some(7)));
}

#[test]
fn the_example_imports_as_the_hand_written_configuration() {
    let c = read_eni(&example())
        .unwrap()
        .to_config("network.eni.xml")
        .unwrap();
    let t: toml::Table = toml::from_str(&c.toml).unwrap();
    assert_eq!(t["segment"]["subdevices"].as_integer(), Some(3));
    assert_eq!(t["segment"]["expected_wkc"].as_integer(), Some(7));
    assert_eq!(t["cycle"]["period_us"].as_integer(), Some(1000));
    let seg = t["segment"]["device"].as_array().unwrap();
    assert_eq!(seg[2]["product_id"].as_integer(), Some(0x0003_0003));
    let dev = t["device"].as_array().unwrap();
    assert_eq!(dev.len(), 3);
    // DIO8: fixed PDOs (no init command writes them): sizes only.
    assert!(dev[0].get("pdo_assign").is_none(), "{}", c.toml);
    assert_eq!(dev[0]["input_bytes"].as_integer(), Some(1));
    // AI4: the four channels assigned, the filter on.
    assert_eq!(
        dev[1]["pdo_assign"]["sm3"].as_array().unwrap().len(),
        4,
        "{}",
        c.toml
    );
    assert_eq!(dev[1]["input_bytes"].as_integer(), Some(16));
    assert_eq!(dev[1]["sdo"][0]["index"].as_integer(), Some(0x8000));
    // SERVO: assignment (one of them by complete access), both mappings, two startup SDOs.
    let servo = &dev[2];
    assert_eq!(servo["output_bytes"].as_integer(), Some(11));
    assert_eq!(servo["pdo_map"].as_array().unwrap().len(), 2);
    assert_eq!(
        servo["pdo_map"][0]["entries"][1]["entry"].as_str(),
        Some("0x607A:00:32")
    );
    let sdo: Vec<_> = servo["sdo"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["index"].as_integer().unwrap(),
                s["type"].as_str().unwrap().to_string(),
                s["value"].as_integer().unwrap(),
                s["transition"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        sdo,
        [
            (0x6060, "i8".into(), 8, "PS".into()),
            (0x6085, "u32".into(), 50000, "PS".into())
        ]
    );
    // Listed: the master's and each slave's register commands, the cyclic frames.
    assert_eq!(c.notes.len(), 1 + 1 + 3 * 2, "{:#?}", c.notes);
    assert!(c.notes.iter().any(|n| n.what.contains("cyclic frames")));
    assert_eq!(c.toml.matches("# NOT RUN (ENI line").count(), c.notes.len());
}

/// An init command's `Timeout` (how long the device may take to answer it) imports as the
/// startup SDO's `timeout_ms`; 0 and the master's default add nothing; longer than the master
/// waits, the longest it waits, said so; not a number, refused naming the place.
#[test]
fn an_init_command_s_timeout_imports_as_the_startup_sdo_s() {
    let quick_stop =
        "<Comment>quick stop deceleration</Comment>\n              <Timeout>0</Timeout>";
    let sdo_of = |eni: &str| {
        let c = parse(eni).unwrap().to_config("v.eni.xml").unwrap();
        let t: toml::Table = toml::from_str(&c.toml).unwrap();
        let servo = &t["device"].as_array().unwrap()[2];
        let s = servo["sdo"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["index"].as_integer() == Some(0x6085))
            .cloned()
            .unwrap();
        (s.get("timeout_ms").and_then(|v| v.as_integer()), c.toml)
    };
    assert_eq!(sdo_of(&text()).0, None, "Timeout 0: the default");
    let with = |ms: &str| {
        variant(
            quick_stop,
            &format!(
                "<Comment>quick stop deceleration</Comment>\n              <Timeout>{ms}</Timeout>"
            ),
        )
    };
    assert_eq!(sdo_of(&with("1000")).0, None, "the default itself");
    assert_eq!(sdo_of(&with("5000")).0, Some(5000));
    let (long, toml) = sdo_of(&with("600000"));
    assert_eq!(long, Some(120_000));
    assert!(toml.contains("ENI Timeout 600000 ms"), "{toml}");
    // The other commands of the example keep theirs (0): no other timeout_ms.
    assert_eq!(sdo_of(&with("5000")).1.matches("timeout_ms").count(), 1);
    let e = err(&with("soon"));
    assert!(e.contains("Timeout") && e.contains("not a number"), "{e}");
}

#[test]
fn what_rtcat_does_not_run_is_listed() {
    let extra = r#"<InitCmd><Transition>PS</Transition><Ccs>2</Ccs><Index>#x1018</Index><SubIndex>1</SubIndex></InitCmd>
            <InitCmd><Transition>OS</Transition><Ccs>1</Ccs><Index>#x8000</Index><SubIndex>21</SubIndex><Data>0500</Data></InitCmd>
            <InitCmd><Transition>SO</Transition><Ccs>2</Ccs><Index>#x8010</Index><SubIndex>21</SubIndex><Data>0300</Data></InitCmd>
            <InitCmd><Transition>IP</Transition><Ccs>1</Ccs><Index>#x8020</Index><SubIndex>21</SubIndex><Data>0100</Data></InitCmd>
            <InitCmd CompleteAccess="true"><Transition>PS</Transition><Ccs>1</Ccs><Index>#x8030</Index><SubIndex>0</SubIndex><Data>0200aabb</Data></InitCmd>
            <InitCmd><Transition>PS</Transition><Ccs>1</Ccs><Index>#x8030</Index><SubIndex>6</SubIndex><Data>01</Data><Disabled>1</Disabled></InitCmd>
          </InitCmds>
        </CoE>
        <SoE><InitCmds><InitCmd><Transition>PS</Transition><Comment>IDN S-0-0032</Comment></InitCmd></InitCmds></SoE>"#;
    let t = variant(
        "          </InitCmds>\n        </CoE>\n      </Mailbox>\n      <InitCmds>\n        <InitCmd>\n          <Transition>IP</Transition>\n          <Comment>set station address</Comment>\n          <Requires>cycle</Requires>\n          <Cmd>2</Cmd>\n          <Adp>0</Adp>\n          <Ado>#x0010</Ado>\n          <Data>ea03</Data>",
        &format!(
            "{extra}\n      </Mailbox>\n      <DC><AssignActivate>#x0300</AssignActivate></DC>\n      <InitCmds>\n        <InitCmd>\n          <Transition>IP</Transition>\n          <Comment>set station address</Comment>\n          <Requires>cycle</Requires>\n          <Cmd>2</Cmd>\n          <Adp>0</Adp>\n          <Ado>#x0010</Ado>\n          <Data>ea03</Data>"
        ),
    );
    let c = parse(&t).unwrap().to_config("v.eni.xml").unwrap();
    let ai4: Vec<&str> = c
        .notes
        .iter()
        .filter(|n| n.position == Some(1))
        .map(|n| n.what.as_str())
        .collect();
    let want = [
        "0x1018:01: an upload (Ccs 2, no data)",
        "0x8000:15 at OS: rtcat writes startup SDOs at PS and SO only",
        "0x8030:00: complete access (4 bytes)",
        "0x8030:06: disabled in the ENI",
        "SoE init command at PS \"IDN S-0-0032\": rtcat speaks CoE only",
        "DC settings of the ENI are not imported",
        "register init command at IP: APWR",
    ];
    for w in want {
        assert!(ai4.iter().any(|n| n.contains(w)), "{w:?} not in {ai4:#?}");
    }
    assert_eq!(ai4.len(), want.len() + 1, "{ai4:#?}");
    // The SO write (Ccs 2, ETG.2100's numbering) and the IP write (at PS) are run.
    let tab: toml::Table = toml::from_str(&c.toml).unwrap();
    let sdo: Vec<_> = tab["device"][1]["sdo"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["index"].as_integer().unwrap(),
                s["transition"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        sdo,
        [
            (0x8000, "PS".into()),
            (0x8010, "SO".into()),
            (0x8020, "PS".into())
        ]
    );
}

#[test]
fn positions_come_from_the_auto_increment_address_in_either_form() {
    let t = eni(&[
        "<Info><VendorId>2</VendorId><ProductCode>1</ProductCode><AutoIncAddr>-1</AutoIncAddr></Info>",
        "<Info><VendorId>2</VendorId><ProductCode>2</ProductCode><AutoIncAddr>0</AutoIncAddr></Info>",
    ]);
    let f = parse(&t).unwrap();
    assert_eq!(
        f.slaves.iter().map(|s| s.position).collect::<Vec<_>>(),
        [1, 0]
    );
    let c = f.to_config("v").unwrap();
    let tab: toml::Table = toml::from_str(&c.toml).unwrap();
    assert_eq!(
        tab["segment"]["device"][0]["product_id"].as_integer(),
        Some(2)
    );
    assert!(
        tab["segment"].get("expected_wkc").is_none(),
        "no cyclic part"
    );
}

#[test]
fn malformed_and_hostile_files_are_refused_naming_the_place() {
    let long = "9".repeat(100_000);
    for (what, t, want) in [
        (
            "not XML",
            "<EtherCATConfig><Config>".to_string(),
            "v.eni.xml:1: not well-formed XML",
        ),
        (
            "an ESI",
            "<EtherCATInfo/>".to_string(),
            "an ESI device description, not an ENI",
        ),
        (
            "another root",
            "<Foo/>".to_string(),
            "the root element is \"Foo\", not EtherCATConfig",
        ),
        (
            "no slave",
            "<EtherCATConfig><Config/></EtherCATConfig>".to_string(),
            "v.eni.xml:1: Config/Slave: none: the network has no subdevice",
        ),
        (
            "no Config",
            "<EtherCATConfig/>".to_string(),
            "EtherCATConfig/Config: missing",
        ),
        (
            "a bad vendor id",
            variant(
                "<VendorId>#x00000766</VendorId>",
                "<VendorId>#xZZ</VendorId>",
            ),
            "Slave/Info/VendorId: \"#xZZ\" is not a number",
        ),
        (
            "a missing product code",
            variant("<ProductCode>#x00030001</ProductCode>", ""),
            "Slave/Info/ProductCode: missing",
        ),
        (
            "a huge number, truncated in the message",
            variant(
                "<SerialNo>1</SerialNo>",
                &format!("<SerialNo>{long}</SerialNo>"),
            ),
            "Slave/Info/SerialNo: \"9999999999999999999999999999999999999999999999999999999999999999\"... (100000 bytes) is not a number",
        ),
        (
            "odd hex data",
            variant("<Data>08</Data>", "<Data>8</Data>"),
            "Slave/Mailbox/CoE/InitCmds/InitCmd/Data: \"8\" is not hex data",
        ),
        (
            "a bad transition",
            variant(
                "<Transition>PS</Transition>\n              <Comment>AI channel 1",
                "<Transition>XY</Transition>\n              <Comment>AI channel 1",
            ),
            "InitCmd/Transition: \"XY\" is not a transition",
        ),
        (
            "no transition",
            variant(
                "<Transition>PS</Transition>\n              <Comment>AI channel 1",
                "<Comment>AI channel 1",
            ),
            "InitCmd/Transition: missing",
        ),
        (
            "two slaves at one position",
            variant(
                "<AutoIncAddr>65535</AutoIncAddr>",
                "<AutoIncAddr>0</AutoIncAddr>",
            ),
            "position 0 is taken by the slave at line",
        ),
        (
            "a gap in the positions",
            variant(
                "<AutoIncAddr>65534</AutoIncAddr>",
                "<AutoIncAddr>65533</AutoIncAddr>",
            ),
            "position 3 but the network has 3 slaves and no slave at position 2",
        ),
        (
            "an assignment that disagrees with ProcessData",
            variant("<Data>001a</Data>", "<Data>011a</Data>"),
            "the init commands assign 0x1C13 = [0x1A01, 0x1A01, 0x1A02, 0x1A03], ProcessData/Sm3 lists [0x1A00, 0x1A01, 0x1A02, 0x1A03]",
        ),
        (
            "a mapping that disagrees with ProcessData",
            variant("<Data>20007a60</Data>", "<Data>10007a60</Data>"),
            "the init commands map 0x1600 = [0x60400010, 0x607A0010, 0x60FF0020, 0x60600008], ProcessData's PDO lists [0x60400010, 0x607A0020",
        ),
        (
            "an assignment entry of the wrong size",
            variant("<Data>001a</Data>", "<Data>001a0000</Data>"),
            "0x1C13:01: subindex 1 takes 2 bytes, the command writes 4",
        ),
        (
            "process data that disagrees with the PDOs",
            variant("<BitLength>88</BitLength>", "<BitLength>96</BitLength>"),
            "Slave/ProcessData/Send/BitLength: 96 bits, but the PDOs assigned to SM2 map 88 bits",
        ),
        (
            "an assigned PDO nobody describes",
            variant("<Pdo>#x1a03</Pdo>", "<Pdo>#x1a07</Pdo>"),
            "Slave/ProcessData/Sm3/Pdo: 0x1A07 is assigned but not described",
        ),
    ] {
        let e = err(&t);
        assert!(e.contains(want), "{what}: {e}\n(want {want:?})");
        assert!(e.len() < 400, "{what}: a bounded message: {e}");
    }
}

#[test]
fn the_bounds_of_the_esi_reader_hold() {
    // Nesting.
    let deep = format!(
        "<EtherCATConfig><Config>{}{}</Config></EtherCATConfig>",
        "<a>".repeat(100_000),
        "</a>".repeat(100_000)
    );
    let e = err(&deep);
    assert!(e.contains("nest deeper than 64 levels"), "{e}");
    // Attributes.
    let attrs: String = (0..1000).map(|i| format!(" a{i}=\"1\"")).collect();
    let e = err(&format!("<EtherCATConfig{attrs}/>"));
    assert!(e.contains("more than 256 attributes"), "{e}");
    // DTDs (entity expansion).
    let e = err("<!DOCTYPE x [<!ENTITY a \"b\">]><EtherCATConfig/>");
    assert!(e.contains("not well-formed XML"), "{e}");
    // Size: read_eni refuses a file over MAX_FILE_BYTES without reading it whole.
    let d = tempfile::tempdir().unwrap();
    let big = d.path().join("big.xml");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(rtcat_esi::MAX_FILE_BYTES + 1).unwrap();
    let e = read_eni(&big).unwrap_err();
    assert!(e.is_input(), "{e}");
    // An ENI given to the ESI reader says what it is.
    let e = rtcat_esi::parse(text().as_bytes(), "n.xml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("this is an ENI"), "{e}");
}

#[test]
fn a_large_network_reads_in_linear_time() {
    // 512 slaves shaped like the example's drive: about 6 MB.
    let t = text();
    let start = t.find("    <Slave>").unwrap();
    let servo_at = t.rfind("    <Slave>").unwrap();
    let end = t.find("    <Cyclic>").unwrap();
    let servo = &t[servo_at..end];
    let mut big = String::from(&t[..start]);
    for k in 0..512u32 {
        big.push_str(&servo.replace(
            "<AutoIncAddr>65534</AutoIncAddr>",
            &format!("<AutoIncAddr>{}</AutoIncAddr>", 0u16.wrapping_sub(k as u16)),
        ));
    }
    big.push_str(&t[end..]);
    let t0 = std::time::Instant::now();
    let f = parse(&big).unwrap();
    let c = f.to_config("big").unwrap();
    let took = t0.elapsed();
    assert_eq!(f.slaves.len(), 512);
    assert!(c.toml.len() > 100_000);
    eprintln!(
        "{} bytes, {} slaves: parsed and converted in {took:?}",
        big.len(),
        f.slaves.len()
    );
    // Generous for a debug build on a loaded machine; quadratic behaviour takes minutes.
    assert!(took.as_secs() < 30, "{took:?}");
}

mod mutate;

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 256, ..Default::default() })]

    /// Never a panic: every mutated example parses and converts, or fails with an error naming
    /// a line of the file.
    #[test]
    fn mutated_examples_never_panic(
        edits in proptest::collection::vec(mutate::edit(), 1..6),
    ) {
        let b = mutate::apply(text().into_bytes(), &edits);
        match parse_eni(&b, "m.xml").and_then(|f| f.to_config("m.xml")) {
            Ok(c) => proptest::prop_assert!(toml::from_str::<toml::Table>(&c.toml).is_ok(), "{}", c.toml),
            Err(e) => {
                let s = e.to_string();
                proptest::prop_assert!(s.starts_with("m.xml:"), "{}", s);
                let line: u32 = s["m.xml:".len()..].split(':').next().unwrap().parse().unwrap();
                proptest::prop_assert!(line >= 1 && line as usize <= b.split(|&c| c == b'\n').count(), "{}", s);
            }
        }
    }
}

#[test]
fn process_data_on_other_sync_managers_is_listed_and_not_sized() {
    // A terminal without a mailbox whose outputs sit on SM0, as the commonest digital terminals.
    let t = eni(&[
        "<Info><Name>DO8</Name><VendorId>2</VendorId><ProductCode>3</ProductCode></Info>\
         <ProcessData><Send><BitStart>0</BitStart><BitLength>8</BitLength></Send>\
         <Sm0><Type>Outputs</Type><Pdo>#x1600</Pdo></Sm0>\
         <RxPdo Fixed=\"true\" Sm=\"0\"><Index>#x1600</Index><Name>Out</Name>\
         <Entry><Index>#x7000</Index><SubIndex>1</SubIndex><BitLen>8</BitLen><Name>Byte</Name>\
         <DataType>USINT</DataType></Entry></RxPdo></ProcessData>",
    ]);
    let c = parse(&t).unwrap().to_config("v").unwrap();
    assert_eq!(c.notes.len(), 1, "{:#?}", c.notes);
    assert!(
        c.notes[0].what.starts_with("process data on SM0 (0x1600)"),
        "{:#?}",
        c.notes
    );
    let tab: toml::Table = toml::from_str(&c.toml).unwrap();
    let dev = &tab["device"][0];
    assert_eq!(dev["name"].as_str(), Some("DO8"));
    assert!(
        dev.get("output_bytes").is_none() && dev.get("input_bytes").is_none(),
        "{dev}"
    );
}
