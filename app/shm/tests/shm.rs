//! The format, the publisher and the client against each other, through sealed memfds handed
//! over a socket (`rtcat_shm::testkit`).

mod common;

use common::*;
use proptest::prelude::*;
use rtcat_shm::{Client, CycleInfo, Error, State, Value, WriterEventKind, WriterState, fnv1a64};

fn info(cycle: u64) -> CycleInfo {
    CycleInfo {
        cycle,
        deadline_ns: cycle * 1000,
        wake_ns: cycle * 1000 + 7,
        unix_ns: 1_700_000_000_000_000_000 + cycle,
        wkc: 9,
        expected_wkc: 9,
        frames_lost: false,
    }
}

#[test]
fn format_round_trip() {
    let n = Name::new("rt");
    let ents = awkward();
    let mut m = make(&n.0, &ents, &[(3, 0)], &[(3, 0x55)], &["plc"], 100, 7);
    let c = Client::attach(&n.0).unwrap();
    assert_eq!(c.generation(), 7);
    assert_eq!(c.state(), State::Live);
    assert_eq!(c.period_ns(), 1_000_000);
    assert_eq!(c.writer_timeout_cycles(), 100);
    assert_eq!(c.master_pid(), std::process::id());
    assert_eq!(c.layout_json(), m.json);
    assert_eq!(m.publisher.layout_hash(), fnv1a64(m.json.as_bytes()));
    let g = c.geometry();
    assert_eq!(g, m.publisher.geometry());
    assert_eq!((g.subdevices, g.input_bytes, g.output_bytes), (2, 12, 16));
    assert_eq!(g.output_entries, 6, "the padding gap is no row");
    // The header bytes are where FORMAT.md says.
    let hdr = n.image(0, 112);
    assert_eq!(&hdr[..8], b"RTCATPI\0");
    assert_eq!(u32::from_le_bytes(hdr[8..12].try_into().unwrap()), 3);
    assert_eq!(u32::from_le_bytes(hdr[12..16].try_into().unwrap()), 4096);
    assert_eq!(u32::from_le_bytes(hdr[32..36].try_into().unwrap()), 7);
    assert_eq!(u32::from_le_bytes(hdr[76..80].try_into().unwrap()), 16);
    assert_eq!(u32::from_le_bytes(hdr[84..88].try_into().unwrap()), 16);

    assert!(matches!(c.snapshot(), Err(Error::NotPublished { .. })));
    let mut inputs = [0u8; 12];
    inputs[..4].copy_from_slice(&0xdead_beefu32.to_le_bytes());
    rtcat_shm::write_bits(&mut inputs, 35, 13, (-100i64) as u64);
    let mut outputs = [0u8; 16];
    rtcat_shm::write_bits(&mut outputs, 56, 32, u64::from(1.5f32.to_bits()));
    rtcat_shm::write_bits(&mut outputs, 88, 7, (-3i64) as u64);
    m.publisher
        .publish(&info(42), &inputs, &outputs, [true, false]);
    let s = c.snapshot().unwrap();
    assert_eq!((s.cycle, s.deadline_ns, s.wake_ns), (42, 42_000, 42_007));
    assert_eq!((s.wkc, s.expected_wkc, s.frames_lost), (9, 9, false));
    assert_eq!(s.valid, vec![true, false]);
    assert_eq!(s.inputs, inputs);
    assert_eq!(s.outputs, outputs);
    assert_eq!(
        s.get(&c.entry("0:Inputs.Counter").unwrap()),
        Value::Unsigned(0xdead_beef)
    );
    assert_eq!(s.get(&c.entry("1:Value").unwrap()), Value::Signed(-100));
    assert_eq!(
        s.get(&c.entry("1:Channel 1.Real").unwrap()),
        Value::Real(1.5)
    );
    assert_eq!(
        s.get(&c.entry("1:Channel 2.Setpoint").unwrap()),
        Value::Signed(-3)
    );
    // Ambiguous and unknown names are errors naming the candidates.
    let err = c.entry("1:Setpoint").unwrap_err().to_string();
    assert!(
        err.contains("ambiguous") && err.contains("1:Channel 2.Setpoint"),
        "{err}"
    );
    let err = c.entry("0:Nope").unwrap_err().to_string();
    assert!(err.contains("0:Outputs.Word"), "{err}");
    m.publisher.set_state(State::Stopped);
    assert_eq!(c.state(), State::Stopped);
}

#[test]
fn values_are_range_checked() {
    let n = Name::new("val");
    let ents = awkward();
    let _m = make(&n.0, &ents, &[], &[], &[], 100, 1);
    let c = Client::attach(&n.0).unwrap();
    let e = c.entry("1:Channel 2.Setpoint").unwrap();
    assert_eq!(e.encode(Value::Signed(-64)).unwrap(), 0x40);
    assert!(
        e.encode(Value::Signed(64))
            .unwrap_err()
            .to_string()
            .contains("-64..=63")
    );
    let b = c.entry("0:Outputs.Bits 1-3").unwrap();
    assert!(b.encode(Value::Unsigned(8)).is_err());
    assert!(b.encode(Value::Real(1.0)).is_err());
    assert_eq!(b.encode(Value::Unsigned(7)).unwrap(), 7);
}

#[test]
fn a_replaced_image_says_so_to_its_clients() {
    let n = Name::new("replaced");
    let m = make(&n.0, &awkward(), &[], &[], &[], 10, 3);
    let old = Client::attach(&n.0).unwrap();
    assert_eq!(old.generation(), 3);
    m.publisher.replace().unwrap();
    let _m2 = make(&n.0, &awkward(), &[], &[], &[], 10, 4);
    assert_eq!(old.state(), State::Replaced);
    assert_eq!(Client::attach(&n.0).unwrap().generation(), 4);
}

#[test]
fn merges_owned_entries_bit_exactly_and_nothing_else() {
    let n = Name::new("merge");
    let ents = awkward();
    let mut m = make(&n.0, &ents, &[], &[], &[], 1000, 1);
    let c = Client::attach(&n.0).unwrap();
    let (bit0, bits13, word, sp1, real, sp2) = (
        c.entry("0:Outputs.Bit 0").unwrap(),
        c.entry("0:Outputs.Bits 1-3").unwrap(),
        c.entry("0:Outputs.Word").unwrap(),
        c.entry("1:Channel 1.Setpoint").unwrap(),
        c.entry("1:Channel 1.Real").unwrap(),
        c.entry("1:Channel 2.Setpoint").unwrap(),
    );
    let mut a = c.attach_writer("a").unwrap();
    let mut b = c.attach_writer("b").unwrap();
    a.claim(&bits13).unwrap();
    a.claim(&sp1).unwrap();
    b.claim(&word).unwrap();
    b.claim(&sp2).unwrap();
    let err = b.claim(&sp1).unwrap_err().to_string();
    assert!(err.contains("owned by writer \"a\""), "{err}");
    assert!(
        a.write(&[(&word, Value::Unsigned(1))]).is_err(),
        "not a's entry"
    );
    a.write(&[(&bits13, Value::Unsigned(0b101)), (&sp1, Value::Signed(-2))])
        .unwrap();
    b.write(&[(&word, Value::Unsigned(0xbeef)), (&sp2, Value::Signed(0))])
        .unwrap();
    let app = [0xffu8; 16];
    let mut out = app;
    let ev = m.publisher.take_writes(&mut out, 1);
    assert_eq!(
        ev.iter()
            .filter(|e| e.kind == WriterEventKind::Attached)
            .count(),
        2
    );
    let mut want = app;
    rtcat_shm::write_bits(&mut want, 1, 3, 0b101);
    rtcat_shm::write_bits(&mut want, 5, 16, 0xbeef);
    rtcat_shm::write_bits(&mut want, 24, 32, (-2i64) as u64);
    rtcat_shm::write_bits(&mut want, 88, 7, 0);
    assert_eq!(
        out, want,
        "owned bits the writers', every other bit the application's"
    );
    let _ = (&bit0, &real);
    assert_eq!(a.applied_cycle(), 1);
    // Next cycle: the application wrote zeros; the writers' entries keep their values.
    let mut out = [0u8; 16];
    m.publisher.take_writes(&mut out, 2);
    let mut want = [0u8; 16];
    rtcat_shm::write_bits(&mut want, 1, 3, 0b101);
    rtcat_shm::write_bits(&mut want, 5, 16, 0xbeef);
    rtcat_shm::write_bits(&mut want, 24, 32, (-2i64) as u64);
    assert_eq!(out, want);
    assert_eq!(a.applied_cycle(), 2);
    // Writer a mid-write (its seq odd, staged half new): the master keeps a's old values and
    // applied_cycle stays, so a client cannot take the cycle for proof its new value is out.
    // Another writer attached the same way (a raw grant: the descriptor a client would get).
    let broker = n.1.get().unwrap();
    let raw = broker
        .attach_writer("raw", std::process::id(), nix::unistd::geteuid().as_raw())
        .unwrap();
    let mut out = [0u8; 16];
    m.publisher.take_writes(&mut out, 3);
    broker
        .claim(raw.slot, 0, std::process::id())
        .expect("Bit 0 is free");
    poke_fd(&raw.fd, 48, &3u64.to_le_bytes()).unwrap();
    poke_fd(&raw.fd, 64, &[0xff; 16]).unwrap();
    let mut out = [0u8; 16];
    m.publisher.take_writes(&mut out, 4);
    assert_eq!(out, want, "a torn staged image is never taken");
    poke_fd(&raw.fd, 48, &4u64.to_le_bytes()).unwrap();
    let mut out = [0u8; 16];
    m.publisher.take_writes(&mut out, 5);
    rtcat_shm::write_bits(&mut want, 0, 1, 1);
    assert_eq!(out, want, "a consistent one is, for the entry it owns only");
    assert_eq!(a.applied_cycle(), 5);
    // And it cannot touch anything else: its object is only its own slot.
    // A detached writer's claims go back to the application.
    poke_fd(&raw.fd, 0, &0u32.to_le_bytes()).unwrap();
    drop(b);
    let mut out = [0u8; 16];
    let ev = m.publisher.take_writes(&mut out, 6);
    assert!(
        ev.iter()
            .any(|e| e.kind == WriterEventKind::Detached && e.name() == "b")
    );
    let mut want = [0u8; 16];
    rtcat_shm::write_bits(&mut want, 1, 3, 0b101);
    rtcat_shm::write_bits(&mut want, 24, 32, (-2i64) as u64);
    assert_eq!(out, want);
}

#[test]
fn stale_writer_goes_to_safe_values_with_an_event_and_resumes() {
    let n = Name::new("stale");
    let ents = awkward();
    // Row 2 (Word) declared for "plc" with safe value 0x1234; row 3 (Setpoint) claimed.
    let mut m = make(
        &n.0,
        &ents,
        &[(2, 0)],
        &[(2, 0x1234), (3, 77)],
        &["plc"],
        10,
        1,
    );
    let c = Client::attach(&n.0).unwrap();
    let word = c.entry("0:Outputs.Word").unwrap();
    let sp = c.entry("1:Channel 1.Setpoint").unwrap();
    // Before the declared writer attaches, its entries are at their safe values.
    let mut out = [0u8; 16];
    m.publisher.take_writes(&mut out, 0);
    assert_eq!(rtcat_shm::read_bits(&out, 5, 16), 0x1234);
    assert!(
        c.attach_writer("intruder").unwrap().claim(&word).is_err(),
        "declared"
    );
    let mut w = c.attach_writer("plc").unwrap();
    assert!(w.is_declared());
    w.claim(&word).unwrap();
    w.claim(&sp).unwrap();
    w.write(&[(&word, Value::Unsigned(5)), (&sp, Value::Signed(-9))])
        .unwrap();
    let mut events = Vec::new();
    let mut last = [0u8; 16];
    for cycle in 1..=30u64 {
        let mut out = [0u8; 16];
        events.extend(
            m.publisher
                .take_writes(&mut out, cycle)
                .iter()
                .map(|e| (cycle, e.kind)),
        );
        last = out;
        if cycle == 5 {
            assert_eq!(rtcat_shm::read_bits(&out, 5, 16), 5);
            assert_eq!(rtcat_shm::read_bits(&out, 24, 32), (-9i64) as u32 as u64);
        }
    }
    assert_eq!(
        events,
        vec![(1, WriterEventKind::Attached), (11, WriterEventKind::Stale)],
        "stale after writer_timeout_cycles without a heartbeat"
    );
    assert_eq!(w.state(), Some(WriterState::Stale));
    assert_eq!(rtcat_shm::read_bits(&last, 5, 16), 0x1234);
    assert_eq!(rtcat_shm::read_bits(&last, 24, 32), 77);
    w.heartbeat();
    let mut out = [0u8; 16];
    let ev: Vec<_> = m
        .publisher
        .take_writes(&mut out, 31)
        .iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(ev, vec![WriterEventKind::Resumed]);
    assert_eq!(w.state(), Some(WriterState::Attached));
    assert_eq!(rtcat_shm::read_bits(&out, 5, 16), 5);
    // A crashed writer (never detached) is taken over by a writer of the same name.
    std::mem::forget(w);
    for cycle in 32..50 {
        m.publisher.take_writes(&mut [0u8; 16], cycle);
    }
    let w2 = c.attach_writer("plc").unwrap();
    assert!(w2.is_declared());
}

#[test]
fn replaced_on_a_layout_change_and_reattach() {
    let n = Name::new("repl");
    let m = make(&n.0, &awkward(), &[], &[], &[], 10, 1);
    let mut c = Client::attach(&n.0).unwrap();
    assert!(!c.reattach().unwrap(), "same object");
    m.publisher.replace().unwrap();
    assert!(matches!(
        c.snapshot(),
        Err(Error::Gone {
            state: State::Replaced,
            ..
        })
    ));
    let mut ents = awkward();
    ents.truncate(4);
    let mut m2 = make(&n.0, &ents, &[], &[], &[], 10, 2);
    assert!(c.reattach().unwrap());
    assert_eq!(c.generation(), 2);
    assert_eq!(c.geometry().output_entries, 4);
    m2.publisher
        .publish(&info(1), &[1; 12], &[2; 16], [true, true]);
    assert_eq!(c.snapshot().unwrap().inputs, vec![1; 12]);
}

#[test]
fn writer_slots_run_out_with_a_clear_error() {
    let n = Name::new("slots");
    let mut m = make(&n.0, &awkward(), &[(0, 0)], &[], &["plc"], 10, 1);
    let c = Client::attach(&n.0).unwrap();
    let ws: Vec<_> = (0..15)
        .map(|i| c.attach_writer(&format!("w{i}")).unwrap())
        .collect();
    let err = c.attach_writer("one-too-many").err().unwrap().to_string();
    assert!(err.contains("no free writer slot"), "{err}");
    assert!(
        c.attach_writer("w3")
            .err()
            .unwrap()
            .to_string()
            .contains("already attached")
    );
    // Detached: free again once the master has seen it (its next cycle).
    drop(ws);
    assert!(c.attach_writer("again").is_err(), "not seen yet");
    m.publisher.take_writes(&mut [0u8; 16], 1);
    assert!(c.attach_writer("again").is_ok());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    /// Whatever writers write into their objects (all a client can write now), and whatever
    /// they claim, the publisher never panics and only ever changes bits of entries (every
    /// other output bit stays the application's).
    #[test]
    fn garbage_from_clients_never_panics_the_publisher(
        garbage in proptest::collection::vec(any::<u8>(), 0..4096),
        at in 0u64..8192,
        words in proptest::collection::vec((0u64..2, 0u64..400, any::<u64>()), 0..40),
        claims in proptest::collection::vec((0u32..3, 0u32..8), 0..8),
    ) {
        let n = Name::new("fuzz");
        let ents = awkward();
        let mut m = make(&n.0, &ents, &[(0, 0)], &[(0, 1)], &["plc"], 3, 1);
        let b = n.1.get().unwrap();
        let (pid, uid) = (std::process::id(), nix::unistd::geteuid().as_raw());
        let mut out = [0u8; 16];
        let grants = [b.attach_writer("plc", pid, uid), b.attach_writer("x", pid, uid)];
        let _ = m.publisher.take_writes(&mut out, 0);
        let grants: Vec<_> = grants.into_iter().map(|g| g.unwrap()).collect();
        for (slot, row) in &claims {
            let _ = b.claim(*slot, *row, pid);
        }
        let size = grants[0].bytes;
        // A blob anywhere in a writer object.
        let off = at % size;
        let len = garbage.len().min((size - off) as usize);
        poke_fd(&grants[(at % 2) as usize].fd, off, &garbage[..len]).unwrap();
        // Plausible values in the fields that matter: state, seq, heartbeat.
        for (k, field, v) in &words {
            let v = match field % 3 { 0 => v % 5, 1 => v % 18, _ => *v };
            poke_fd(&grants[*k as usize].fd, (field % 8) * 8, &(v as u32).to_le_bytes()).unwrap();
        }
        let entry_bits: Vec<(u32, u32)> =
            ents.iter().filter(|x| x.out).map(|x| (x.bit_offset, u32::from(x.bits))).collect();
        for cycle in 0..12 {
            let app = [0x5au8; 16];
            let mut out = app;
            let _ = m.publisher.take_writes(&mut out, cycle);
            m.publisher.publish(&info(cycle), &[0; 12], &out, [true, true]);
            for k in 0..128u32 {
                let inside = entry_bits.iter().any(|&(o, b)| k >= o && k < o + b);
                if !inside {
                    prop_assert_eq!(out[(k / 8) as usize] >> (k % 8) & 1, app[(k / 8) as usize] >> (k % 8) & 1);
                }
            }
        }
    }

    /// A client given a garbage or short image gets an error, never a crash.
    #[test]
    fn garbage_objects_are_errors_for_clients(
        field in 0usize..28, value in any::<u32>(), truncate in proptest::option::of(0u64..20000),
    ) {
        let n = Name::new("cfuzz");
        let m = make(&n.0, &awkward(), &[], &[], &[], 3, 1);
        let size = m.publisher.geometry().object_bytes;
        let mut bytes = n.image(0, size as usize);
        bytes[field * 4..field * 4 + 4].copy_from_slice(&value.to_le_bytes());
        if let Some(t) = truncate {
            bytes.truncate(t as usize);
        }
        let fd = nix::sys::memfd::memfd_create(
            c"fuzz",
            nix::sys::memfd::MFdFlags::MFD_CLOEXEC | nix::sys::memfd::MFdFlags::MFD_ALLOW_SEALING,
        )
        .unwrap();
        poke_fd(&fd, 0, &bytes).unwrap();
        nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_ADD_SEALS(rtcat_shm::image_seals())).unwrap();
        if let Ok(c) = Client::from_image(fd, &n.0, nix::unistd::geteuid().as_raw()) {
            // Accepted: then it is consistent enough to read.
            let _ = c.snapshot();
            let _ = c.entries().len();
        }
    }
}
