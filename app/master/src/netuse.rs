//! Whether another program already drives an interface: two EtherCAT masters on one segment
//! corrupt each other's frames, so the master and the bus commands refuse a NIC that has an
//! EtherCAT packet socket bound to it.
//!
//! Read from /proc/net/packet (one line per AF_PACKET socket of this network namespace: `sk
//! RefCnt Type Proto Iface R Rmem User Inode`, Proto in hex, Iface the interface index; Linux
//! `net/packet/af_packet.c`, `packet_seq_show`), so it finds any master — rtcat, SOEM, a second
//! `rtcat scan` — without their cooperation. A socket for all protocols (tcpdump, `ETH_P_ALL`)
//! is not a master and is not counted.

use crate::error::{Error, Result};
use safefs::SysRoot;

/// An EtherCAT socket found on an interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PacketUser {
    /// Owner uid.
    pub uid: u32,
    /// Socket inode (find the process with `ls -l /proc/*/fd | grep socket:[INODE]`).
    pub inode: u64,
}

/// The EtherCAT (0x88a4) packet sockets bound to interface index `ifindex`, from the text of
/// /proc/net/packet. Lines that do not parse are skipped (the header, a future column layout).
pub fn ethercat_sockets(proc_net_packet: &str, ifindex: u32) -> Vec<PacketUser> {
    proc_net_packet
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 9 {
                return None;
            }
            let proto = u16::from_str_radix(f[3], 16).ok()?;
            let iface: u32 = f[4].parse().ok()?;
            (proto == rtcat_packet::ETHERCAT_ETHERTYPE && iface == ifindex).then(|| PacketUser {
                uid: f[7].parse().unwrap_or(u32::MAX),
                inode: f[8].parse().unwrap_or(0),
            })
        })
        .collect()
}

/// Refuse `iface` when an EtherCAT socket is bound to it already. An interface that does not
/// exist passes (opening it gives the precise error).
pub fn check_free(root: &SysRoot, iface: &str) -> Result<()> {
    if !safefs::netif::valid_name(iface) {
        return Ok(());
    }
    let Some(idx) = root
        .read_opt(&format!("/sys/class/net/{iface}/ifindex"))
        .and_then(|s| s.trim().parse::<u32>().ok())
    else {
        return Ok(());
    };
    let Some(table) = root.read_opt("/proc/net/packet") else {
        return Ok(());
    };
    match ethercat_sockets(&table, idx).first() {
        None => Ok(()),
        Some(u) => Err(Error::InterfaceBusy(format!(
            "interface {iface} is in use by another EtherCAT master (a packet socket of uid {}, \
             inode {}): stop it first (`systemctl stop rtcat`), or talk to the running master \
             instead",
            u.uid, u.inode
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "sk               RefCnt Type Proto  Iface R Rmem   User   Inode
ffff8880046e3000 3      3    88a4   3     1 0      998    24817
ffff8880046e4000 3      3    0003   3     1 0      0      24900
ffff8880046e5000 3      3    88a4   4     1 0      0      25000
garbage line
";

    #[test]
    fn finds_ethercat_sockets_on_the_interface_only() {
        assert_eq!(
            ethercat_sockets(TABLE, 3),
            vec![PacketUser {
                uid: 998,
                inode: 24817
            }]
        );
        assert_eq!(ethercat_sockets(TABLE, 4).len(), 1);
        assert!(ethercat_sockets(TABLE, 5).is_empty());
        assert!(ethercat_sockets("", 3).is_empty());
    }

    #[test]
    fn a_busy_interface_is_refused_on_a_fake_tree() {
        let dir = tempfile::tempdir().unwrap();
        let root = SysRoot::new(dir.path());
        std::fs::create_dir_all(dir.path().join("sys/class/net/ecat0")).unwrap();
        std::fs::write(dir.path().join("sys/class/net/ecat0/ifindex"), "3\n").unwrap();
        std::fs::create_dir_all(dir.path().join("proc/net")).unwrap();
        std::fs::write(dir.path().join("proc/net/packet"), TABLE).unwrap();
        let e = check_free(&root, "ecat0").unwrap_err().to_string();
        assert!(
            e.contains("interface ecat0 is in use") && e.contains("uid 998"),
            "{e}"
        );
        std::fs::write(dir.path().join("sys/class/net/ecat0/ifindex"), "5\n").unwrap();
        check_free(&root, "ecat0").unwrap();
        check_free(&root, "absent0").unwrap();
    }
}
