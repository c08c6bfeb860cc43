//! NIC: link state and interrupt coalescing (tune group `coalesce`).

use crate::doctor::{Check, Ctx, Verdict, chk};
use crate::host::Host;
use crate::journal::Change;
use crate::tune::plan::skip;
use crate::tune::{KnobGroup, Plan, Planned, TuneCtx};

impl Ctx<'_> {
    pub(crate) fn nic_link(&self) -> Check {
        let id = "nic.link";
        let why = "EtherCAT needs the link up at 100 Mbit/s (or more) full duplex";
        let Some(i) = &self.d.iface else {
            return chk(id, Verdict::NA)
                .obs("no interface (--iface or [bus].interface)")
                .exp("up, full duplex")
                .why(why);
        };
        let base = format!("/sys/class/net/{i}");
        if let Err(m) = crate::netif::check_exists(self.root(), i) {
            return chk(id, Verdict::Fail)
                .obs(format!("interface {m}"))
                .exp("up, full duplex")
                .why(why)
                .fix("check [bus].interface / --iface");
        }
        let op = self
            .root()
            .read_opt(&format!("{base}/operstate"))
            .unwrap_or_else(|| "?".into());
        let speed = self
            .root()
            .read_opt(&format!("{base}/speed"))
            .and_then(|s| s.parse::<i64>().ok());
        let duplex = self
            .root()
            .read_opt(&format!("{base}/duplex"))
            .unwrap_or_else(|| "?".into());
        let obs = format!(
            "{i}: {op}, {} Mbit/s, {duplex} duplex",
            speed.map(|s| s.to_string()).unwrap_or("?".into())
        );
        let v = if (op != "up" && op != "unknown")
            || duplex == "half"
            || speed.is_some_and(|s| (0..100).contains(&s))
        {
            Verdict::Fail
        } else if speed.is_none() || speed == Some(-1) || duplex != "full" {
            Verdict::Warn
        } else {
            Verdict::Pass
        };
        let c = chk(id, v)
            .obs(obs)
            .exp("up, >= 100 Mbit/s, full duplex")
            .why(why);
        c.fix_if(
            v != Verdict::Pass,
            format!("ip link set {i} up; check the cable and the first subdevice"),
        )
    }

    pub(crate) fn nic_coalesce(&self) -> Check {
        let id = "nic.coalesce";
        let why = "stmmac defers RX IRQs (RIWT) unless rx-frames 1, and TX completion to a timer; RK3588 S5: tx-usecs 0 tx-frames 25 cut the max from 13.5 to 3.9 us";
        let Some(i) = &self.d.iface else {
            return chk(id, Verdict::NA)
                .obs("no interface")
                .exp("configured coalescing")
                .why(why);
        };
        let want = &self.d.tune.coalesce;
        let exp = if want.is_empty() {
            "rx-frames 1 or rx-usecs 0 (no [tune.coalesce] configured)".to_string()
        } else {
            let mut v = Vec::new();
            if let Some(x) = want.rx_usecs {
                v.push(format!("rx-usecs {x}"));
            }
            if let Some(x) = want.rx_frames {
                v.push(format!("rx-frames {x}"));
            }
            if let Some(x) = want.tx_usecs {
                v.push(format!("tx-usecs {x}"));
            }
            if let Some(x) = want.tx_frames {
                v.push(format!("tx-frames {x}"));
            }
            v.join(" ")
        };
        if let Err(m) = crate::netif::check_exists(self.root(), i) {
            return chk(id, Verdict::NA)
                .obs(format!("interface {m}"))
                .exp(exp)
                .why(why);
        }
        match self.d.host.get_coalesce(i) {
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => chk(id, Verdict::NA)
                .obs(format!("{i}: driver has no coalescing (EOPNOTSUPP)"))
                .exp(exp)
                .why(why),
            Err(e) => chk(id, Verdict::NA)
                .obs(format!("{i}: cannot read coalescing: {e}"))
                .exp(exp)
                .why(why),
            Ok(cur) => {
                let ok = if want.is_empty() {
                    cur.rx_usecs() == 0 || cur.rx_frames() <= 1
                } else {
                    cur.with(want) == cur
                };
                let v = if ok {
                    Verdict::Pass
                } else if want.is_empty() {
                    Verdict::Warn
                } else {
                    Verdict::Fail
                };
                let c = chk(id, v)
                    .obs(format!("{i}: {}", cur.describe()))
                    .exp(exp.clone())
                    .why(why);
                c.fix_if(!ok, format!("{} (or: ethtool -C {i} {exp})", self.tune_cmd))
            }
        }
    }
}

/// Tune group `coalesce`: `[tune.coalesce]` on the NIC, read back by the driver.
pub(crate) fn plan_coalesce(tc: &TuneCtx, host: &dyn Host, plan: &mut Plan) {
    let g = KnobGroup::Coalesce;
    if tc.tune.coalesce.is_empty() {
        skip(plan, g, "coalesce", "no [tune.coalesce] values configured");
        return;
    }
    let Some(i) = &tc.iface else {
        skip(
            plan,
            g,
            "coalesce",
            "no interface (--iface or [bus].interface)",
        );
        return;
    };
    match host.get_coalesce(i) {
        Err(e) => skip(
            plan,
            g,
            format!("coalesce:{i}"),
            format!("cannot read coalescing of {i}: {e}"),
        ),
        Ok(cur) => {
            let target = cur.with(&tc.tune.coalesce);
            if target != cur {
                plan.changes.push(Planned {
                    group: g,
                    id: format!("coalesce:{i}"),
                    what: format!("{i} coalescing"),
                    current: cur.describe(),
                    target: target.describe(),
                    change: Change::Coalesce {
                        iface: i.clone(),
                        original: cur,
                        target,
                    },
                });
            }
        }
    }
}
