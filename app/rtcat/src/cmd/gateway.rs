//! `rtcat gateway`: the EtherCAT mailbox gateway ([`crate::gateway`], ETG.8200) on a segment
//! brought to PRE-OP: a vendor's configuration tool on another computer reaches the devices'
//! mailboxes (CoE, FoE, EoE, …) through this machine, for as long as the command runs.
//!
//! Exit 2 for the user's input (an address or network that does not parse, a port taken), 1
//! for the bus.

use super::bus::{emit, json, open};
use crate::cli::BusArgs;
use crate::gateway::{self, Allowed, Counts, Forward};
use crate::outcome::{Failure, Outcome};
use clap::Args;
use rtcat_master::coe::Timeouts;
use rtcat_master::coe::segment::{self, PreOp};
use rtcat_master::mailbox::BusMailbox;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct GatewayArgs {
    /// Address and UDP port to listen on: an address of the interface the tools are on (not
    /// 0.0.0.0 on a machine with other networks); port 34980 (0x88A4) is ETG.8200's
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: String,
    /// Networks (or hosts) whose datagrams are served, e.g. 192.168.10.0/24; repeat for more.
    /// Nothing else is answered
    #[arg(long = "allow", value_name = "NET", required = true)]
    pub allow: Vec<String>,
    /// Stop after this many seconds (default: until SIGINT/SIGTERM)
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    #[command(flatten)]
    pub bus: BusArgs,
}

/// The devices of a segment in PRE-OP, by station address.
struct Segment<'s, 'a> {
    seg: &'s PreOp<'a>,
    positions: Vec<(u16, u32)>,
}

impl Forward for Segment<'_, '_> {
    fn mailbox_size(&mut self, address: u16) -> Result<usize, u16> {
        let Some(&(_, pos)) = self.positions.iter().find(|(a, _)| *a == address) else {
            return Err(gateway::mbx_error::INVALID_CHANNEL);
        };
        self.seg
            .with_mailbox(pos, |m: &mut BusMailbox<'_>| {
                usize::from(m.geometry().rx_size)
            })
            .map_err(|_| gateway::mbx_error::UNSUPPORTED_PROTOCOL)
    }

    fn transact(&mut self, address: u16, mailbox: &[u8]) -> Option<Vec<u8>> {
        let &(_, pos) = self.positions.iter().find(|(a, _)| *a == address)?;
        match self.seg.with_mailbox(pos, |m: &mut BusMailbox<'_>| {
            m.transact(mailbox, "gateway request")
        }) {
            Ok(Ok(r)) => Some(r),
            Ok(Err(e)) => {
                log::warn!("gateway: station {address:#06x}: {e}");
                None
            }
            Err(e) => {
                log::warn!("gateway: station {address:#06x}: {e}");
                None
            }
        }
    }
}

/// `rtcat gateway`.
pub fn gateway(a: GatewayArgs) -> Outcome {
    let listen: SocketAddr = a.listen.parse().map_err(|_| {
        Failure::Usage(format!(
            "--listen {:?}: give ADDR:PORT, e.g. 192.168.10.1:34980",
            a.listen
        ))
    })?;
    let allowed = a
        .allow
        .iter()
        .map(|s| Allowed::parse(s).map_err(|e| Failure::Usage(format!("--allow {e}"))))
        .collect::<Result<Vec<_>, _>>()?;
    let duration = super::bus::run_for(a.duration)?;
    let sock =
        UdpSocket::bind(listen).map_err(|e| Failure::Usage(format!("--listen {listen}: {e}")))?;
    // Wakes up to look at the stop flag and the deadline.
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .map_err(|e| Failure::Runtime(format!("{listen}: {e}")))?;
    crate::signals::install(crate::signals::Second::Kills)?;
    let (s, _cfg) = open(&a.bus)?;
    let counts = segment::with_pre_op(s.maindevice(), Timeouts::default(), |seg: &PreOp<'_>| {
        let mut positions = Vec::new();
        let mut p = 0u32;
        while let Ok(d) = seg.device(p) {
            positions.push((d.address, p));
            p += 1;
        }
        crate::say!(
            "rtcat gateway: {} subdevices (stations {}), listening on {}",
            positions.len(),
            positions
                .iter()
                .map(|(a, _)| format!("{a:#06x}"))
                .collect::<Vec<_>>()
                .join(" "),
            sock.local_addr().map(|a| a.to_string()).unwrap_or_default()
        );
        let mut fwd = Segment { seg, positions };
        let mut counts = Counts::default();
        let t0 = Instant::now();
        let mut buf = [0u8; gateway::MAX_DATAGRAM];
        while !crate::signals::stop_requested() && duration.is_none_or(|d| t0.elapsed() < d) {
            let (n, peer) = match sock.recv_from(&mut buf) {
                Ok(x) => x,
                Err(_) => continue,
            };
            if let Some(reply) = gateway::handle(&mut fwd, &allowed, peer, &buf[..n], &mut counts) {
                let _ = sock.send_to(&reply, peer);
            }
        }
        Ok(counts)
    })?;
    emit(&if a.bus.json {
        json(&counts)
    } else {
        format!(
            "rtcat gateway: {} requests forwarded, {} answered, {} unanswered; {} error replies; \
             refused: {} from peers not allowed, {} malformed\n",
            counts.forwarded,
            counts.answered,
            counts.unanswered,
            counts.error_replies,
            counts.refused_peer,
            counts.dropped_malformed
        )
    });
    Ok(())
}
