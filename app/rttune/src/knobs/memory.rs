//! Memory: transparent huge pages, swap, locked memory.

use crate::doctor::{Check, Ctx, Verdict, chk};
use crate::facts;

impl Ctx<'_> {
    pub(crate) fn thp(&self) -> Check {
        let id = "mem.thp";
        let why = "THP 'always' makes page faults compact memory and khugepaged collapse pages behind the RT task";
        match self
            .root()
            .read_opt("/sys/kernel/mm/transparent_hugepage/enabled")
        {
            None => chk(id, Verdict::NA)
                .obs("THP not built in")
                .exp("never or madvise")
                .why(why),
            Some(s) => {
                let sel = s
                    .split_whitespace()
                    .find(|t| t.starts_with('['))
                    .map(|t| t.trim_matches(['[', ']']).to_string())
                    .unwrap_or(s.clone());
                let bad = sel == "always";
                let c = chk(id, if bad { Verdict::Warn } else { Verdict::Pass })
                    .obs(sel)
                    .exp("never or madvise")
                    .why(why);
                c.fix_if(bad, "echo never > /sys/kernel/mm/transparent_hugepage/enabled (or transparent_hugepage=never on the command line)")
            }
        }
    }

    pub(crate) fn swap(&self) -> Check {
        let id = "mem.swap";
        let why = "swap-out of any page the control path touches (unlocked memory, page cache) costs milliseconds";
        match self.root().read_opt("/proc/swaps") {
            None => chk(id, Verdict::NA)
                .obs("/proc/swaps absent")
                .exp("no swap")
                .why(why),
            Some(s) => {
                let dev: Vec<String> = s
                    .lines()
                    .skip(1)
                    .filter_map(|l| l.split_whitespace().next())
                    .map(String::from)
                    .collect();
                if dev.is_empty() {
                    chk(id, Verdict::Pass)
                        .obs("no swap")
                        .exp("no swap")
                        .why(why)
                } else {
                    chk(id, Verdict::Warn)
                        .obs(format!("swap on {}", dev.join(", ")))
                        .exp("no swap")
                        .why(why)
                        .fix("swapoff -a and remove swap from /etc/fstab")
                }
            }
        }
    }

    pub(crate) fn memlock(&self) -> Check {
        let id = "mem.memlock";
        let why = "rtcat mlockall()s its memory; without CAP_IPC_LOCK the RLIMIT_MEMLOCK limit (often 8 MiB) makes that fail and page faults hit the cycle";
        if let Some(pid) = self.rtcat_pid() {
            let status = self
                .root()
                .read_raw(&format!("/proc/{pid}/status"))
                .unwrap_or_default();
            let lck = facts::status_field(&status, "VmLck")
                .unwrap_or("?")
                .to_string();
            let rss = facts::status_field(&status, "VmRSS")
                .unwrap_or("?")
                .to_string();
            let limit = self
                .root()
                .read_raw(&format!("/proc/{pid}/limits"))
                .ok()
                .and_then(|l| {
                    l.lines()
                        .find(|x| x.starts_with("Max locked memory"))
                        .map(|x| {
                            x.split_whitespace()
                                .skip(3)
                                .take(2)
                                .collect::<Vec<_>>()
                                .join(" ")
                        })
                })
                .unwrap_or_else(|| "?".into());
            let locked = lck
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0)
                > 0;
            let c = chk(id, if locked { Verdict::Pass } else { Verdict::Fail })
                .obs(format!(
                    "rtcat[{pid}] VmLck {lck} of VmRSS {rss}; RLIMIT_MEMLOCK {limit}"
                ))
                .exp("VmLck about VmRSS")
                .why(why);
            return c.fix_if(
                !locked,
                "set [rt].lock_memory = true and LimitMEMLOCK=infinity in rtcat.service",
            );
        }
        match self.unit() {
            None => chk(id, Verdict::NA)
                .obs("rtcat not running; no rtcat.service unit")
                .exp("LimitMEMLOCK=infinity or CAP_IPC_LOCK")
                .why(why),
            Some((path, m)) => {
                let user = m.get("User").cloned().unwrap_or_else(|| "root".into());
                let lim = m.get("LimitMEMLOCK").cloned();
                let amb = m.get("AmbientCapabilities").cloned().unwrap_or_default();
                let ok = lim.as_deref() == Some("infinity")
                    || user == "root"
                    || user == "0"
                    || amb.contains("CAP_IPC_LOCK");
                let c = chk(id, if ok { Verdict::Pass } else { Verdict::Fail })
                    .obs(format!(
                        "{path}: User={user} LimitMEMLOCK={} AmbientCapabilities={}",
                        lim.as_deref().unwrap_or("(default)"),
                        if amb.trim().is_empty() {
                            "(none)"
                        } else {
                            amb.trim()
                        }
                    ))
                    .exp("LimitMEMLOCK=infinity, or root / CAP_IPC_LOCK")
                    .why(why);
                c.fix_if(!ok, format!("add LimitMEMLOCK=infinity to {path}"))
            }
        }
    }
}
