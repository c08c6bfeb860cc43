//! What the master talks to and how it is opened: the [`Target`] (an interface, the in-process
//! simulator, a link of the user's own), the link it opens, and the pool of ethercrab's frame
//! storage every run and tool session takes one from. Below both the run (`master`) and the
//! tools' sessions (`session`), so neither imports the other to open a bus.

use crate::bus::{Bus, Link, LinkFactory};
use crate::config::{BusConfig, LinkKind};
use crate::error::{Error, Result};
use crate::limits::Storage;
use ethercrab::{MainDevice, PduLoop, PduRx, PduTx};
use std::sync::Mutex;

/// What the master talks to.
#[derive(Debug, Clone)]
pub enum Target {
    /// The in-process simulated segment (no root, no NIC).
    #[cfg(feature = "sim")]
    Sim {
        /// The segment.
        spec: ecsim::SegmentSpec,
        /// Its fault injection handle.
        faults: ecsim::Faults,
    },
    /// A network interface (AF_PACKET, needs CAP_NET_RAW).
    Iface(String),
    /// A link of the user's own ([`crate::bus::Link`]), opened when the run starts.
    Link(LinkFactory),
}

/// The split PDU storage of ethercrab: `'static` because the TX/RX thread owns its halves.
/// Runs take one from the pool and give it back, so a process that runs many masters one after
/// another (tests, a supervisor) allocates only as many as run at once.
type Split = (PduTx<'static>, PduRx<'static>, PduLoop<'static>);
static POOL: Mutex<Vec<Split>> = Mutex::new(Vec::new());

fn take_storage() -> Split {
    if let Some(s) = POOL.lock().unwrap_or_else(|p| p.into_inner()).pop() {
        return s;
    }
    let storage: &'static Storage = Box::leak(Box::new(Storage::new()));
    storage
        .try_split()
        .unwrap_or_else(|_| unreachable!("fresh storage splits"))
}

fn give_storage(s: Split) {
    POOL.lock().unwrap_or_else(|p| p.into_inner()).push(s);
}

/// Take a storage from the pool and open `target` on it: the bus and ethercrab's PDU loop, or
/// the error with the storage back in the pool.
pub(crate) fn open_bus(target: &Target, bus: &BusConfig) -> Result<(Bus, PduLoop<'static>)> {
    let (tx, rx, pdu_loop) = take_storage();
    match open_link(target, bus) {
        Ok(link) => Ok((Bus::new(tx, rx, link), pdu_loop)),
        Err(e) => {
            give_storage((tx, rx, pdu_loop));
            Err(e)
        }
    }
}

/// Give a run's storage back to the pool (closing the link).
pub(crate) fn give_back(md: MainDevice<'static>, bus: Bus) {
    // SAFETY: the callers have dropped every group of this MainDevice.
    let pl = unsafe { md.release() };
    let (tx, rx, _) = bus.into_parts();
    give_storage((tx, rx, pl));
}

/// Open the link to a target; an interface with the socket `[bus] link` names.
pub fn open_link(target: &Target, bus: &BusConfig) -> Result<Box<dyn Link>> {
    Ok(match target {
        #[cfg(feature = "sim")]
        Target::Sim { spec, faults } => {
            Box::new(ecsim::SimPort::with_faults(spec.clone(), faults.clone()))
        }
        Target::Iface(name) => {
            crate::netuse::check_free(&safefs::SysRoot::live(), name)?;
            let err = |source| Error::Interface {
                iface: name.clone(),
                source,
            };
            use rtcat_packet::xdp::{XdpMode, XdpOptions, XdpSocket};
            let xdp = |mode| {
                let opt = XdpOptions {
                    mode,
                    queue: bus.xdp_queue,
                };
                XdpSocket::open(name, opt).map_err(err)
            };
            match bus.link {
                LinkKind::Packet => Box::new(rtcat_packet::PacketSocket::open(name).map_err(err)?),
                LinkKind::Xdp => Box::new(xdp(XdpMode::Auto)?),
                LinkKind::XdpNative => Box::new(xdp(XdpMode::Native)?),
                LinkKind::XdpGeneric => Box::new(xdp(XdpMode::Generic)?),
            }
        }
        Target::Link(f) => f.open().map_err(|source| Error::Interface {
            iface: f.name().to_string(),
            source,
        })?,
    })
}
