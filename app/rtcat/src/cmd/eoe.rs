//! `rtcat eoe set-ip|get-ip|bridge`: Ethernet over EtherCAT ([`rtcat_master::eoe`]) on a
//! segment brought to PRE-OP: a device's IP settings, and its network bridged to a TAP
//! interface of this machine (a drive's web page or tuning service reached from the board, or
//! routed through it) until the command is stopped.
//!
//! Exit 2 for the user's input (an address that does not parse, a TAP name that exists or is
//! not a name, a device without EoE), 1 for the bus and the device's refusals.

use super::bus::{emit, json, open};
use crate::cli::BusArgs;
use crate::outcome::{Failure, Outcome};
use clap::{Args, Subcommand};
use rtcat_master::coe::Timeouts;
use rtcat_master::coe::segment::{self, PreOp};
use rtcat_master::diag;
use rtcat_master::eoe::{self, IpParams};
use rtcat_master::mailbox::BusMailbox;
use rtcat_packet::tap::{MAX_TAP_FRAME, Tap};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

/// Frames moved each way per turn of the bridge before it looks at the other direction: a
/// flood one way does not starve the other.
const BURST: usize = 16;

#[derive(Subcommand, Debug)]
pub enum EoeCmd {
    /// Set a device's IP parameters (EoE set IP parameter)
    SetIp(SetIpArgs),
    /// Read a device's IP parameters (EoE get IP parameter)
    GetIp(GetIpArgs),
    /// Bridge a device's network to a TAP interface of this machine until stopped (root or
    /// CAP_NET_ADMIN)
    Bridge(BridgeArgs),
}

/// IP parameters to set.
#[derive(Args, Debug, Default)]
pub struct IpArgs {
    /// The device's address with its prefix length, e.g. 192.168.10.2/24
    #[arg(long, value_name = "ADDR/LEN")]
    pub ip: Option<String>,
    /// Default gateway
    #[arg(long, value_name = "ADDR")]
    pub gateway: Option<String>,
    /// DNS server
    #[arg(long, value_name = "ADDR")]
    pub dns: Option<String>,
    /// DNS name (at most 32 bytes)
    #[arg(long, value_name = "NAME")]
    pub dns_name: Option<String>,
    /// The device's MAC address, aa:bb:cc:dd:ee:ff
    #[arg(long, value_name = "MAC")]
    pub mac: Option<String>,
}

#[derive(Args, Debug)]
pub struct SetIpArgs {
    /// Position of the subdevice
    #[arg(value_name = "POS")]
    pub position: u32,
    #[command(flatten)]
    pub ip: IpArgs,
    #[command(flatten)]
    pub bus: BusArgs,
}

#[derive(Args, Debug)]
pub struct GetIpArgs {
    /// Position of the subdevice
    #[arg(value_name = "POS")]
    pub position: u32,
    #[command(flatten)]
    pub bus: BusArgs,
}

#[derive(Args, Debug)]
pub struct BridgeArgs {
    /// Position of the subdevice
    #[arg(value_name = "POS")]
    pub position: u32,
    /// Name of the TAP interface to create (refused when an interface of that name exists)
    #[arg(long, value_name = "NAME")]
    pub tap: String,
    /// This machine's address on the TAP, with its prefix length, e.g. 192.168.10.1/24
    #[arg(long, value_name = "ADDR/LEN")]
    pub host_ip: Option<String>,
    /// Set the device's address first (as set-ip --ip)
    #[arg(long, value_name = "ADDR/LEN")]
    pub device_ip: Option<String>,
    /// Stop after this many seconds (default: until SIGINT/SIGTERM)
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    #[command(flatten)]
    pub bus: BusArgs,
}

/// `rtcat eoe`.
pub fn eoe(c: EoeCmd) -> Outcome {
    match c {
        EoeCmd::SetIp(a) => set_ip(a),
        EoeCmd::GetIp(a) => get_ip(a),
        EoeCmd::Bridge(a) => bridge(a),
    }
}

fn addr(flag: &str, s: &str) -> Result<[u8; 4], Failure> {
    s.trim()
        .parse::<Ipv4Addr>()
        .map(|a| a.octets())
        .map_err(|_| Failure::Usage(format!("{flag} {s:?}: not an IPv4 address")))
}

/// `ADDR/LEN` → address and netmask.
fn addr_prefix(flag: &str, s: &str) -> Result<([u8; 4], [u8; 4]), Failure> {
    let Some((a, l)) = s.split_once('/') else {
        return Err(Failure::Usage(format!(
            "{flag} {s:?}: give the prefix length too, e.g. 192.168.10.2/24"
        )));
    };
    let len: u32 = match l.parse() {
        Ok(n @ 1..=32) => n,
        _ => {
            return Err(Failure::Usage(format!(
                "{flag} {s:?}: the prefix length is 1..=32"
            )));
        }
    };
    let mask = (u32::MAX << (32 - len)).to_be_bytes();
    Ok((addr(flag, a)?, mask))
}

impl IpArgs {
    /// The parameters the options give (at least one).
    pub(crate) fn params(&self) -> Result<IpParams, Failure> {
        let mut p = IpParams::default();
        if let Some(s) = &self.ip {
            let (a, m) = addr_prefix("--ip", s)?;
            p.ip = Some(a);
            p.subnet = Some(m);
        }
        p.gateway = self
            .gateway
            .as_deref()
            .map(|s| addr("--gateway", s))
            .transpose()?;
        p.dns = self.dns.as_deref().map(|s| addr("--dns", s)).transpose()?;
        if let Some(n) = &self.dns_name {
            if n.is_empty() || n.len() > eoe::DNS_NAME_LEN || !n.is_ascii() {
                return Err(Failure::Usage(format!(
                    "--dns-name {n:?}: 1..={} ASCII characters",
                    eoe::DNS_NAME_LEN
                )));
            }
            p.dns_name = Some(n.clone());
        }
        p.mac = self
            .mac
            .as_deref()
            .map(|s| eoe::parse_mac(s).map_err(|e| Failure::Usage(format!("--mac: {e}"))))
            .transpose()?;
        if p == IpParams::default() {
            return Err(Failure::Usage(
                "nothing to set: give --ip, --gateway, --dns, --dns-name or --mac".into(),
            ));
        }
        Ok(p)
    }
}

/// Run `f` on the EoE client of `position`, on the segment `bus` names, in PRE-OP.
fn on_device<R: Send>(
    bus: &BusArgs,
    position: u32,
    f: impl FnOnce(&mut eoe::BusClient<'_, '_>) -> Result<R, eoe::Error> + Send,
) -> Result<R, Failure> {
    if bus.control.is_some() {
        return Err(Failure::Usage(
            "--control: a bridge does not go through a running master; bridge a device there \
             with [[eoe]] in its configuration, or stop it and use --iface (or --sim)"
                .into(),
        ));
    }
    let (s, _cfg) = open(bus)?;
    Ok(segment::with_pre_op(
        s.maindevice(),
        Timeouts::default(),
        move |seg: &PreOp<'_>| {
            let d = seg.device(position)?;
            if !d.sii.protocols.eoe {
                return Err(diag::Error::Range(format!(
                    "position {position}: {}",
                    d.not_announced("EoE")
                )));
            }
            let r = seg.with_mailbox(position, |m: &mut BusMailbox<'_>| {
                f(&mut eoe::Client::new(m))
            })?;
            Ok(r?)
        },
    )?)
}

/// A position for the control protocol.
fn position16(position: u32) -> Result<u16, Failure> {
    u16::try_from(position)
        .map_err(|_| Failure::Usage(format!("POS {position}: at most {}", u16::MAX)))
}

fn set_ip(a: SetIpArgs) -> Outcome {
    let p = a.ip.params()?;
    if a.bus.control.is_some() {
        // The running master parses the same text (`eoe_set_ip`); checked here first.
        let settings = rtcat_control::protocol::EoeSettings {
            ip: a.ip.ip.clone(),
            gateway: a.ip.gateway.clone(),
            dns: a.ip.dns.clone(),
            dns_name: a.ip.dns_name.clone(),
            mac: a.ip.mac.clone(),
        };
        let request = rtcat_control::Request::EoeSetIp {
            position: position16(a.position)?,
            settings,
        };
        super::bus::remote(&a.bus, &request)?;
    } else {
        let p2 = p.clone();
        on_device(&a.bus, a.position, move |c| c.set_ip(&p2))?;
    }
    emit(&if a.bus.json {
        json(&serde_json::json!({"position": a.position, "set": p.to_string()}))
    } else {
        format!("position {}: set {p}\n", a.position)
    });
    Ok(())
}

/// What get-ip prints with --json (and the control socket's `eoe_get_ip` answers).
pub(crate) fn ip_json(position: u32, p: &IpParams) -> serde_json::Value {
    let ip = |v: Option<[u8; 4]>| v.map(|a| Ipv4Addr::from(a).to_string());
    serde_json::json!({
        "position": position,
        "mac": p.mac.map(eoe::format_mac),
        "ip": ip(p.ip),
        "subnet": ip(p.subnet),
        "gateway": ip(p.gateway),
        "dns": ip(p.dns),
        "dns_name": p.dns_name,
    })
}

/// The parameters of an `eoe_get_ip` answer (the fields [`ip_json`] writes).
fn ip_of_json(v: &serde_json::Value) -> Result<IpParams, Failure> {
    let bad = |k: &str| Failure::Runtime(format!("control socket: {k} = {}: not understood", v[k]));
    let addr = |k: &str| -> Result<Option<[u8; 4]>, Failure> {
        match &v[k] {
            serde_json::Value::Null => Ok(None),
            serde_json::Value::String(s) => s
                .parse::<Ipv4Addr>()
                .map(|a| Some(a.octets()))
                .map_err(|_| bad(k)),
            _ => Err(bad(k)),
        }
    };
    Ok(IpParams {
        mac: match &v["mac"] {
            serde_json::Value::Null => None,
            serde_json::Value::String(s) => Some(eoe::parse_mac(s).map_err(|_| bad("mac"))?),
            _ => return Err(bad("mac")),
        },
        ip: addr("ip")?,
        subnet: addr("subnet")?,
        gateway: addr("gateway")?,
        dns: addr("dns")?,
        dns_name: v["dns_name"].as_str().map(str::to_string),
    })
}

fn get_ip(a: GetIpArgs) -> Outcome {
    let p = if a.bus.control.is_some() {
        let request = rtcat_control::Request::EoeGetIp {
            position: position16(a.position)?,
        };
        ip_of_json(&super::bus::remote(&a.bus, &request)?)?
    } else {
        on_device(&a.bus, a.position, |c| c.get_ip())?
    };
    emit(&if a.bus.json {
        json(&ip_json(a.position, &p))
    } else {
        format!("position {}: {p}\n", a.position)
    });
    Ok(())
}

/// What the bridge moved.
#[derive(Debug, Default, serde::Serialize)]
struct Moved {
    to_device: u64,
    to_host: u64,
    dropped_from_device: u64,
    seconds: f64,
}

fn bridge(a: BridgeArgs) -> Outcome {
    let host = a
        .host_ip
        .as_deref()
        .map(|s| addr_prefix("--host-ip", s))
        .transpose()?;
    let device = a
        .device_ip
        .as_deref()
        .map(|s| addr_prefix("--device-ip", s))
        .transpose()?;
    let duration = super::bus::run_for(a.duration)?;
    // The TAP first: a name that is taken or not a name is the user's input, found before the
    // bus is opened.
    let tap = Tap::create(&a.tap).map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidInput | std::io::ErrorKind::AlreadyExists => {
            Failure::Usage(format!("--tap: {e}"))
        }
        _ => Failure::Runtime(format!("--tap {}: {e}", a.tap)),
    })?;
    if let Some((ip, mask)) = host {
        tap.set_ipv4(ip, mask)
            .map_err(|e| Failure::Runtime(format!("--host-ip on {}: {e}", a.tap)))?;
    }
    tap.set_up()
        .map_err(|e| Failure::Runtime(format!("{} up: {e}", a.tap)))?;
    crate::signals::install(crate::signals::Second::Kills)?;
    let position = a.position;
    let tap_ref = &tap;
    let moved = on_device(&a.bus, position, move |c| {
        if let Some((ip, mask)) = device {
            c.set_ip(&IpParams {
                ip: Some(ip),
                subnet: Some(mask),
                ..IpParams::default()
            })?;
        }
        crate::say!(
            "rtcat eoe: position {position} bridged to {}; stop with Ctrl-C",
            tap_ref.name()
        );
        run_bridge(c, tap_ref, duration)
    })?;
    emit(&if a.bus.json {
        json(&moved)
    } else {
        format!(
            "position {position} <-> {}: {} frames to the device, {} to this machine, {} dropped (out of order) in {:.1} s\n",
            a.tap, moved.to_device, moved.to_host, moved.dropped_from_device, moved.seconds
        )
    });
    Ok(())
}

/// Move frames both ways until stopped: the device's send mailbox is looked at every
/// millisecond (one status read when it is empty), the TAP waited on in between.
fn run_bridge(
    c: &mut eoe::BusClient<'_, '_>,
    tap: &Tap,
    duration: Option<Duration>,
) -> Result<Moved, eoe::Error> {
    let t0 = Instant::now();
    let mut m = Moved::default();
    let mut buf = [0u8; MAX_TAP_FRAME];
    while !crate::signals::stop_requested() && duration.is_none_or(|d| t0.elapsed() < d) {
        let mut busy = false;
        for _ in 0..BURST {
            let Some(f) = c.poll()? else { break };
            busy = true;
            // A frame the host's stack refuses (a full queue) is lost as on any wire.
            if tap.send(&f).is_ok() {
                m.to_host += 1;
            }
        }
        for _ in 0..BURST {
            match tap.recv(&mut buf) {
                Ok(Some(n)) if n <= eoe::MAX_FRAME => {
                    c.send_frame(&buf[..n])?;
                    m.to_device += 1;
                    busy = true;
                }
                Ok(Some(_)) => busy = true,
                Ok(None) | Err(_) => break,
            }
        }
        if !busy {
            let mut p = libc::pollfd {
                fd: tap.fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one pollfd, valid for the call.
            unsafe { libc::poll(&mut p, 1, 1) };
        }
    }
    m.dropped_from_device = c.dropped();
    m.seconds = t0.elapsed().as_secs_f64();
    Ok(m)
}
