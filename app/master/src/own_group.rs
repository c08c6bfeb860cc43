//! The segment in OP as rtcat's own bring-up left it (`[bus] bring_up = "rtcat"`,
//! docs/NOTES.md §17.4): its stations and image, the AL states of all of them moved together,
//! and the way back to INIT. A leaf below the bring-ups: `bringup` names it in its
//! `AnyGroup`, `own_bringup` builds it.

use crate::error::{Error, Result};
use ethercrab::{Command, MainDevice};
use futures_lite::future::block_on;
use std::time::Duration;

/// Who may access the SII (0x0500, ETG.1000.4 Table 48): the master, or the device's PDI.
/// Some devices need their PDI to have it for INIT -> PRE-OP (ETG.2010, `Eeprom/@AssignToPd`):
/// it is given for that transition and taken back after, as ethercrab 0.7.1 does
/// (`configure_mailboxes`), on every subdevice at once.
pub(crate) fn sii_owner(md: &MainDevice<'static>, pdi: bool) -> Result<()> {
    // 2 first: cancels an access under way and gives the master the interface (ethercrab's
    // `set_eeprom_mode`).
    for v in [2u16, u16::from(pdi)] {
        block_on(Command::bwr(0x0500).ignore_wkc().send(md, v))
            .map_err(|e| Error::bus("SII access (0x0500)", e))?;
    }
    Ok(())
}

/// The segment in OP as rtcat brought it up.
#[derive(Debug)]
pub(crate) struct OwnGroup {
    /// Station addresses by position.
    addresses: Vec<u16>,
    /// Names by position (for messages).
    names: Vec<String>,
    /// The image: its logical start and length (inputs, then outputs).
    image: (u32, usize),
}

impl OwnGroup {
    /// The subdevices at `addresses` (with their `names`, by position) and their image
    /// (logical start, length).
    pub(crate) fn new(addresses: Vec<u16>, names: Vec<String>, image: (u32, usize)) -> OwnGroup {
        OwnGroup {
            addresses,
            names,
            image,
        }
    }

    /// Outputs to zero, then SAFE-OP, PRE-OP and INIT, as ethercrab's group is shut down.
    /// Errors are reported, not fatal: results still get written.
    pub(crate) fn shut_down(&self, md: &MainDevice<'static>, timeout: Duration) -> Result<()> {
        zero_outputs(md, self.image).map_err(|e| Error::bus("last cycle with zero outputs", e))?;
        let st = states::Stations {
            md,
            addresses: &self.addresses,
            names: &self.names,
        };
        for state in [
            crate::al_state::SAFE_OP,
            crate::al_state::PRE_OP,
            crate::al_state::INIT,
        ] {
            st.to_all(state, timeout)?;
        }
        Ok(())
    }
}

/// The image at `image` (logical start, length) exchanged once with every output zero, as
/// LRWs of [`crate::limits::LRW_CHUNK`] bytes (the cycle's): while the subdevices go to OP,
/// and as the last cycle of a shut-down.
pub(crate) fn zero_outputs(
    md: &MainDevice<'static>,
    (start, len): (u32, usize),
) -> std::result::Result<(), ethercrab::error::Error> {
    let zeros = [0u8; crate::limits::LRW_CHUNK];
    let mut done = 0;
    while done < len {
        let n = (len - done).min(zeros.len());
        block_on(
            Command::lrw(start + done as u32)
                .ignore_wkc()
                .send_receive_slice(md, &zeros[..n]),
        )?;
        done += n;
    }
    Ok(())
}

/// AL states of many subdevices at once.
pub(crate) mod states {
    use crate::error::{Error, Result};
    use ethercrab::{Command, MainDevice};
    use futures_lite::future::block_on;
    use std::time::{Duration, Instant};

    /// AL control (ETG.1000.4 §6.3.1) and AL status with its code (§6.3.2, 0x0134).
    const AL_CONTROL: u16 = 0x0120;
    const AL_STATUS: u16 = 0x0130;

    /// The subdevices whose states move together.
    pub(crate) struct Stations<'a> {
        pub(crate) md: &'a MainDevice<'static>,
        pub(crate) addresses: &'a [u16],
        pub(crate) names: &'a [String],
    }

    impl Stations<'_> {
        fn who(&self, i: usize) -> String {
            format!(
                "position {i} ({})",
                self.names.get(i).map_or("?", String::as_str)
            )
        }

        /// Request `state` of every subdevice, then wait until all are there, at most
        /// `timeout` (`[bus] state_timeout_ms`): each round reads the AL status of those not
        /// there yet (one by one: a broadcast read would count the other devices on the
        /// segment too, the region's members, which have states of their own). A subdevice
        /// that reports an AL error or stops answering fails it at once, one not there in
        /// time when the time is up, each named with its state and code.
        pub(crate) fn to_all(&self, state: u8, timeout: Duration) -> Result<()> {
            self.to_all_between(state, timeout, || Ok(Duration::from_micros(200)))
        }

        /// [`Stations::to_all`] with `between` called after each round that left a subdevice
        /// on its way: what it does goes on while they change state (process data for a
        /// drive that wants SYNC0-aligned frames before OP), what it returns is how long to
        /// wait before the next round.
        pub(crate) fn to_all_between(
            &self,
            state: u8,
            timeout: Duration,
            mut between: impl FnMut() -> Result<Duration>,
        ) -> Result<()> {
            for (i, &a) in self.addresses.iter().enumerate() {
                block_on(Command::fpwr(a, AL_CONTROL).send(self.md, [state, 0])).map_err(|e| {
                    Error::bus(format!("{}: request state {state:#x}", self.who(i)), e)
                })?;
            }
            let start = Instant::now();
            let mut waiting: Vec<usize> = (0..self.addresses.len()).collect();
            loop {
                let late = start.elapsed() > timeout;
                let mut still = Vec::with_capacity(waiting.len());
                for &i in &waiting {
                    let (s, code) = self.status(i)?;
                    if s & crate::al_state::ERROR != 0 {
                        return Err(Error::SegmentMismatch(format!(
                            "{}: AL error {code:#06x} ({}) on the way to state {state:#x} \
                             (state {:#x})",
                            self.who(i),
                            crate::al_state::al_status_text(code),
                            s & 0x0f
                        )));
                    }
                    if s & 0x0f != state {
                        if late {
                            return Err(Error::SegmentMismatch(format!(
                                "{}: state {:#x}, not {state:#x} within {} ms \
                                 (bus.state_timeout_ms)",
                                self.who(i),
                                s & 0x0f,
                                timeout.as_millis()
                            )));
                        }
                        still.push(i);
                    }
                }
                if still.is_empty() {
                    return Ok(());
                }
                waiting = still;
                std::thread::sleep(between()?);
            }
        }

        /// The AL status of subdevice `i` and its code (0x0130, 0x0134).
        fn status(&self, i: usize) -> Result<(u8, u16)> {
            let a = self.addresses[i];
            let b = block_on(Command::fprd(a, AL_STATUS).receive_slice(self.md, 6))
                .map_err(|e| Error::bus(format!("{}: AL status", self.who(i)), e))?;
            Ok((b[0], u16::from_le_bytes([b[4], b[5]])))
        }
    }
}
