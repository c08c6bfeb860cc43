//! Capabilities of the running rtcat or of rtcat.service.

use crate::doctor::{Check, Ctx, Verdict, chk};
use crate::facts;
use caps::Capability;

impl Ctx<'_> {
    pub(crate) fn caps(&self) -> Check {
        let id = "caps.service";
        let why = "SCHED_FIFO needs CAP_SYS_NICE, mlockall CAP_IPC_LOCK, the raw EtherCAT socket CAP_NET_RAW";
        // names and bits from the caps crate (include/uapi/linux/capability.h)
        const NEED: [Capability; 3] = [
            Capability::CAP_SYS_NICE,
            Capability::CAP_IPC_LOCK,
            Capability::CAP_NET_RAW,
        ];
        let exp = NEED.map(|c| c.to_string()).join(", ");
        let judge = |mask: u64, src: String| {
            let missing: Vec<String> = NEED
                .iter()
                .filter(|c| mask & c.bitmask() == 0)
                .map(|c| c.to_string())
                .collect();
            let c = chk(
                id,
                if missing.is_empty() {
                    Verdict::Pass
                } else {
                    Verdict::Fail
                },
            )
            .obs(if missing.is_empty() {
                format!("{src}: all present")
            } else {
                format!("{src}: missing {}", missing.join(", "))
            })
            .exp(exp.clone())
            .why(why);
            c.fix_if(
                !missing.is_empty(),
                format!("AmbientCapabilities={} in rtcat.service", missing.join(" ")),
            )
        };
        if let Some(pid) = self.rtcat_pid() {
            let st = self
                .root()
                .read_raw(&format!("/proc/{pid}/status"))
                .unwrap_or_default();
            let eff = facts::status_field(&st, "CapEff")
                .and_then(|h| u64::from_str_radix(h, 16).ok())
                .unwrap_or(0);
            return judge(eff, format!("rtcat[{pid}] CapEff {eff:016x}"));
        }
        if let Some((path, m)) = self.unit() {
            let user = m.get("User").cloned().unwrap_or_else(|| "root".into());
            let names_to_mask = |s: &str| -> u64 {
                let mut mask = 0u64;
                for tok in s.split_whitespace() {
                    if let Some(c) = NEED.iter().find(|c| c.to_string() == tok) {
                        mask |= c.bitmask();
                    }
                }
                mask
            };
            let bounding = m
                .get("CapabilityBoundingSet")
                .map(|s| {
                    let t = s.trim();
                    if let Some(neg) = t.strip_prefix('~') {
                        !names_to_mask(neg)
                    } else {
                        names_to_mask(t)
                    }
                })
                .unwrap_or(u64::MAX);
            let mask = if user == "root" || user == "0" {
                bounding
            } else {
                let amb = names_to_mask(
                    m.get("AmbientCapabilities")
                        .map(|s| s.as_str())
                        .unwrap_or(""),
                );
                let file = self
                    .d
                    .host
                    .file_caps(self.root(), "/usr/bin/rtcat")
                    .ok()
                    .flatten()
                    .filter(|f| f.effective)
                    .map(|f| f.permitted)
                    .unwrap_or(0);
                (amb | file) & bounding
            };
            return judge(mask, format!("{path}: User={user}"));
        }
        chk(id, Verdict::NA)
            .obs("rtcat not running; no rtcat.service unit")
            .exp(exp)
            .why(why)
    }
}
