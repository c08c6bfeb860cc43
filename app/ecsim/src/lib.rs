//! `ecsim`: a simulated EtherCAT segment.
//!
//! A software model of a chain of EtherCAT SubDevice Controllers, faithful enough for an
//! unmodified ethercrab MainDevice to scan it, configure it from the SII EEPROM, walk it to OP and
//! exchange process data. Two transports: in-process ([`inproc`]) and a raw-socket responder on a
//! network interface ([`wire`]). Faults are injected at run time through [`faults::Faults`].

pub mod cia402;
pub mod coe;
pub mod control;
pub mod dc;
pub mod eoe;
pub mod esc;
pub mod faults;
pub mod foe;
pub mod frame;
pub mod inproc;
pub mod link;
pub mod mailbox;
#[cfg(feature = "netns")]
pub mod netns;
#[cfg(feature = "testkit")]
pub mod noise;
pub mod od;
mod odspec;
pub mod pdi;
pub mod pdo;
pub mod port;
pub mod segment;
pub mod sii;
pub mod spec;
mod station;
pub mod wire;

pub use faults::{FaultCommand, FaultState, Faults};
pub use port::SimPort;
pub use segment::{Disposition, Segment, SegmentStats};
pub use spec::{CoePdo, CoeSpec, DeviceSpec, EscTiming, SegmentSpec};
