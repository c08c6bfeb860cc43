//! Firmware update of one device of a running segment (`rtcat foe write POS FILE --boot
//! --control SOCK`), with the per-subdevice recovery (`[health] recovery = "subdevice"`): the
//! others keep cycling with valid data throughout.
//!
//! Everything goes through the cycle's acyclic queue ([`crate::acyclic`]), served after each
//! cycle's own work, so no step delays a cyclic frame:
//! 1. **Park** ([`SdoClient::park`]): the device leaves its recovery's hands. The next cycle
//!    tells the application ([`crate::SubdeviceChange::Parked`], cause
//!    [`crate::SubdeviceCause::FirmwareUpdate`]) before any of the following requests is served,
//!    and flags its data invalid from then on; the working counter is judged without its share
//!    as soon as it is out of OP ([`crate::cycle::judge`]).
//! 2. Its SII (fixed area, through the queue's register access): identity and the bootstrap
//!    mailbox (words 0x14..0x17, ETG.2010 Table 2).
//! 3. **INIT → BOOT** with SM0/SM1 set to the bootstrap mailbox in INIT (as [`super::boot`]
//!    does on the bus; ETG.1000.6 §6.4.1).
//! 4. The file over FoE on the bootstrap mailbox ([`super::Client`] on a
//!    [`crate::acyclic::QueueMailbox`]: one queue request per packet).
//! 5. **BOOT → INIT**, then **hand back** ([`SdoClient::hand_back`]): the recovery worker brings
//!    it to OP as after any outage (mailbox, `[[device]]` configuration, mapping, DC, SAFE-OP
//!    startup SDOs), accepting a new revision of the same vendor and product (new firmware may
//!    carry one); then this waits for OP.
//!
//! What a failure leaves: before the transfer (no bootstrap mailbox, BOOT refused, a name the
//! mailbox cannot carry) the device is handed back at once ([`UpdateError::HandedBack`]). A
//! transfer that fails half-way (the device aborts, a timeout) leaves the device parked in BOOT
//! ([`UpdateError::Parked`]): its flash may hold half an image, and driving it would run
//! whatever that is; the FoE client told the device it gave up, so the same update can simply
//! be started again (parking a parked device is allowed; BOOT → BOOT is a valid request).

use super::{Error, Limits, Progress};
use crate::acyclic::{SdoClient, SdoFailure};
use crate::config::Config;
use crate::mailbox::Geometry;
use std::time::{Duration, Instant};

/// AL control and status (ETG.1000.4 §6.4: state in bits 0..3, bit 4 error acknowledge /
/// indication; the status code at 0x0134).
const AL_CONTROL: u16 = 0x0120;
const AL_STATUS: u16 = 0x0130;
const INIT: u8 = 0x01;
const BOOT: u8 = 0x03;
const OP: u8 = 0x08;

/// Least EEPROM busy wait through the queue: every status read is one queue request, served
/// once per cycle after the cycle's own work, so the wait is counted in cycles (and in the
/// client thread's wake-ups on a loaded machine), not in the EEPROM's microseconds.
const QUEUE_EEPROM_MS: u32 = 2000;

/// `cfg` with an EEPROM timeout for reads through the queue.
fn through_queue(cfg: &Config) -> Config {
    let mut c = cfg.clone();
    c.bus.init_eeprom_timeout_ms = c.bus.init_eeprom_timeout_ms.max(QUEUE_EEPROM_MS);
    c
}

/// How long each step may wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// One queue request (the queue serves about one per cycle).
    pub request: Duration,
    /// An AL state change (a bootloader starts slowly).
    pub state: Duration,
    /// From the hand-back to OP (the recovery's attempts and backoff included).
    pub back: Duration,
    /// The FoE client's limits (busy time: a flash erase takes seconds).
    pub limits: Limits,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            request: Duration::from_secs(5),
            state: Duration::from_secs(10),
            back: Duration::from_secs(30),
            limits: Limits::default(),
        }
    }
}

/// What an update did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Updated {
    /// Position of the subdevice.
    pub position: u16,
    /// Bytes written.
    pub bytes: usize,
    /// Vendor, product, revision before (SII).
    pub before: (u32, u32, u32),
    /// After, read once it was back in OP (None: not back within [`Options::back`]).
    pub after: Option<(u32, u32, u32)>,
    /// Back in OP within [`Options::back`] (else its recovery goes on without this waiting).
    pub back_in_op: bool,
    /// Time of the FoE transfer alone.
    pub transfer: Duration,
}

/// Why an update did not complete, and where it left the device.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UpdateError {
    /// Not taken out: nothing was done (no per-subdevice recovery, being recovered, the master
    /// not cycling).
    #[error("position {position}: not taken out of the segment for the update: {why}")]
    Park {
        /// Position of the subdevice.
        position: u16,
        /// Why.
        why: String,
    },
    /// A failure before the file went: the device was handed back to its recovery.
    #[error("{source}; nothing was written, position {position} was handed back to its recovery")]
    HandedBack {
        /// Position of the subdevice.
        position: u16,
        /// What failed.
        source: Box<Error>,
    },
    /// The transfer failed: the device stays parked (in BOOT as far as the master knows), out
    /// of its recovery's hands; the same update can be started again.
    #[error(
        "{source}; position {position} stays parked in BOOT (out of the cycle, its recovery \
         leaves it alone): run the update again to start over"
    )]
    Parked {
        /// Position of the subdevice.
        position: u16,
        /// What failed.
        source: Box<Error>,
    },
    /// The file was written but the device could not be given back.
    #[error(
        "position {position}: the file was written, but the device could not be handed back to \
         its recovery: {why}"
    )]
    HandBack {
        /// Position of the subdevice.
        position: u16,
        /// Why.
        why: String,
    },
}

impl UpdateError {
    /// A usage error (a name the device's mailbox cannot carry) rather than a runtime one.
    pub fn is_request(&self) -> bool {
        matches!(self, UpdateError::HandedBack { source, .. } if matches!(**source, Error::Request(_)))
    }
}

/// The queue's register access, in its request-sized pieces.
struct QueueRegisters<'q> {
    q: &'q SdoClient,
    timeout: Duration,
}

impl crate::diag::Registers for QueueRegisters<'_> {
    fn read(&self, position: u16, addr: u16, buf: &mut [u8]) -> crate::diag::Result<()> {
        for (k, chunk) in buf.chunks_mut(crate::acyclic::MAX_SDO_BYTES).enumerate() {
            let a = addr.wrapping_add((k * crate::acyclic::MAX_SDO_BYTES) as u16);
            let d = self
                .q
                .read_register(position, a, chunk.len() as u8, self.timeout)
                .map_err(|e| crate::diag::Error::Remote {
                    what: format!("position {position}: read {a:#06x}"),
                    why: e.to_string(),
                })?;
            chunk.copy_from_slice(d.as_slice());
        }
        Ok(())
    }

    fn write(&self, position: u16, addr: u16, data: &[u8]) -> crate::diag::Result<()> {
        self.q
            .write_register(position, addr, data, self.timeout)
            .map_err(|e| crate::diag::Error::Remote {
                what: format!("position {position}: write {addr:#06x}"),
                why: e.to_string(),
            })
    }
}

fn state_name(s: u8) -> &'static str {
    match s {
        1 => "INIT",
        2 => "PRE-OP",
        3 => "BOOT",
        4 => "SAFE-OP",
        8 => "OP",
        _ => "an unknown state",
    }
}

/// What the SII says.
struct Found {
    identity: (u32, u32, u32),
    boot: Result<Geometry, Error>,
}

/// One device's side of the update, through the queue.
struct Device<'q> {
    q: &'q SdoClient,
    position: u16,
    opt: Options,
}

impl Device<'_> {
    fn fail(&self, why: String) -> Error {
        Error::State {
            position: self.position,
            why,
        }
    }

    fn queue(&self, what: &str) -> impl FnOnce(SdoFailure) -> Error + '_ {
        let what = what.to_string();
        move |e| self.fail(format!("{what}: {e}"))
    }

    fn write(&self, reg: u16, data: &[u8], what: &str) -> Result<(), Error> {
        self.q
            .write_register(self.position, reg, data, self.opt.request)
            .map_err(self.queue(what))
    }

    /// AL status and code.
    fn al_status(&self) -> Result<(u8, u16), Error> {
        let d = self
            .q
            .read_register(self.position, AL_STATUS, 6, self.opt.request)
            .map_err(self.queue("AL status (0x0130)"))?;
        let b = d.as_slice();
        Ok((b[0], u16::from_le_bytes([b[4], b[5]])))
    }

    /// Request `state` (an error indication acknowledged) and wait for it.
    fn to_state(&self, state: u8) -> Result<(), Error> {
        let name = state_name(state);
        self.write(AL_CONTROL, &[state | 0x10, 0], &format!("request {name}"))?;
        let end = Instant::now() + self.opt.state;
        loop {
            let (s, code) = self.al_status()?;
            if s & 0x10 != 0 {
                return Err(self.fail(format!(
                    "the device refused {name}: AL status code {code:#06x} ({}), it is in {}",
                    crate::diag::al_status_text(code),
                    state_name(s & 0x0f)
                )));
            }
            if s & 0x0f == state {
                return Ok(());
            }
            if Instant::now() >= end {
                return Err(self.fail(format!(
                    "not in {name} within {} ms (AL status: {})",
                    self.opt.state.as_millis(),
                    state_name(s & 0x0f)
                )));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// INIT, SM0/SM1 = the bootstrap mailbox `g` (disabled first), BOOT.
    fn enter_boot(&self, g: &Geometry) -> Result<(), Error> {
        self.to_state(INIT)?;
        for reg in [0x0806u16, 0x080e] {
            self.write(reg, &[0], "disable the mailbox SM")?;
        }
        self.write(0x0800, &g.registers(), "bootstrap mailbox SM0/SM1")?;
        self.to_state(BOOT)
    }

    /// Identity and bootstrap mailbox (or why it has none) from the SII's fixed area.
    fn sii(&self, cfg: &Config) -> Result<Found, Error> {
        let regs = QueueRegisters {
            q: self.q,
            timeout: self.opt.request,
        };
        let probe = crate::diag::Probe::with_registers(&regs, self.position + 1, cfg);
        let img = probe
            .read_sii(self.position, Some(&[]))
            .map_err(|e| self.fail(format!("its SII: {e}")))?;
        let sii =
            crate::sii::Sii::parse(&img.bytes).map_err(|e| self.fail(format!("its SII: {e}")))?;
        let boot = Geometry::bootstrap_from_sii(self.position, &sii).map_err(Error::from);
        Ok(Found {
            identity: (sii.vendor_id, sii.product_code, sii.revision),
            boot,
        })
    }

    /// Wait for OP after the hand-back.
    fn back_in_op(&self) -> bool {
        let end = Instant::now() + self.opt.back;
        while Instant::now() < end {
            if self.al_status().is_ok_and(|(s, _)| s & 0x1f == OP) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

/// One update: what goes where.
#[derive(Debug, Clone, Copy)]
pub struct Job<'a> {
    /// Position of the subdevice.
    pub position: u16,
    /// The file's name on the device.
    pub name: &'a str,
    /// The password the device asks for (0: none).
    pub password: u32,
    /// The image.
    pub data: &'a [u8],
}

/// Write `job`'s image to the device of the running segment `q` serves, in its BOOT state, and
/// give it back to its recovery (see the module). `cfg` is the running master's (its EEPROM
/// timeout). `progress` is called after every acknowledged packet.
pub fn update(
    q: &SdoClient,
    cfg: &Config,
    job: Job<'_>,
    opt: &Options,
    progress: &mut dyn FnMut(Progress),
) -> Result<Updated, UpdateError> {
    let Job {
        position,
        name,
        password,
        data,
    } = job;
    let cfg = &through_queue(cfg);
    if name.is_empty() || name.len() > super::MAX_NAME {
        return Err(UpdateError::Park {
            position,
            why: format!(
                "file name {name:?}: a device file name has 1..={} bytes",
                super::MAX_NAME
            ),
        });
    }
    q.park(position, opt.request)
        .map_err(|e| UpdateError::Park {
            position,
            why: e.to_string(),
        })?;
    let dev = Device {
        q,
        position,
        opt: *opt,
    };
    // The recovery takes it from whatever state it is in (INIT with the error acknowledged
    // first, BOOT included).
    let hand_back = |source: Error| -> UpdateError {
        match q.hand_back(position, opt.request) {
            Ok(()) => UpdateError::HandedBack {
                position,
                source: Box::new(source),
            },
            Err(e) => UpdateError::HandBack {
                position,
                why: format!("{source}; then: {e}"),
            },
        }
    };
    let Found {
        identity: before,
        boot,
    } = match dev.sii(cfg) {
        Ok(x) => x,
        Err(e) => return Err(hand_back(e)),
    };
    let boot = match boot {
        Ok(g) => g,
        Err(e) => return Err(hand_back(e)),
    };
    let parked = |source: Error| UpdateError::Parked {
        position,
        source: Box::new(source),
    };
    if let Err(e) = dev.enter_boot(&boot) {
        return Err(hand_back(e));
    }
    let t = Instant::now();
    let written = (|| -> Result<(), Error> {
        let mut mbx = q
            .queue_mailbox(position, opt.request)
            .map_err(dev.queue("the bootstrap mailbox"))?;
        let mut client = super::Client::new(&mut mbx);
        client.set_limits(opt.limits);
        client.write(name, password, data, progress)
    })();
    let transfer = t.elapsed();
    match written {
        Ok(()) => {}
        // Refused before a byte went (the name does not fit the bootstrap mailbox).
        Err(e @ Error::Request(_)) => return Err(hand_back(e)),
        Err(e) => return Err(parked(e)),
    }
    dev.to_state(INIT).map_err(parked)?;
    q.hand_back(position, opt.request)
        .map_err(|e| UpdateError::HandBack {
            position,
            why: e.to_string(),
        })?;
    let back_in_op = dev.back_in_op();
    let after = if back_in_op {
        let regs = QueueRegisters {
            q,
            timeout: opt.request,
        };
        crate::diag::Probe::with_registers(&regs, position + 1, cfg)
            .read_identity(position)
            .ok()
    } else {
        None
    };
    Ok(Updated {
        position,
        bytes: data.len(),
        before,
        after,
        back_in_op,
        transfer,
    })
}
