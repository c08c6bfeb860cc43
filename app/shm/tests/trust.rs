//! The trust boundary of the object (issue 26): entries the master drives are never a writer's,
//! a stopped writer's position target holds the actual value, and clients refuse an object the
//! master's uid did not create.

mod common;

use common::*;
use rtcat_shm::{Client, Error, Hold, OutputEntry, Publisher, Value, read_bits, write_bits};

/// `awkward()`'s rows, with `f` applied to each (row index, entry).
fn create(n: &Name, f: impl Fn(usize, &mut OutputEntry)) -> Result<Publisher, Error> {
    let ents = awkward();
    let json = layout_json(&ents, 12, 16, 1);
    let mut rows = rows(&ents, &[], &[]);
    for (i, r) in rows.iter_mut().enumerate() {
        f(i, r);
    }
    publish(&n.0, &json, &rows, &[], 10, 1)
}

// Row 3 is "1:Channel 1.Setpoint", INT32 at output bit 24; "0:Inputs.Counter" is the 32-bit
// input at bit 0.
const SP_BIT: u32 = 24;

#[test]
fn an_entry_the_master_drives_is_never_claimed_nor_merged() {
    let n = Name::new("master-owned");
    let mut p = create(&n, |i, r| r.master = i == 3).unwrap();
    let c = Client::attach(&n.0).unwrap();
    let sp = c.entry("1:Channel 1.Setpoint").unwrap();
    let mut w = c.attach_writer("intruder").unwrap();
    let err = w.claim(&sp).unwrap_err().to_string();
    assert!(err.contains("driven by the master"), "{err}");
    // A member stores itself as the owner in the entry table (it has write access) and writes:
    // the master's own record decides, the application's value goes out.
    let row = c.geometry().entry_offset(3) + 8;
    poke(&n.path(), row as u64, &(w.slot() as u32 + 1).to_le_bytes());
    w.write(&[(&sp, Value::Signed(2_500_000))]).unwrap();
    for cycle in 0..5 {
        let mut out = [0u8; 16];
        write_bits(&mut out, SP_BIT, 32, 1_100_000);
        p.take_writes_held(&mut out, &[0; 12], cycle);
        assert_eq!(read_bits(&out, SP_BIT, 32), 1_100_000, "cycle {cycle}");
    }
    // And the configuration cannot give it to a declared writer either.
    let n2 = Name::new("master-declared");
    let e = create(&n2, |i, r| {
        r.master = i == 3;
        r.writer = (i == 3).then_some(0);
    })
    .err()
    .expect("refused");
    assert!(
        e.to_string().contains("the master drives this entry"),
        "{e}"
    );
}

#[test]
fn a_stopped_writers_position_target_holds_the_actual_value() {
    let n = Name::new("hold");
    let mut p = create(&n, |i, r| {
        if i == 3 {
            r.hold = Hold::Input(0);
            r.safe = 0;
        }
    })
    .unwrap();
    let c = Client::attach(&n.0).unwrap();
    let sp = c.entry("1:Channel 1.Setpoint").unwrap();
    let mut w = c.attach_writer("plc").unwrap();
    w.claim(&sp).unwrap();
    w.write(&[(&sp, Value::Signed(770_000))]).unwrap();
    let mut inputs = [0u8; 12];
    let mut last = [0u8; 16];
    let mut stale_at = None;
    for cycle in 1..=40u64 {
        // The drive follows the target with a lag: the actual value is 1000 counts behind.
        write_bits(&mut inputs, 0, 32, 769_000 + cycle);
        let mut out = [0u8; 16];
        let ev = p.take_writes_held(&mut out, &inputs, cycle);
        if ev
            .iter()
            .any(|e| e.kind == rtcat_shm::WriterEventKind::Stale)
        {
            stale_at = Some(cycle);
        }
        if stale_at.is_none() {
            assert_eq!(read_bits(&out, SP_BIT, 32), 770_000, "cycle {cycle}");
        }
        last = out;
    }
    let s = stale_at.expect("the writer went stale");
    // Held at the actual value of the cycle it went stale, not 0, not chasing the actual value.
    assert_eq!(read_bits(&last, SP_BIT, 32), 769_000 + s);
    // Its heartbeat is back: its values apply again; stale again: latched afresh.
    w.write(&[(&sp, Value::Signed(780_000))]).unwrap();
    let mut out = [0u8; 16];
    p.take_writes_held(&mut out, &inputs, 41);
    assert_eq!(read_bits(&out, SP_BIT, 32), 780_000);

    // The writer detaches (releases its claim): the target is not handed back to the
    // application (whose value would be a step), it is held at the actual value of that moment.
    drop(w);
    write_bits(&mut inputs, 0, 32, 779_500);
    for cycle in 42..50u64 {
        let mut out = [0u8; 16];
        write_bits(&mut out, SP_BIT, 32, 5); // the application's value
        p.take_writes_held(&mut out, &inputs, cycle);
        write_bits(&mut inputs, 0, 32, 779_000); // moves on; the target does not follow
        assert_eq!(read_bits(&out, SP_BIT, 32), 779_500, "cycle {cycle}");
    }

    // Without the input image (or no actual value mapped): the last value the writer got out.
    let n2 = Name::new("hold-out");
    let mut p = create(&n2, |i, r| {
        r.hold = if i == 3 { Hold::Output } else { Hold::None }
    })
    .unwrap();
    let c = Client::attach(&n2.0).unwrap();
    let sp = c.entry("1:Channel 1.Setpoint").unwrap();
    let mut w = c.attach_writer("plc").unwrap();
    w.claim(&sp).unwrap();
    w.write(&[(&sp, Value::Signed(-123_456))]).unwrap();
    let mut out = [0u8; 16];
    for cycle in 1..=40u64 {
        out = [0u8; 16];
        p.take_writes(&mut out, cycle);
    }
    assert_eq!(read_bits(&out, SP_BIT, 32), (-123_456i64) as u32 as u64);
    // An input offset outside the input image is a configuration error.
    let n3 = Name::new("hold-bad");
    let e = create(&n3, |i, r| {
        if i == 3 {
            r.hold = Hold::Input(90);
        }
    })
    .err()
    .expect("refused");
    assert!(e.to_string().contains("entries[3].hold"), "{e}");
}

#[test]
fn clients_refuse_an_object_the_masters_uid_did_not_create() {
    let n = Name::new("owner");
    let _p = create(&n, |_, _| {}).unwrap();
    let ours = nix::unistd::geteuid().as_raw();
    let other = if ours == 65534 { 65533 } else { 65534 };
    // The master runs as `other`: our object (a forgery, seen from a client of that master).
    let e = Client::attach_owned_by(&n.0, other).err().expect("refused");
    assert!(
        matches!(e, Error::NotMaster { uid, master_uid, .. } if uid == ours && master_uid == other),
        "{e}"
    );
    assert!(e.to_string().contains("not created by the master"), "{e}");
    assert!(Client::attach_owned_by(&n.0, ours).is_ok());
    // A verbatim copy planted by another user: refused by the default attach (our uid).
    let forged = Name::new("forged");
    std::fs::copy(n.path(), forged.path()).unwrap();
    if nix::unistd::chown(
        forged.path().as_str(),
        Some(nix::unistd::Uid::from_raw(other)),
        None,
    )
    .is_err()
    {
        assert!(
            std::env::var_os("RTCAT_REQUIRE_ROOT_TESTS").is_none(),
            "needs root (chown to another uid) but RTCAT_REQUIRE_ROOT_TESTS is set"
        );
        eprintln!("not root: cannot give the copy to another uid; skipping the planted half");
        return;
    }
    let e = Client::attach(&forged.0).err().expect("refused");
    assert!(
        matches!(e, Error::NotMaster { uid, .. } if uid == other),
        "{e}"
    );
}

#[test]
fn a_truncated_object_does_not_crash_the_publisher() {
    let n = Name::new("truncated");
    let mut p = create(&n, |_, _| {}).unwrap();
    let c = Client::attach(&n.0).unwrap();
    let w = c.attach_writer("w").unwrap();
    drop(c);
    std::mem::forget(w);
    assert!(!p.truncated());
    // What any member of the group can do: shrink the object under the master.
    std::fs::OpenOptions::new()
        .write(true)
        .open(n.path())
        .unwrap()
        .set_len(0)
        .unwrap();
    // Without the guard, the next access faults (SIGBUS) and this test process dies.
    let mut out = [0u8; 16];
    for cycle in 0..100u64 {
        p.take_writes_held(&mut out, &[0; 12], cycle);
        p.publish(
            &rtcat_shm::CycleInfo {
                cycle,
                ..Default::default()
            },
            &[0; 12],
            &out,
            [true, true],
        );
    }
    assert!(p.truncated());
    assert_eq!(std::fs::metadata(n.path()).unwrap().len(), 0);
}
