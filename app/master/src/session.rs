//! A segment for the bus tools, which run no cycle: a MainDevice on a target with a TX/RX
//! thread moving its frames ([`Session`]), and the segment brought to PRE-OP for a tool's work
//! and put back to INIT afterwards ([`in_pre_op`]): the layout as a bring-up reads it
//! ([`read_layout`], [`read_configured_layout`]) and the CoE tools' segment
//! (`coe::segment::with_pre_op`). Above the bring-up it uses and the diagnostics it returns
//! errors of, so neither of those imports back up to open a bus.

use crate::bringup::{configure_pre_op, init_timeouts, scan_to_pre_op};
use crate::bus::{ThreadRt, TxRxThread};
use crate::config::Config;
use crate::diag::{Error, Result};
use crate::error::Result as MasterResult;
use crate::group::PreOpGroup;
use crate::layout::Layout;
use crate::target::{Target, give_back, open_bus};
use ethercrab::MainDevice;
use futures_lite::future::block_on;

/// A MainDevice on a link with a TX/RX thread moving its frames, for the bus commands (scan,
/// registers, SII): no group, no cycle. Dropping it gives the storage back.
pub struct Session {
    md: Option<MainDevice<'static>>,
    thread: Option<TxRxThread>,
}

impl Session {
    /// Open `target` with the timeouts of `cfg`.
    pub fn open(target: &Target, cfg: &Config) -> MasterResult<Session> {
        let (bus, pdu_loop) = open_bus(target, &cfg.bus)?;
        let md = MainDevice::new(pdu_loop, init_timeouts(cfg), cfg.maindevice_config());
        let thread = TxRxThread::spawn(bus, ThreadRt::default())?;
        Ok(Session {
            md: Some(md),
            thread: Some(thread),
        })
    }

    /// The MainDevice.
    pub fn maindevice(&self) -> &MainDevice<'static> {
        self.md.as_ref().expect("present until drop")
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // No group of this MainDevice outlives the session (they borrow it).
        if let (Some(md), Some(t)) = (self.md.take(), self.thread.take()) {
            give_back(md, t.stop());
        }
    }
}

/// Bring the segment on `md` to PRE-OP (ethercrab's group initialisation, as a bring-up does),
/// run `work` on it, and put it back to INIT (a failure to do so is logged, the result still
/// returned). An empty segment is [`Error::NoSubdevices`]. Runs on a setup thread named
/// `thread` with the master's large stack: ethercrab's group for
/// [`crate::limits::MAX_SUBDEVICES`] subdevices and its initialisation future do not fit a
/// default thread stack in a debug build.
pub fn in_pre_op<R: Send>(
    md: &MainDevice<'static>,
    thread: &'static str,
    work: impl FnOnce(&PreOpGroup) -> Result<R> + Send,
) -> Result<R> {
    let run = || -> Result<R> {
        let group = scan_to_pre_op(md)?;
        if group.is_empty() {
            return Err(Error::NoSubdevices);
        }
        let r = work(&group);
        if let Err(e) = block_on(group.into_init(md)) {
            log::warn!("{thread}: putting the segment back to INIT failed: {e}");
        }
        r
    };
    crate::rt::on_setup_thread(thread, run).map_err(Error::Master)?
}

/// The process-data layout exactly as the master builds it at a bring-up: the segment brought
/// to PRE-OP, each subdevice's mapping read with [`crate::mapping::read_subdevice`], placed by
/// [`Layout::build`] (generation 1). The segment is put back to INIT afterwards.
pub fn read_layout(md: &MainDevice<'static>) -> Result<Layout> {
    in_pre_op(md, "rtcat-layout", |group| {
        crate::mapping::read_layout(md, group.iter(md), 1).map_err(Error::Master)
    })
}

/// The layout as `run` would bring it up with `cfg`: the segment checked against `[segment]`
/// and each `[[device]]` entry's PDO assignment, mapping and PS startup SDOs written in PRE-OP
/// (as every bring-up does), then the mapping read and placed as in [`read_layout`]. The segment
/// is put back to INIT afterwards.
pub fn read_configured_layout(md: &MainDevice<'static>, cfg: &Config) -> Result<Layout> {
    in_pre_op(md, "rtcat-layout", |group| {
        let configured: MasterResult<_> =
            configure_pre_op(md, group, cfg, 1, &Default::default(), (&[], &[]));
        configured
            .map(|(layout, _, _)| layout)
            .map_err(Error::Master)
    })
}
