//! What FoE and EoE traffic during OP cost the cycle, and how fast they go, measured side by side
//! in one run (`cargo bench -p rtcat-master --features sim --bench mailbox`; as root for
//! SCHED_FIFO and locked memory, otherwise the figures are noisier). Prints ratios; asserts
//! nothing about times.
//!
//! Three runs per round on the in-process simulated CoE segment of `examples/coe` (3 devices;
//! the servo also serves a writable file over FoE and has an EoE endpoint), interleaved (see
//! `support/side_by_side.rs`): `none` (no mailbox traffic), `foe` (another thread writes a 1 MiB
//! file to the servo through the master's queue, again and again) and `eoe` (a ping flood: ICMP
//! echo requests of 98 bytes, as `ping -f` sends them, one after another to the servo's network,
//! each followed by one look for its reply as `ping -f` waits for it — the simulated device has
//! no network behind it, so no reply comes and the look is the reply direction's cost).

#[path = "support/side_by_side.rs"]
mod side_by_side;

use rtcat_master::acyclic::SdoClient;
use rtcat_master::{eoe, foe};
use side_by_side::Load;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const FILE: usize = 1 << 20;
/// The servo: the last of the three devices.
const SERVO: u16 = 2;
const SERVO_MAC: [u8; 6] = [0x02, 0, 0, 0, 0xec, 0x02];

fn segment() -> ecsim::SegmentSpec {
    side_by_side::example_segment(
        "coe",
        "\n[[device.file]]\nname = \"firmware.bin\"\nwritable = true\n\
         [device.eoe]\nmac = \"02:00:00:00:ec:02\"\n",
    )
}

/// The servo's mailbox through the queue, once the segment cycles.
fn mailbox(q: &SdoClient) -> Option<rtcat_master::acyclic::QueueMailbox<'_>> {
    std::thread::sleep(Duration::from_millis(500));
    q.queue_mailbox(SERVO, Duration::from_secs(2)).ok()
}

/// Columns: KiB/s of the load's data, and its messages (FoE packets, echo requests) per second.
const COLUMNS: &[&str] = &["KiB/s", "msgs/s"];

struct Foe;

impl Load for Foe {
    fn name(&self) -> &'static str {
        "foe"
    }

    fn run(&self, q: &SdoClient, done: &AtomicBool) -> Vec<f64> {
        let image: Vec<u8> = (0..FILE).map(|i| (i * 7 % 256) as u8).collect();
        let Some(mut m) = mailbox(q) else {
            return vec![0.0, 0.0];
        };
        let start = Instant::now();
        let (mut bytes, mut packets, mut base) = (0u64, 0u64, 0u64);
        let mut last = start.elapsed();
        while !done.load(Ordering::Relaxed) {
            let mut c = foe::Client::new(&mut m);
            let r = c.write("firmware.bin", 0, &image, &mut |p| {
                bytes = base + p.done;
                packets += 1;
                last = start.elapsed();
            });
            // The run ended under the transfer (or it failed): what was acknowledged counts.
            if r.is_err() {
                break;
            }
            base += FILE as u64;
        }
        let secs = last.as_secs_f64().max(1e-9);
        vec![bytes as f64 / 1024.0 / secs, packets as f64 / secs]
    }
}

/// The Internet checksum (RFC 1071) of `b`.
fn checksum(b: &[u8]) -> u16 {
    let mut sum: u32 = b
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An ICMP echo request (RFC 792) of `ping`'s default 56 data bytes from 192.168.10.1 to the
/// servo at 192.168.10.2: 98 bytes of Ethernet frame.
fn echo_request(seq: u16) -> Vec<u8> {
    let mut f = Vec::with_capacity(98);
    f.extend_from_slice(&SERVO_MAC);
    f.extend_from_slice(&[0x02, 0, 0, 0, 0xec, 0x01]);
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&84u16.to_be_bytes());
    ip[4..6].copy_from_slice(&seq.to_be_bytes());
    ip[8] = 64;
    ip[9] = 1;
    ip[12..16].copy_from_slice(&[192, 168, 10, 1]);
    ip[16..20].copy_from_slice(&[192, 168, 10, 2]);
    let c = checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    let mut icmp = vec![8u8, 0, 0, 0];
    icmp.extend_from_slice(&0x5243u16.to_be_bytes());
    icmp.extend_from_slice(&seq.to_be_bytes());
    icmp.extend((0..56u8).map(|i| i.wrapping_add(0x10)));
    let c = checksum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&icmp);
    f
}

struct EoeFlood;

impl Load for EoeFlood {
    fn name(&self) -> &'static str {
        "eoe"
    }

    fn run(&self, q: &SdoClient, done: &AtomicBool) -> Vec<f64> {
        let Some(mut m) = mailbox(q) else {
            return vec![0.0, 0.0];
        };
        let mut c = eoe::Client::new(&mut m);
        let start = Instant::now();
        let (mut sent, mut bytes) = (0u64, 0u64);
        let mut seq = 0u16;
        while !done.load(Ordering::Relaxed) {
            let f = echo_request(seq);
            if c.send_frame(&f).is_err() {
                break;
            }
            sent += 1;
            bytes += f.len() as u64;
            seq = seq.wrapping_add(1);
            // One look for the reply, as ping -f reads its reply before the next request.
            if c.poll().is_err() {
                break;
            }
        }
        let secs = start.elapsed().as_secs_f64().max(1e-9);
        vec![bytes as f64 / 1024.0 / secs, sent as f64 / secs]
    }
}

fn main() {
    assert_eq!(echo_request(0).len(), 98);
    side_by_side::compare(
        "FoE (a 1 MiB file written over and over) and EoE (a ping flood) during OP vs no \
         mailbox traffic, simulated CoE segment",
        segment,
        &[&Foe, &EoeFlood],
        COLUMNS,
    );
}
