//! The ESC error counters 0x0300..0x0313 (Beckhoff ESC datasheet section II, "RX Error Counter",
//! "Forwarded RX Error Counter", "ECAT Processing Unit Error Counter", "PDI Error Counter", "Lost
//! Link Counter"). Each is 8 bits and stops at 0xFF.
//!
//! Reading them locates a bad cable: a port with invalid frames or RX errors but no forwarded
//! errors is the one behind the faulty link; forwarded errors only say that an ESC upstream saw
//! the frame broken first.

use super::{Probe, Result};
use serde::{Deserialize, Serialize};

/// First error counter register.
pub const ERROR_COUNTERS: u16 = 0x0300;
/// Bytes of the error counter block (0x0300..=0x0313).
pub const ERROR_COUNTERS_LEN: usize = 0x14;

/// Value at which an error counter stops counting.
pub const SATURATED: u8 = 0xff;

/// The counters of one port.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortCounters {
    /// Port number 0..=3.
    pub port: u8,
    /// Invalid frames received at the port (0x0300 + 2·port): a bad FCS or frame structure.
    pub invalid_frame: u8,
    /// Physical layer RX errors at the port (0x0301 + 2·port).
    pub rx_error: u8,
    /// Frames that arrived already marked as broken by an ESC before (0x0308 + port).
    pub forwarded: u8,
    /// Times the port lost its link (0x0310 + port).
    pub lost_link: u8,
}

impl PortCounters {
    /// Whether any counter of the port is non-zero.
    pub fn any(&self) -> bool {
        self.invalid_frame | self.rx_error | self.forwarded | self.lost_link != 0
    }
}

/// The error counters of one subdevice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorCounters {
    /// Position of the subdevice.
    pub position: u16,
    /// Ports 0..=3; a port the ESC does not implement (port descriptor 0x0007) is left out.
    pub ports: Vec<PortCounters>,
    /// Invalid frames that passed the EtherCAT processing unit (0x030C).
    pub processing_unit: u8,
    /// Errors of the process data interface (0x030D).
    pub pdi: u8,
}

impl ErrorCounters {
    /// Decode the 20 bytes of 0x0300..=0x0313; `implemented[p]` keeps port p.
    pub fn from_registers(
        position: u16,
        r: &[u8; ERROR_COUNTERS_LEN],
        implemented: [bool; 4],
    ) -> Self {
        ErrorCounters {
            position,
            ports: (0..4u8)
                .filter(|&p| implemented[usize::from(p)])
                .map(|p| {
                    let i = usize::from(p);
                    PortCounters {
                        port: p,
                        invalid_frame: r[2 * i],
                        rx_error: r[2 * i + 1],
                        forwarded: r[0x08 + i],
                        lost_link: r[0x10 + i],
                    }
                })
                .collect(),
            processing_unit: r[0x0c],
            pdi: r[0x0d],
        }
    }

    /// Whether any counter is non-zero.
    pub fn any(&self) -> bool {
        self.processing_unit != 0 || self.pdi != 0 || self.ports.iter().any(PortCounters::any)
    }
}

impl Probe<'_> {
    /// The error counters of the subdevice at `position` (read only: writing one would clear it).
    pub fn error_counters(&self, position: u16) -> Result<ErrorCounters> {
        let mut desc = [0u8; 1];
        self.read(position, super::scan::PORT_DESCRIPTOR, &mut desc)?;
        let implemented = std::array::from_fn(|p| (desc[0] >> (2 * p)) & 0x03 != 0);
        let mut r = [0u8; ERROR_COUNTERS_LEN];
        self.read(position, ERROR_COUNTERS, &mut r)?;
        Ok(ErrorCounters::from_registers(position, &r, implemented))
    }

    /// The error counters of every subdevice, in position order.
    pub fn all_error_counters(&self) -> Result<Vec<ErrorCounters>> {
        (0..self.count()).map(|p| self.error_counters(p)).collect()
    }
}
