//! The PRE-OP `[[device]]` configuration of several subdevices at once (`[bus]
//! config_in_flight`), seen from the wire: a link between the master and the simulated segment
//! (`Target::Link`) records the station of every SDO request written into a mailbox, and the
//! application's `configure` (which runs once the configuration and the mapping read-back are
//! done) marks where that phase ends. One at a time, each subdevice's requests are one block;
//! overlapped, a second subdevice's requests come before the first one's are done. And a
//! refusal overlapped is attributed as one at a time: the lowest failing position's error,
//! even when a higher position failed first.

use ecsim::{EscTiming, SegmentSpec, SimPort};
use rtcat_master::{
    AppError, Application, Config, Cycle, Link, LinkFactory, RunSpec, Setup, Stop, Target,
};
use std::io;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;
mod support;

use support::coe_example::{self, CONFIG};

/// The tests share the machine's two CPUs: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// What the wire and the application showed, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    /// An SDO request (CoE service 2) written into the mailbox of the station, for the object.
    Request { station: u16, index: u16, sub: u8 },
    /// An SDO abort the station sent.
    Abort { station: u16, index: u16, sub: u8 },
    /// The application's `configure` ran.
    Configured,
}

type Log = Arc<Mutex<Vec<Event>>>;

/// The SDO requests and aborts in an EtherCAT frame (ETG.1000.4 §5.4: Ethernet header 14,
/// EtherCAT header 2, then datagrams of header 10, data, working counter 2): FPWR (0x05) or
/// FPRD (0x04) data that is a CoE mailbox (header byte 5 type 3) holding an SDO request (CoE
/// header bits 12..15 = 2: the master's requests, and a device's abort).
fn sdos(frame: &[u8], responses: bool, out: &mut Vec<Event>) {
    let mut at = 16;
    while at + 10 <= frame.len() {
        let cmd = frame[at];
        let station = u16::from_le_bytes([frame[at + 2], frame[at + 3]]);
        let flags = u16::from_le_bytes([frame[at + 6], frame[at + 7]]);
        let len = usize::from(flags & 0x07ff);
        let Some(d) = frame.get(at + 10..at + 10 + len) else {
            return;
        };
        let wanted = if responses { 0x04 } else { 0x05 };
        if cmd == wanted && d.len() >= 12 && d[5] & 0x0f == 3 {
            let service = u16::from_le_bytes([d[6], d[7]]) >> 12;
            let index = u16::from_le_bytes([d[9], d[10]]);
            let sub = d[11];
            match (responses, service, d[8] >> 5) {
                (false, 2, _) => out.push(Event::Request {
                    station,
                    index,
                    sub,
                }),
                // Command specifier 4: abort (the device sends it as an SDO request,
                // ETG.1000.6 §5.6.2.7; SOEM checks it so too).
                (true, 2, 4) => out.push(Event::Abort {
                    station,
                    index,
                    sub,
                }),
                _ => {}
            }
        }
        if flags & 0x8000 == 0 {
            return;
        }
        at += 10 + len + 2;
    }
}

/// Forwards to the simulated segment and records the SDO traffic.
struct Recording {
    inner: SimPort,
    log: Log,
}

impl Link for Recording {
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        let mut ev = Vec::new();
        sdos(frame, false, &mut ev);
        if !ev.is_empty() {
            self.log.lock().unwrap().extend(ev);
        }
        Link::send(&mut self.inner, frame)
    }
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let r = Link::recv(&mut self.inner, buf)?;
        if let Some(n) = r {
            let mut ev = Vec::new();
            sdos(&buf[..n], true, &mut ev);
            if !ev.is_empty() {
                self.log.lock().unwrap().extend(ev);
            }
        }
        Ok(r)
    }
    fn wait(&mut self, timeout: Duration, extra_fd: Option<RawFd>) -> io::Result<()> {
        self.inner.wait(timeout, extra_fd)
    }
    fn describe(&self) -> String {
        format!("recording {}", self.inner.describe())
    }
}

/// The example's devices repeated to `n`, answering a mailbox request after 1 ms
/// (docs/NOTES.md §7.4) so that there is a wait to overlap.
fn segment(n: usize) -> SegmentSpec {
    coe_example::segment(n).with_timing(EscTiming {
        mailbox_ns: 1_000_000,
        ..EscTiming::default()
    })
}

/// `text` with the segment checks dropped and the servo entry by identity (every third device
/// is one), `in_flight` subdevices configured at a time.
fn config(text: &str, in_flight: u16) -> Config {
    let mut c = coe_example::config(text);
    c.bus.config_in_flight = in_flight;
    c
}

/// Marks `configure` and stops after a few cycles.
struct Marker {
    log: Log,
    stop: Stop,
    cycles: u32,
}

impl Application for Marker {
    fn configure(&mut self, _setup: &mut Setup<'_>) -> Result<(), AppError> {
        self.log.lock().unwrap().push(Event::Configured);
        Ok(())
    }
    fn cycle(&mut self, _cx: &mut Cycle<'_>) {
        self.cycles += 1;
        if self.cycles >= 5 {
            self.stop.request();
        }
    }
}

/// One run over the recording link: its result and what it recorded.
fn run(seg: SegmentSpec, cfg: Config) -> (rtcat_master::Result<()>, Vec<Event>) {
    let log: Log = Arc::default();
    let l = log.clone();
    let factory = LinkFactory::new("recording-sim", move || {
        Ok(Box::new(Recording {
            inner: SimPort::new(seg.clone()),
            log: l.clone(),
        }) as Box<dyn Link>)
    });
    let stop = Stop::new();
    let mut spec = RunSpec::new(cfg, Target::Link(factory), stop.clone());
    spec.no_rt = true;
    spec.duration = Some(Duration::from_secs(60));
    let mut app = Marker {
        log: log.clone(),
        stop,
        cycles: 0,
    };
    let r = rtcat_master::run_simple(spec, &mut app).map(|_| ());
    let events = log.lock().unwrap().clone();
    (r, events)
}

/// The stations of the SDO requests of the configuration phase, in wire order.
fn configuration_requests(events: &[Event]) -> Vec<u16> {
    events
        .iter()
        .take_while(|e| **e != Event::Configured)
        .filter_map(|e| match e {
            Event::Request { station, .. } => Some(*station),
            _ => None,
        })
        .collect()
}

/// The objects of one station's SDO requests in the configuration phase, in order.
fn objects(events: &[Event], of: u16) -> Vec<(u16, u8)> {
    events
        .iter()
        .take_while(|e| **e != Event::Configured)
        .filter_map(|e| match *e {
            Event::Request {
                station,
                index,
                sub,
            } if station == of => Some((index, sub)),
            _ => None,
        })
        .collect()
}

/// A station whose requests are split by another station's, with that other station: the
/// first device's sequence was not done when the second one's began.
fn interleaved(stations: &[u16]) -> Option<(u16, u16)> {
    let mut done: Vec<u16> = Vec::new();
    for w in stations.windows(2) {
        if w[0] != w[1] {
            if done.contains(&w[1]) {
                return Some((w[1], w[0]));
            }
            done.push(w[0]);
        }
    }
    None
}

#[test]
fn the_configuration_of_several_devices_overlaps_on_the_wire() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // One at a time: each subdevice's requests are one block (a defect that interleaved them
    // there would fail here; this is also what shows the recorder sees the requests at all).
    // Overlapped: some device's requests are on the wire before another one's are done. That
    // the threads got the CPU to do so is the machine's verdict (retried, as is a timeout);
    // with 1 ms per answer and 6 devices it holds unless a thread was starved for the whole
    // phase.
    ecsim::noise::within_machine_noise("overlapped configuration", |_| {
        // One at a time: each subdevice's requests are one block (a defect that interleaved
        // them there would fail here; it also shows the recorder sees the requests at all).
        let (r, seq_events) = run(segment(6), config(CONFIG, 1));
        match r {
            Ok(()) => {}
            Err(e) if support::timed_out(&e) => return Err(format!("run: {e}")),
            Err(e) => panic!("one at a time: {e}"),
        }
        let seq = configuration_requests(&seq_events);
        let stations: std::collections::BTreeSet<u16> = seq.iter().copied().collect();
        // Every device has its mapping read at least (all of them have CoE).
        assert_eq!(stations.len(), 6, "{seq:x?}");
        assert_eq!(interleaved(&seq), None, "one at a time: {seq:x?}");
        let (r, events) = run(segment(6), config(CONFIG, 8));
        match r {
            Ok(()) => {}
            Err(e) if support::timed_out(&e) => return Err(format!("run: {e}")),
            Err(e) => panic!("overlapped: {e}"),
        }
        let ovl = configuration_requests(&events);
        // The same requests per device as one at a time, in the same order.
        for &st in &stations {
            assert_eq!(
                objects(&events, st),
                objects(&seq_events, st),
                "station {st:#06x}"
            );
        }
        ecsim::noise::ensure(interleaved(&ovl).is_some(), || {
            format!("no device's requests came before another's were done: {ovl:x?}")
        })
    });
}

/// Every analog input module (positions 1, 4) refuses its 8th request, a startup SDO after its
/// PDO assignment; every servo (positions 2, 5) its first, an object it does not have.
const REFUSED: &str = r#"
[bus]
interface = "sim"

[[device]]
vendor_id = 0x00000766
product_id = 0x00030002
pdo_assign = { sm3 = [0x1A00, 0x1A01, 0x1A02, 0x1A03] }

[[device.sdo]]
index = 0x8000
sub = 0x06
type = "bool"
value = true

[[device.sdo]]
index = 0x8000
sub = 0x15
type = "u16"
value = 8

[[device]]
vendor_id = 0x00000766
product_id = 0x00030003

[[device.sdo]]
index = 0x2000
sub = 0
type = "u16"
value = 5
"#;

#[test]
fn a_refusal_overlapped_names_the_lowest_failing_position_even_when_a_higher_one_failed_first() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let errors = ecsim::noise::within_machine_noise("refusals overlapped", |_| {
        let mut errors = Vec::new();
        let mut aborts = Vec::new();
        for in_flight in [1, 8] {
            let mut cfg = Config::parse(REFUSED, "refused.toml").expect("configuration");
            cfg.bus.config_in_flight = in_flight;
            let (r, events) = run(segment(6), cfg);
            let e = match r {
                Ok(()) => panic!("{in_flight} in flight: the bring-up succeeded"),
                Err(e) if support::timed_out(&e) => return Err(format!("run: {e}")),
                Err(e) => e,
            };
            assert!(
                matches!(e, rtcat_master::Error::Device(_)),
                "{in_flight} in flight: {e:?}"
            );
            errors.push(e.to_string());
            aborts.push(
                events
                    .iter()
                    .filter_map(|e| match *e {
                        Event::Abort {
                            station,
                            index,
                            sub,
                        } => Some((station.wrapping_sub(0x1000), index, sub)),
                        _ => None,
                    })
                    .collect::<Vec<_>>(),
            );
        }
        // One at a time the first device that refuses is the only one asked.
        assert_eq!(aborts[0], [(1, 0x8000, 0x15)], "one at a time");
        // Overlapped, the servo at position 2 refused before the module at position 1 did:
        // the case this test is about (the machine's scheduling decides it, so retried).
        let at = |who: (u16, u16, u8)| aborts[1].iter().position(|a| *a == who);
        ecsim::noise::ensure(
            matches!((at((2, 0x2000, 0)), at((1, 0x8000, 0x15))), (Some(a), Some(b)) if a < b),
            || format!("overlapped, the aborts came in the order {:x?}", aborts[1]),
        )?;
        Ok(errors)
    });
    for w in [
        "subdevice at position 1 (AI4-COE, device[0])",
        "write 0x8000:15 = 8 (u16)",
        "0x06090030",
    ] {
        assert!(errors[1].contains(w), "{}\nwanted {w}", errors[1]);
    }
    assert_eq!(errors[0], errors[1]);
}
