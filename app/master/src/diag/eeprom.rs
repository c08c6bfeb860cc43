//! The SII EEPROM read through an ESC's EEPROM interface, by position.
//!
//! Registers (ETG.1000.4 §6.4.5, "SII EEPROM interface"; Beckhoff ESC datasheet section II,
//! 0x0500..0x050F):
//! - 0x0500 EEPROM configuration: bit 0 offers the EEPROM to the PDI, bit 1 forces EtherCAT
//!   access; 0x0501 bit 0: the PDI holds the EEPROM.
//! - 0x0502/0x0503 control/status: bits 8..10 command (1 read), bit 6 read size (0: 4 bytes,
//!   1: 8 bytes), bit 13 command error (missing acknowledge or invalid command), bit 14 write
//!   enable error, bit 15 busy.
//! - 0x0504..0x0507 the word address; 0x0508..0x050F the data read.
//!
//! A read takes the EEPROM for EtherCAT when the PDI holds it, and gives the configuration
//! register its old value afterwards, so that a device application that had the EEPROM offered
//! keeps it. Every wait for the busy bit is bounded by `[bus] init_eeprom_timeout_ms`, and the
//! image by the EEPROM size in word 0x3E and [`crate::limits::MAX_SII_BYTES`].

use super::{Error, Probe, Result};
use crate::limits::MAX_SII_BYTES;
use crate::sii::{self, Sii};
use serde::Serialize;
use std::time::{Duration, Instant};

const CONFIG: u16 = 0x0500;
const CONTROL: u16 = 0x0502;
const DATA: u16 = 0x0508;
const BUSY: u16 = 1 << 15;
const COMMAND_ERROR: u16 = 1 << 13;
const WRITE_ERROR: u16 = 1 << 14;
const READ_SIZE_8: u16 = 1 << 6;
const CMD_READ: u16 = 0x0100;
const CMD_WRITE: u16 = 0x0200;
const CMD_RELOAD: u16 = 0x0400;
/// Bit 0 of 0x0502: write enable, valid only with the write command in the same access.
const WRITE_ENABLE: u16 = 0x0001;
/// SII words (ETG.2010 Table 2): the configured station alias, and the checksum of the
/// configuration area (words 0..=6).
const WORD_ALIAS: u16 = 0x04;
const WORD_CHECKSUM: u16 = 0x07;
/// ESC register the station alias is loaded into (ETG.1000.4 §6.1.2).
const STATION_ALIAS: u16 = 0x0012;

/// The checksum of the SII's configuration area: CRC-8, polynomial x^8 + x^2 + x + 1, initial
/// value 0xFF, over words 0..=6 (14 bytes; ETG.2010 §2.2); an ESC that finds it wrong does not
/// load the area (its alias among it) at power-up. Written out rather than taken from the
/// `crc` crate: a few lines, where the crate would need the same parameters spelled out as a
/// custom algorithm; the standard check value ("123456789" → 0xFB) is tested.
pub fn config_area_checksum(bytes: &[u8]) -> u8 {
    bytes.iter().fold(0xff, |crc, &b| {
        (0..8).fold(crc ^ b, |c, _| {
            if c & 0x80 != 0 {
                (c << 1) ^ 0x07
            } else {
                c << 1
            }
        })
    })
}

/// An SII image as read from one subdevice.
#[derive(Debug, Clone, Serialize)]
pub struct SiiImage {
    /// Position of the subdevice.
    pub position: u16,
    /// The bytes read: the fixed area and the categories up to and including the end marker
    /// (categories not asked for are left out, see [`Probe::read_sii`]).
    #[serde(skip)]
    pub bytes: Vec<u8>,
    /// The read stopped at the size bound before the end marker.
    pub truncated: bool,
}

impl SiiImage {
    /// Decode the image.
    pub fn parse(&self) -> Result<Sii> {
        Sii::parse(&self.bytes).map_err(|source| Error::Sii {
            position: self.position,
            source,
        })
    }
}

/// The EEPROM taken for EtherCAT for the duration of the reads; the configuration register gets
/// its old value back when dropped.
struct Owned<'p, 'a> {
    probe: &'p Probe<'a>,
    position: u16,
    old_config: u8,
    restore: bool,
    chunk: usize,
}

impl Drop for Owned<'_, '_> {
    fn drop(&mut self) {
        if self.restore
            && let Err(e) = self.probe.write(self.position, CONFIG, &[self.old_config])
        {
            log::warn!(
                "position {}: giving the EEPROM back to the PDI: {e}",
                self.position
            );
        }
    }
}

impl<'a> Probe<'a> {
    fn take_eeprom(&self, position: u16) -> Result<Owned<'_, 'a>> {
        let mut cfg = [0u8; 2];
        self.read(position, CONFIG, &mut cfg)?;
        let pdi_holds = cfg[1] & 0x01 != 0;
        let mut owned = Owned {
            probe: self,
            position,
            old_config: cfg[0],
            restore: false,
            chunk: 4,
        };
        if pdi_holds || cfg[0] & 0x01 != 0 {
            // Force EtherCAT access (bit 1) and stop offering it to the PDI for the reads.
            owned.restore = true;
            self.write(position, CONFIG, &[0x02])?;
            self.write(position, CONFIG, &[0x00])?;
        }
        let status = self.wait_idle(position, 0)?;
        owned.chunk = if status & READ_SIZE_8 != 0 { 8 } else { 4 };
        Ok(owned)
    }

    /// Poll the control/status register until the busy bit clears.
    fn wait_idle(&self, position: u16, word: u16) -> Result<u16> {
        let timeout = self.eeprom_timeout();
        let start = Instant::now();
        loop {
            let mut s = [0u8; 2];
            self.read(position, CONTROL, &mut s)?;
            let s = u16::from_le_bytes(s);
            if s & BUSY == 0 {
                return Ok(s);
            }
            if start.elapsed() >= timeout {
                return Err(Error::EepromBusy {
                    position,
                    word,
                    timeout,
                });
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// One read command: the chunk (4 or 8 bytes) at `word`.
    fn read_chunk(&self, o: &Owned<'_, '_>, word: u16, out: &mut [u8]) -> Result<()> {
        let p = o.position;
        // Control and address in one datagram, as the ESC expects them together.
        let mut cmd = [0u8; 6];
        cmd[..2].copy_from_slice(&CMD_READ.to_le_bytes());
        cmd[2..4].copy_from_slice(&word.to_le_bytes());
        self.write(p, CONTROL, &cmd)?;
        self.command_done(p, word)?;
        let mut data = [0u8; 8];
        self.read(p, DATA, &mut data[..o.chunk])?;
        out.copy_from_slice(&data[..out.len()]);
        Ok(())
    }

    /// One write command: `value` into SII word `word` (the data first, then the command with
    /// write enable and the address in one access, ETG.1000.4 §6.4.5), waited for like a read.
    fn write_word(&self, o: &Owned<'_, '_>, word: u16, value: u16) -> Result<()> {
        let p = o.position;
        self.write(p, DATA, &value.to_le_bytes())?;
        let mut cmd = [0u8; 6];
        cmd[..2].copy_from_slice(&(CMD_WRITE | WRITE_ENABLE).to_le_bytes());
        cmd[2..4].copy_from_slice(&word.to_le_bytes());
        self.write(p, CONTROL, &cmd)?;
        self.command_done(p, word)
    }

    /// Wait for a command on `word` to end; its error bits as an error.
    fn command_done(&self, p: u16, word: u16) -> Result<()> {
        let status = self.wait_idle(p, word)?;
        if status & (COMMAND_ERROR | WRITE_ERROR) != 0 {
            return Err(Error::EepromCommand {
                position: p,
                word,
                status,
                what: if status & COMMAND_ERROR != 0 {
                    "command error (missing acknowledge from the EEPROM, or invalid command)"
                } else {
                    "write enable error"
                },
            });
        }
        Ok(())
    }

    /// Write `alias` as the station alias into the SII of the subdevice at `position` (word 4,
    /// with the configuration area's checksum in word 7 computed again), then have the ESC
    /// reload its configuration area so that register 0x0012 holds it at once. Returns the
    /// alias the SII had and what 0x0012 reads after the reload (for the caller to compare);
    /// the area is read back and a word that did not take is an error. The device must not be
    /// in use by a master: its EEPROM is taken for EtherCAT for the writes.
    pub fn write_alias(&self, position: u16, alias: u16) -> Result<(u16, u16)> {
        let o = self.take_eeprom(position)?;
        let mut area = [0u8; 16];
        self.read_words(&o, 0, &mut area)?;
        let old = u16::from_le_bytes([area[8], area[9]]);
        area[8..10].copy_from_slice(&alias.to_le_bytes());
        area[14] = config_area_checksum(&area[..14]);
        self.write_word(&o, WORD_ALIAS, alias)?;
        self.write_word(&o, WORD_CHECKSUM, u16::from_le_bytes([area[14], area[15]]))?;
        let mut back = [0u8; 16];
        self.read_words(&o, 0, &mut back)?;
        if back != area {
            let word = if back[8..10] != area[8..10] {
                WORD_ALIAS
            } else {
                WORD_CHECKSUM
            };
            return Err(Error::EepromCommand {
                position,
                word,
                status: 0,
                what: "the word read back after the write is not what was written",
            });
        }
        self.write(position, CONTROL, &CMD_RELOAD.to_le_bytes())?;
        self.command_done(position, 0)?;
        let mut now = [0u8; 2];
        self.read(position, STATION_ALIAS, &mut now)?;
        Ok((old, u16::from_le_bytes(now)))
    }

    fn read_words(&self, o: &Owned<'_, '_>, word: usize, buf: &mut [u8]) -> Result<()> {
        let mut done = 0;
        while done < buf.len() {
            let n = (buf.len() - done).min(o.chunk);
            let w = word + done / 2;
            let w = u16::try_from(w).map_err(|_| {
                Error::Range(format!("SII word {w:#x} is beyond the 16-bit word address"))
            })?;
            self.read_chunk(o, w, &mut buf[done..done + n])?;
            done += n;
        }
        Ok(())
    }

    /// The identity in the SII of the subdevice at `position` (words 0x08..0x0D: vendor,
    /// product, revision; ETG.2010 Table 2): a few reads, not the whole image.
    pub(crate) fn read_identity(&self, position: u16) -> Result<(u32, u32, u32)> {
        let o = self.take_eeprom(position)?;
        let mut b = [0u8; 12];
        self.read_words(&o, 0x08, &mut b)?;
        let w = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Ok((w(0), w(4), w(8)))
    }

    /// Read the SII of the subdevice at `position`: the fixed area, then the category list up to
    /// its end marker, keeping the categories in `wanted` (all when `None`) and skipping over the
    /// others. At most the EEPROM size word 0x3E gives, and at most
    /// [`MAX_SII_BYTES`], are read; a list that runs past that
    /// bound is cut there ([`SiiImage::truncated`]).
    pub fn read_sii(&self, position: u16, wanted: Option<&[u16]>) -> Result<SiiImage> {
        let o = self.take_eeprom(position)?;
        let mut img = vec![0u8; sii::FIXED_AREA_BYTES];
        self.read_words(&o, 0, &mut img)?;
        // Word 0x3E: EEPROM size in KiBit minus 1 (ETG.2010 Table 2).
        let size_word = u16::from_le_bytes([img[0x7c], img[0x7d]]);
        let bound = ((usize::from(size_word) + 1) * 128).min(MAX_SII_BYTES);
        let mut word = sii::FIXED_AREA_BYTES / 2;
        let mut truncated = false;
        loop {
            if 2 * word + 4 > bound {
                truncated = true;
                break;
            }
            let mut h = [0u8; 4];
            self.read_words(&o, word, &mut h)?;
            let kind = u16::from_le_bytes([h[0], h[1]]);
            let words = usize::from(u16::from_le_bytes([h[2], h[3]]));
            if kind == sii::category::END {
                break;
            }
            let end = 2 * (word + 2 + words);
            if end > bound {
                truncated = true;
                break;
            }
            if wanted.is_none_or(|w| w.contains(&kind)) {
                let start = img.len();
                img.extend_from_slice(&h);
                img.resize(start + 4 + 2 * words, 0);
                self.read_words(&o, word + 2, &mut img[start + 4..])?;
            }
            word += 2 + words;
        }
        img.extend_from_slice(&sii::category::END.to_le_bytes());
        img.extend_from_slice(&0u16.to_le_bytes());
        Ok(SiiImage {
            position,
            bytes: img,
            truncated,
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_configuration_area_checksum_is_crc8_0x07_from_0xff() {
        // The standard check value of this CRC-8 (polynomial 0x07, initial 0xFF).
        assert_eq!(super::config_area_checksum(b"123456789"), 0xfb);
    }
}
