//! Bus diagnostics: what is on the segment, read without configuring it.
//!
//! The tools of `rtcat scan`, `sii`, `counters` and `regs` (IgH's `ethercat` tool is the model).
//! A [`Probe`] talks to the subdevices by position with auto-increment addressing (APRD/APWR,
//! ETG.1000.4 §5.4.1): it changes no station address and no AL state, so it works on a segment a
//! master is not running and on exactly the faulty subdevices a diagnosis is for, where
//! ethercrab's group initialisation would stop at the first one that refuses a state change. It
//! counts the subdevices with a broadcast read (each one increments the working counter), reads
//! registers in datagrams that fit a frame, and the SII through each ESC's EEPROM interface
//! ([`eeprom`]). The layout of the process data needs the mapping the master would use, so it
//! brings the segment to PRE-OP as a run does: that is `session::read_layout`, above the
//! bring-up, not here.
//!
//! Everything returned is typed data with `serde::Serialize`; formatting is the caller's.

pub mod counters;
pub mod eeprom;
pub mod scan;

pub use counters::{ErrorCounters, PortCounters};
pub use eeprom::{SiiImage, config_area_checksum};
pub use scan::{AlState, DcSupport, EscInfo, PortKind, PortState, ScanEntry, al_status_text};

use crate::config::Config;
use ethercrab::{Command, MainDevice};
use futures_lite::future::block_on;
use std::time::Duration;
use thiserror::Error;

/// Largest register read of one [`Probe::read`] datagram: with the EtherCAT and datagram headers
/// it fits one frame of the master's PDU storage ([`crate::limits::LRW_CHUNK`] bytes of payload).
pub const READ_CHUNK: usize = 1024;

/// Largest read `rtcat regs` takes at once: 4 KiB covers the whole ESC register area
/// (0x0000..0x0FFF); process RAM beyond it is read in several commands.
pub const MAX_REGISTER_READ: usize = 4096;

/// What can go wrong in a diagnosis.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// A position the segment does not have (the user's input: exit 2).
    #[error("position {position}: {}", positions(*count))]
    Position {
        /// The position asked for.
        position: u32,
        /// Subdevices that answered.
        count: u16,
    },
    /// A register range outside the ESC's 64 KiB address space, or a length out of bounds (the
    /// user's input).
    #[error("{0}")]
    Range(String),
    /// No subdevice answered the broadcast count.
    #[error(
        "no subdevices answered: check the cable, the interface and that the segment is powered"
    )]
    NoSubdevices,
    /// A datagram failed: no answer in time, or a working counter that says the subdevice did
    /// not process it.
    #[error("{what}: {source}")]
    Bus {
        /// What was being read or written (`position 2: APRD 0x0130, 6 bytes`).
        what: String,
        /// ethercrab's error.
        source: ethercrab::error::Error,
    },
    /// A datagram came back unprocessed (working counter 0): no subdevice at the position, or
    /// its ESC does not implement the address range.
    #[error(
        "{what}: not processed (working counter 0): no subdevice at this position, or its ESC \
         does not implement these addresses"
    )]
    NotProcessed {
        /// What was being read or written.
        what: String,
    },
    /// The ESC's EEPROM interface stayed busy longer than `[bus] init_eeprom_timeout_ms`.
    #[error(
        "position {position}: SII EEPROM interface busy for more than {} ms (word {word:#06x}); \
         raise [bus] init_eeprom_timeout_ms if the EEPROM is slow",
        timeout.as_millis()
    )]
    EepromBusy {
        /// Position of the subdevice.
        position: u16,
        /// Word being read.
        word: u16,
        /// How long it waited.
        timeout: Duration,
    },
    /// The ESC refused an EEPROM read, write or reload (its control/status register 0x0502
    /// reports an error).
    #[error(
        "position {position}: SII EEPROM command on word {word:#06x} failed: {what} (0x0502 = {status:#06x})"
    )]
    EepromCommand {
        /// Position of the subdevice.
        position: u16,
        /// Word being read or written.
        word: u16,
        /// The control/status register.
        status: u16,
        /// The error bits in words.
        what: &'static str,
    },
    /// The SII image read does not decode.
    #[error("position {position}: {source}")]
    Sii {
        /// Position of the subdevice.
        position: u16,
        /// The decoder's error.
        source: crate::sii::SiiError,
    },
    /// Reading the process-data layout failed (bring-up to PRE-OP, the mapping).
    #[error(transparent)]
    Master(#[from] crate::Error),
    /// A CoE transfer failed (`rtcat sdo`, `config from-bus`).
    #[error(transparent)]
    Coe(#[from] crate::coe::Error),
    /// The mailbox transport failed (a protocol other than CoE).
    #[error(transparent)]
    Mailbox(#[from] crate::mailbox::Error),
    /// An FoE transfer or the BOOT state failed (`rtcat foe`).
    #[error(transparent)]
    Foe(#[from] crate::foe::Error),
    /// An EoE service failed (`rtcat eoe`).
    #[error(transparent)]
    Eoe(#[from] crate::eoe::Error),
    /// A register access through a [`Registers`] backend failed (a running master's acyclic
    /// queue: [`crate::acyclic::SdoFailure`]).
    #[error("{what}: {why}")]
    Remote {
        /// What was being read or written (`position 2: read 0x0130, 6 bytes`).
        what: String,
        /// Why it failed.
        why: String,
    },
}

fn positions(count: u16) -> String {
    match count {
        0 => "the segment has no subdevices".into(),
        1 => "the segment has 1 subdevice (position 0)".into(),
        n => format!("the segment has {n} subdevices (positions 0..={})", n - 1),
    }
}

impl Error {
    /// Whether the error is the user's input (a position or register range): exit 2, not 1.
    pub fn is_usage(&self) -> bool {
        match self {
            Error::Position { .. } | Error::Range(_) => true,
            Error::Master(e) => e.is_usage(),
            // A file name the device's mailbox cannot carry.
            Error::Foe(crate::foe::Error::Request(_)) => true,
            _ => false,
        }
    }
}

/// `Result` with a diagnosis [`Error`](enum@Error).
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Register access by position that a [`Probe`] can use instead of its own datagrams: a
/// running master's acyclic queue ([`crate::acyclic::SdoClient`]), so that `scan` and
/// `counters` of a running master decode exactly what they decode on an idle segment.
pub trait Registers: Sync {
    /// Read `buf.len()` bytes from register `addr` of the subdevice at `position`.
    fn read(&self, position: u16, addr: u16, buf: &mut [u8]) -> Result<()>;
    /// Write `data` to register `addr` of the subdevice at `position`.
    fn write(&self, position: u16, addr: u16, data: &[u8]) -> Result<()>;
}

enum Bus<'a> {
    /// Datagrams of our own (APRD/APWR) on a MainDevice that runs no group.
    Own(&'a MainDevice<'a>),
    /// Somebody else's register access.
    Via(&'a dyn Registers),
}

/// Raw access to the subdevices of a segment by position (no group, no state change).
pub struct Probe<'a> {
    bus: Bus<'a>,
    count: u16,
    eeprom_timeout: Duration,
}

impl<'a> Probe<'a> {
    /// Count the subdevices (broadcast read of register 0x0000) on `md`, which must not be
    /// running a group. The EEPROM timeout is `[bus] init_eeprom_timeout_ms` of `cfg`; every
    /// datagram's is `[bus] init_pdu_timeout_ms` (the MainDevice's).
    pub fn new(md: &'a MainDevice<'a>, cfg: &Config) -> Result<Probe<'a>> {
        let count = count_subdevices(md)?;
        Ok(Probe {
            bus: Bus::Own(md),
            count,
            eeprom_timeout: Duration::from_millis(cfg.bus.init_eeprom_timeout_ms.into()),
        })
    }

    /// A probe of `count` subdevices that reads and writes through `registers` (a running
    /// master: it knows the count from its bring-up).
    pub fn with_registers(registers: &'a dyn Registers, count: u16, cfg: &Config) -> Probe<'a> {
        Probe {
            bus: Bus::Via(registers),
            count,
            eeprom_timeout: Duration::from_millis(cfg.bus.init_eeprom_timeout_ms.into()),
        }
    }

    /// Subdevices that answered the count.
    pub fn count(&self) -> u16 {
        self.count
    }

    /// `position` as a position of this segment, or [`Error::Position`].
    pub fn check_position(&self, position: u32) -> Result<u16> {
        match u16::try_from(position) {
            Ok(p) if p < self.count => Ok(p),
            _ => Err(Error::Position {
                position,
                count: self.count,
            }),
        }
    }

    /// Read `buf.len()` bytes from register `addr` of the subdevice at `position` (APRD, in
    /// datagrams of at most [`READ_CHUNK`] bytes). The subdevice must answer each one (working
    /// counter 1).
    pub fn read(&self, position: u16, addr: u16, buf: &mut [u8]) -> Result<()> {
        check_range(addr, buf.len(), usize::MAX)?;
        let md = match self.bus {
            Bus::Own(md) => md,
            Bus::Via(r) => return r.read(position, addr, buf),
        };
        let mut done = 0;
        while done < buf.len() {
            let n = (buf.len() - done).min(READ_CHUNK);
            let a = addr + done as u16;
            let what = || format!("position {position}: APRD {a:#06x}, {n} bytes");
            let r = block_on(Command::aprd(position, a).receive_slice(md, n as u16))
                .map_err(|source| bus_error(what(), source))?;
            if r.len() < n {
                return Err(Error::Bus {
                    what: what(),
                    source: ethercrab::error::Error::Pdu(ethercrab::error::PduError::Decode),
                });
            }
            buf[done..done + n].copy_from_slice(&r[..n]);
            done += n;
        }
        Ok(())
    }

    /// Write `data` to register `addr` of the subdevice at `position` (APWR).
    pub(crate) fn write(&self, position: u16, addr: u16, data: &[u8]) -> Result<()> {
        let md = match self.bus {
            Bus::Own(md) => md,
            Bus::Via(r) => return r.write(position, addr, data),
        };
        block_on(Command::apwr(position, addr).send(md, data)).map_err(|source| {
            bus_error(
                format!(
                    "position {position}: APWR {addr:#06x}, {} bytes",
                    data.len()
                ),
                source,
            )
        })
    }

    /// A raw register read for `rtcat regs`: `len` bytes (1..=[`MAX_REGISTER_READ`]) from
    /// `addr`, within the 64 KiB address space.
    pub fn registers(&self, position: u32, addr: u32, len: usize) -> Result<Vec<u8>> {
        let addr = u16::try_from(addr).map_err(|_| {
            Error::Range(format!(
                "address {addr:#x}: registers are 0x0000..=0xffff (a 16-bit address)"
            ))
        })?;
        check_range(addr, len, MAX_REGISTER_READ)?;
        let position = self.check_position(position)?;
        let mut buf = vec![0u8; len];
        self.read(position, addr, &mut buf)?;
        Ok(buf)
    }

    pub(crate) fn eeprom_timeout(&self) -> Duration {
        self.eeprom_timeout
    }
}

fn bus_error(what: String, source: ethercrab::error::Error) -> Error {
    match source {
        ethercrab::error::Error::WorkingCounter { received: 0, .. } => Error::NotProcessed { what },
        source => Error::Bus { what, source },
    }
}

/// `len` bytes from `addr`: at least one, at most `max`, and not past 0xFFFF.
fn check_range(addr: u16, len: usize, max: usize) -> Result<()> {
    if len == 0 || len > max {
        return Err(Error::Range(format!(
            "length {len}: must be 1..={}",
            max.min(0x10000)
        )));
    }
    if usize::from(addr) + len > 0x10000 {
        return Err(Error::Range(format!(
            "address {addr:#06x} + length {len} ends at {:#x}, past the 64 KiB register space \
             (0x0000..=0xffff)",
            usize::from(addr) + len
        )));
    }
    Ok(())
}

/// Subdevices on the segment: the working counter of a broadcast read (ETG.1000.4 §5.4.2: each
/// subdevice that reads increments it).
pub fn count_subdevices(md: &MainDevice<'_>) -> Result<u16> {
    let r = block_on(Command::brd(0x0000).ignore_wkc().receive_slice(md, 1)).map_err(|source| {
        Error::Bus {
            what: "count the subdevices (BRD 0x0000)".into(),
            source,
        }
    })?;
    // ethercrab keeps the working counter of a reply private; comparing it with 0 gives it back
    // in the error when it differs.
    match r.wkc(0) {
        Ok(_) => Ok(0),
        Err(ethercrab::error::Error::WorkingCounter { received, .. }) => Ok(received),
        Err(source) => Err(Error::Bus {
            what: "count the subdevices (BRD 0x0000)".into(),
            source,
        }),
    }
}
