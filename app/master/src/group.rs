//! The segment as ethercrab holds it at each stage, at the master's limits: PRE-OP, and OP with
//! or without distributed clocks. A leaf (limits only), so the bring-up, the cycle and the
//! mailbox service name the same types without importing each other.

use crate::limits::{MAX_PDI_BYTES, MAX_SUBDEVICES};
use ethercrab::DefaultLock;
use ethercrab::subdevice_group::{HasDc, NoDc, Op, PreOp};

/// The segment in PRE-OP, as ethercrab holds it.
pub type PreOpGroup = ethercrab::SubDeviceGroup<MAX_SUBDEVICES, MAX_PDI_BYTES, DefaultLock, PreOp>;

/// The segment in OP, as ethercrab holds it, with (`HasDc`) or without (`NoDc`) distributed
/// clocks.
pub type Group<DC> = ethercrab::SubDeviceGroup<MAX_SUBDEVICES, MAX_PDI_BYTES, DefaultLock, Op, DC>;
/// The segment in OP without distributed clocks.
pub type OpGroup = Group<NoDc>;
/// The segment in OP with SYNC0 configured (`configure_dc_sync`).
pub type DcGroup = Group<HasDc>;
