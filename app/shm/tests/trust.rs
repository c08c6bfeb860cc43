//! The trust boundary of the image (issue 26): entries the master drives are never a writer's,
//! a stopped writer's position target holds the actual value, clients refuse a socket whose
//! peer is not the master's uid, what is handed out cannot be written (the image) nor resized
//! (anything), and a writer can touch only its own slot and entries.

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
    // A member asks the master directly, bypassing the client library: refused.
    let b = n.1.get().unwrap();
    let e = b.claim(w.slot() as u32, 3, std::process::id()).unwrap_err();
    assert!(e.to_string().contains("driven by the master"), "{e}");
    // It writes the target's bits into its own object anyway: the master's own record
    // decides, the application's value goes out.
    assert!(
        w.write(&[(&sp, Value::Signed(2_500_000))]).is_err(),
        "not owned"
    );
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
fn clients_refuse_a_socket_whose_peer_is_not_the_masters_uid() {
    let n = Name::new("owner");
    let _p = create(&n, |_, _| {}).unwrap();
    let ours = nix::unistd::geteuid().as_raw();
    let other = if ours == 65534 { 65533 } else { 65534 };
    // The master runs as `other`: a socket served by our uid is not it, whatever it serves.
    let e = Client::attach_owned_by(&n.0, other).err().expect("refused");
    assert!(
        matches!(e, Error::NotMaster { uid, master_uid, .. } if uid == ours && master_uid == other),
        "{e}"
    );
    assert!(e.to_string().contains("it is not the master"), "{e}");
    assert!(Client::attach_owned_by(&n.0, ours).is_ok());
}

#[test]
fn what_is_handed_out_cannot_be_written_or_resized_and_the_master_keeps_cycling() {
    use nix::fcntl::{FallocateFlags, fallocate};
    use nix::sys::mman::{MapFlags, ProtFlags, mmap};
    let n = Name::new("sealed");
    let mut p = create(&n, |_, _| {}).unwrap();
    let c = Client::attach(&n.0).unwrap();
    let b = n.1.get().unwrap();
    let image = b.image().unwrap();
    let (pid, uid) = (std::process::id(), nix::unistd::geteuid().as_raw());
    let mut out = [0u8; 16];
    let grant = b.attach_writer("w", pid, uid);
    p.take_writes(&mut out, 0);
    let grant = grant.unwrap();
    let len = std::num::NonZeroUsize::new(4096).unwrap();
    // The image: no write(2), no writable shared mapping, no size change, no hole.
    let f = std::fs::File::from(image.try_clone().unwrap());
    let e = std::os::unix::fs::FileExt::write_at(&f, b"x", 0).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(nix::libc::EPERM), "write: {e}");
    // SAFETY: a fresh mapping, unmapped below if it was made.
    let m = unsafe {
        mmap(
            None,
            len,
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
            MapFlags::MAP_SHARED,
            &image,
            0,
        )
    };
    assert_eq!(m.err(), Some(nix::errno::Errno::EPERM), "writable mapping");
    for fd in [&image, &grant.fd] {
        assert_eq!(nix::unistd::ftruncate(fd, 0), Err(nix::errno::Errno::EPERM));
        assert_eq!(
            nix::unistd::ftruncate(fd, 1 << 30),
            Err(nix::errno::Errno::EPERM)
        );
        // No seal can be removed or added.
        assert_eq!(
            nix::fcntl::fcntl(
                fd,
                nix::fcntl::FcntlArg::F_ADD_SEALS(nix::fcntl::SealFlag::F_SEAL_WRITE)
            ),
            Err(nix::errno::Errno::EPERM)
        );
    }
    assert_eq!(
        fallocate(
            &image,
            FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE,
            0,
            4096
        ),
        Err(nix::errno::Errno::EPERM)
    );
    for cycle in 1..100u64 {
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
    assert!(!p.truncated());
    assert_eq!(c.snapshot().unwrap().cycle, 99);
    // Nothing of it is a file in /dev/shm: the descriptors are memfds.
    for fd in [&image, &grant.fd] {
        let link = std::fs::read_link(format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(fd)
        ))
        .unwrap();
        let l = link.display().to_string();
        assert!(l.starts_with("/memfd:rtcat"), "{l}");
    }
}

#[test]
fn a_writer_touches_only_its_own_slot_and_entries() {
    let n = Name::new("own");
    let mut p = create(&n, |_, _| {}).unwrap();
    let c = Client::attach(&n.0).unwrap();
    let sp = c.entry("1:Channel 1.Setpoint").unwrap();
    let word = c.entry("0:Outputs.Word").unwrap();
    let mut a = c.attach_writer("a").unwrap();
    let mut w = c.attach_writer("b").unwrap();
    a.claim(&sp).unwrap();
    w.claim(&word).unwrap();
    // Another writer's entry: refused by the master, with the owner's name.
    let e = w.claim(&sp).unwrap_err().to_string();
    assert!(e.contains("owned by writer \"a\""), "{e}");
    // Another process asking for a's slot (as the master sees it: another pid): refused.
    let b = n.1.get().unwrap();
    let e = b
        .claim(a.slot() as u32, 2, std::process::id() + 1)
        .unwrap_err();
    assert!(e.to_string().contains("not a writer this process"), "{e}");
    let e = b
        .release(a.slot() as u32, 3, std::process::id() + 1)
        .unwrap_err();
    assert!(e.to_string().contains("not a writer this process"), "{e}");
    // b writes its word; a's setpoint is a's, whatever b stages at those bits in its object.
    a.write(&[(&sp, Value::Signed(42))]).unwrap();
    w.write(&[(&word, Value::Unsigned(7))]).unwrap();
    let mut out = [0u8; 16];
    for cycle in 0..3 {
        out = [0u8; 16];
        p.take_writes(&mut out, cycle);
    }
    assert_eq!(read_bits(&out, SP_BIT, 32), 42);
    assert_eq!(read_bits(&out, 5, 16), 7);
    // The two writers' objects are distinct files.
    assert_ne!(a.slot(), w.slot());
    // When a goes, its claim ends: b can take the setpoint.
    drop(a);
    p.take_writes(&mut out, 3);
    w.claim(&sp).unwrap();
}
