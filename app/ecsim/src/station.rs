//! Which devices answer a configured-address (FPxx) datagram, found without asking every device
//! of the chain: a segment of n devices polled with one FPRD each per cycle would otherwise cost
//! n² device visits.

use crate::esc::Esc;

/// Station addresses of the chain, as last seen, and the same sorted for lookup.
#[derive(Debug, Default)]
pub(crate) struct StationIndex {
    /// Station address per chain position.
    addrs: Vec<u16>,
    /// (address, position), sorted: positions of one address stay in chain order.
    sorted: Vec<(u16, usize)>,
}

impl StationIndex {
    /// Bring the index up to date with the devices' station address registers: an O(n) compare,
    /// and a rebuild only when an address changed (configuration, power cycle, any write path).
    pub(crate) fn refresh(&mut self, devices: &[Esc]) {
        let same = self.addrs.len() == devices.len()
            && self
                .addrs
                .iter()
                .zip(devices)
                .all(|(a, d)| *a == d.station_address());
        if same {
            return;
        }
        self.addrs.clear();
        self.addrs.extend(devices.iter().map(Esc::station_address));
        self.sorted.clear();
        self.sorted
            .extend(self.addrs.iter().enumerate().map(|(i, a)| (*a, i)));
        self.sorted.sort_unstable();
    }

    /// Chain positions of the devices whose station address is `addr`, in chain order (usually
    /// one; all of them while addresses are still unset, or when a master assigns one twice).
    pub(crate) fn positions(&self, addr: u16) -> impl Iterator<Item = usize> + '_ {
        let from = self.sorted.partition_point(|(a, _)| *a < addr);
        self.sorted[from..]
            .iter()
            .take_while(move |(a, _)| *a == addr)
            .map(|(_, i)| *i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::SegmentSpec;

    fn chain(addrs: &[u16]) -> Vec<Esc> {
        let spec = SegmentSpec::uniform(addrs.len(), 2, 2);
        addrs
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let mut e = Esc::new(spec.devices[i].clone(), i, addrs.len());
                assert!(e.phys_write(0x0010, &a.to_le_bytes(), 0));
                e
            })
            .collect()
    }

    #[test]
    fn finds_every_device_with_an_address_in_chain_order() {
        let mut devs = chain(&[0x1002, 0x1000, 0x1002, 0x1001]);
        let mut ix = StationIndex::default();
        ix.refresh(&devs);
        assert_eq!(ix.positions(0x1002).collect::<Vec<_>>(), [0, 2]);
        assert_eq!(ix.positions(0x1000).collect::<Vec<_>>(), [1]);
        assert_eq!(ix.positions(0x0fff).count(), 0);
        assert_eq!(ix.positions(0xffff).count(), 0);
        // a device re-addressed behind the index's back is seen on the next refresh
        assert!(devs[2].phys_write(0x0010, &0x2000u16.to_le_bytes(), 0));
        ix.refresh(&devs);
        assert_eq!(ix.positions(0x1002).collect::<Vec<_>>(), [0]);
        assert_eq!(ix.positions(0x2000).collect::<Vec<_>>(), [2]);
    }
}
