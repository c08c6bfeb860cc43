//! The floor benchmark's frames (`rtcat bench --floor`, `rtcat sim --floor-echo`): a bare
//! ping that an echo returns as received with the MAC addresses swapped, so the round trip of
//! the same-sized frame over the same socket and wire, without any EtherCAT processing, is the
//! yardstick of rtcat's own exchange. One home for the format, read by both ends.
//!
//! Layout: destination (broadcast, as ethercrab's frames), source [`PING_MAC`], EtherType
//! [`ETHERTYPE`], the 8 bytes of [`MAGIC`], the sequence number (u64, little endian), zeros to
//! the requested length. Its own EtherType keeps the pings out of the master's and the
//! simulator's EtherCAT sockets (the kernel hands each socket only its protocol), and the magic
//! keeps anything else sent with that experimental EtherType from being echoed.

use crate::ETH_HEADER_LEN;

/// IEEE Std 802 "Local Experimental EtherType 1": for experiments on a private network, never
/// assigned to a protocol.
pub const ETHERTYPE: u16 = 0x88b5;
/// Marks a ping of the floor benchmark.
pub const MAGIC: [u8; 8] = *b"rtcatFLR";
/// Source address of a ping (locally administered, unicast: 02 "rtcat"); the echo's reply is
/// addressed to it.
pub const PING_MAC: [u8; 6] = [0x02, b'r', b't', b'c', b'a', b't'];
/// Shortest ping: the headers, the magic and the sequence number.
pub const MIN_LEN: usize = ETH_HEADER_LEN + MAGIC.len() + 8;

const SEQ_AT: usize = ETH_HEADER_LEN + MAGIC.len();

/// Write ping `seq` into all of `frame` (at least [`MIN_LEN`] bytes; false, untouched, when
/// shorter).
pub fn write_ping(frame: &mut [u8], seq: u64) -> bool {
    if frame.len() < MIN_LEN {
        return false;
    }
    frame[..6].fill(0xff);
    frame[6..12].copy_from_slice(&PING_MAC);
    frame[12..14].copy_from_slice(&ETHERTYPE.to_be_bytes());
    frame[ETH_HEADER_LEN..SEQ_AT].copy_from_slice(&MAGIC);
    frame[SEQ_AT..MIN_LEN].copy_from_slice(&seq.to_le_bytes());
    frame[MIN_LEN..].fill(0);
    true
}

/// The sequence number of a floor frame (ping or reply), None for anything else.
pub fn seq(frame: &[u8]) -> Option<u64> {
    if frame.len() < MIN_LEN
        || frame[12..14] != ETHERTYPE.to_be_bytes()
        || frame[ETH_HEADER_LEN..SEQ_AT] != MAGIC
    {
        return None;
    }
    let mut b = [0u8; 8];
    b.copy_from_slice(&frame[SEQ_AT..MIN_LEN]);
    Some(u64::from_le_bytes(b))
}

/// The echo: a floor frame gets its MAC addresses swapped, nothing else (true); any other frame
/// is left as it is (false) and must not be sent back.
pub fn echo_in_place(frame: &mut [u8]) -> bool {
    if seq(frame).is_none() {
        return false;
    }
    let mut dst = [0u8; 6];
    dst.copy_from_slice(&frame[..6]);
    frame.copy_within(6..12, 0);
    frame[6..12].copy_from_slice(&dst);
    true
}

/// Whether `frame` is the echo's reply to ping `seq` (addressed back to [`PING_MAC`]).
pub fn is_reply(frame: &[u8], seq: u64) -> bool {
    frame.len() >= MIN_LEN && frame[..6] == PING_MAC && self::seq(frame) == Some(seq)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ping_echoed_is_its_reply_and_nothing_else_changed() {
        let mut f = [0xaau8; 64];
        assert!(write_ping(&mut f, 0x0102_0304_0506_0708));
        assert_eq!(seq(&f), Some(0x0102_0304_0506_0708));
        assert!(f[MIN_LEN..].iter().all(|&b| b == 0), "padded with zeros");
        assert!(!is_reply(&f, 0x0102_0304_0506_0708), "the ping itself");
        let ping = f;
        assert!(echo_in_place(&mut f));
        assert_eq!(f[..6], ping[6..12]);
        assert_eq!(f[6..12], ping[..6]);
        assert_eq!(f[12..], ping[12..]);
        assert!(is_reply(&f, 0x0102_0304_0506_0708));
        assert!(!is_reply(&f, 1), "another ping's reply");
    }

    #[test]
    fn only_floor_frames_are_echoed() {
        let mut f = [0u8; 60];
        write_ping(&mut f, 7);
        // Another EtherType (EtherCAT), a wrong magic, a frame cut before the sequence number.
        let mut ecat = f;
        ecat[12..14].copy_from_slice(&crate::ETHERCAT_ETHERTYPE.to_be_bytes());
        let mut magic = f;
        magic[ETH_HEADER_LEN] ^= 1;
        for (what, g) in [
            ("ethercat", &ecat[..]),
            ("magic", &magic[..]),
            ("short", &f[..MIN_LEN - 1]),
        ] {
            let mut g = g.to_vec();
            let before = g.clone();
            assert_eq!(seq(&g), None, "{what}");
            assert!(!echo_in_place(&mut g), "{what}");
            assert_eq!(g, before, "{what}: untouched");
        }
        let mut short = [0u8; MIN_LEN - 1];
        assert!(!write_ping(&mut short, 1));
        assert_eq!(short, [0u8; MIN_LEN - 1]);
    }
}
