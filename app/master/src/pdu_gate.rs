//! One frame outstanding at a time for the threads of a bring-up that overlap their devices'
//! slow parts (SII busy times, mailbox answers).
//!
//! ethercrab 0.7.1 finds a response's frame by the first PDU's 8-bit index among all its
//! frames (`frame_index_by_first_pdu_index`), including frames whose response was received
//! but not yet taken by their (descheduled) thread; 256 PDUs later the index repeats and a
//! response lands on that stale frame ("Failed to claim receiving frame") and is lost. A
//! frame created and consumed under this lock cannot meet that, while the devices' own delays
//! still overlap between frames (docs/NOTES.md §17.1). Every frame of rtcat's SII reads
//! (`mapping`) and of its mailbox transport on the bus (`mailbox::BusPort`) goes through it;
//! ethercrab's own requests do not, so they must not run beside gated threads.

static PDU_GATE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Run `what` (one datagram: its creation, send and the taking of its response) holding the
/// gate. Not for the cyclic thread: a lock there would wait on a bring-up's frame.
pub(crate) fn gated<T>(what: impl FnOnce() -> T) -> T {
    let _g = PDU_GATE.lock().unwrap_or_else(|p| p.into_inner());
    what()
}
