//! How the cycle waits for its replies (`[cycle] wait`, docs/NOTES.md §1.2), judged against the
//! RT CPU it spins or sleeps on. Nothing to tune: the choice is the configuration's, doctor says
//! whether the machine suits it.

use crate::config::CycleWait;
use crate::doctor::{Check, Ctx, Verdict, chk};

/// The SCHED_FIFO priority PREEMPT_RT gives an interrupt's thread (`setup_irq_thread` ->
/// `sched_set_fifo`: MAX_RT_PRIO / 2, kernel/irq/manage.c, kernel/sched/syscalls.c).
const IRQ_THREAD_PRIORITY: u32 = 50;

impl Ctx<'_> {
    /// The priority of interrupt `num`'s thread (`irq/NUM-name`) as it runs, else the kernel's
    /// default for one.
    fn irq_thread_priority(&self, num: u32) -> u32 {
        let prefix = format!("irq/{num}-");
        self.tasks
            .iter()
            .find(|t| t.is_irq_thread() && t.comm.starts_with(&prefix))
            .map_or(IRQ_THREAD_PRIORITY, |t| t.rt_priority)
    }

    pub(crate) fn cycle_wait(&self) -> Check {
        let id = "cycle.wait";
        let why = "a cycle that polls for its replies at SCHED_FIFO keeps every task of lower priority on its CPU from running for the whole round trip, and for the whole response timeout when the segment stops answering";
        let exp = "hybrid (the default); busy only on an isolated CPU without the NIC's interrupts";
        let Some(wait) = self.d.wait else {
            return chk(id, Verdict::NA)
                .obs("no rtcat configuration (--config): how the cycle waits is not known")
                .exp(exp)
                .why(why);
        };
        let isolated = self.rt.is_subset(&self.isolated);
        // the NIC's interrupts delivered on the RT CPU now (the effective affinity when known)
        // whose thread a polling cycle keeps from running: one of SCHED_FIFO priority not above
        // the cycle's (equal priorities do not preempt each other). Without a known priority
        // the cycle's is taken to be above.
        let nic = self.nic_irq_nums();
        let nic_here: Vec<String> = self
            .irqs
            .iter()
            .filter(|q| nic.contains(&q.num))
            .filter(|q| {
                q.effective
                    .as_ref()
                    .or(q.affinity.as_ref())
                    .is_some_and(|a| a.intersects(&self.rt))
            })
            .filter_map(|q| {
                let thread = self.irq_thread_priority(q.num);
                self.d
                    .priority
                    .is_none_or(|p| u32::from(p) >= thread)
                    .then(|| format!("IRQ {} (its thread at FIFO {thread})", q.label()))
            })
            .collect();
        let cpu = &self.rtl;
        let at = self
            .d
            .priority
            .map(|p| format!(" at FIFO {p}"))
            .unwrap_or_default();
        let (v, obs, fix) = match wait {
            CycleWait::Thread => (
                Verdict::Pass,
                "txrx = \"thread\": the TX/RX thread sleeps on its socket and eventfd".to_string(),
                None,
            ),
            CycleWait::Sleep => (
                Verdict::Pass,
                format!(
                    "sleep on CPU {cpu}: every reply pays the wake-up of a sleeping thread; hybrid takes it sooner for no more CPU (NOTES §1.2)"
                ),
                None,
            ),
            // PREEMPT_RT runs the NIC's interrupt handling in a SCHED_FIFO 50 thread: below a
            // cycle polling at a higher priority on the same CPU, the reply is not delivered
            // until the poll gives up (the whole timeout in busy, its bounded window in hybrid).
            CycleWait::Busy if self.is_rt && !nic_here.is_empty() => (
                Verdict::Fail,
                format!(
                    "busy{at} on CPU {cpu}, where {} is delivered: its interrupt thread cannot run while the cycle polls above it, so every reply waits for the response timeout",
                    nic_here.join(", ")
                ),
                Some(format!(
                    "move the NIC's interrupts off CPU {cpu} ({}) or set [cycle] wait = \"hybrid\"",
                    self.tune_cmd
                )),
            ),
            CycleWait::Busy if !isolated => (
                Verdict::Warn,
                format!(
                    "busy on CPU {cpu}, which is not isolated: the tasks that share it (kworkers, ksoftirqd) wait for every round trip"
                ),
                Some(format!(
                    "set [cycle] wait = \"hybrid\" (its poll is at most 200 us), or isolate CPU {cpu} (isolcpus=, rtcat tune)"
                )),
            ),
            CycleWait::Busy => (
                Verdict::Pass,
                format!(
                    "busy on isolated CPU {cpu}: the core polls for the whole round trip (and the whole timeout when the segment stops answering)"
                ),
                None,
            ),
            CycleWait::Hybrid if self.is_rt && !nic_here.is_empty() => (
                Verdict::Warn,
                format!(
                    "hybrid{at} on CPU {cpu}, where {} is delivered: its interrupt thread waits for the end of each poll window",
                    nic_here.join(", ")
                ),
                Some(format!(
                    "move the NIC's interrupts off CPU {cpu} ({})",
                    self.tune_cmd
                )),
            ),
            CycleWait::Hybrid => (
                Verdict::Pass,
                format!(
                    "hybrid on CPU {cpu}: sleeps until shortly before the reply, polls at most 200 us"
                ),
                None,
            ),
        };
        let c = chk(id, v)
            .obs(format!("{}: {obs}", wait.name()))
            .exp(exp)
            .why(why);
        match fix {
            Some(f) => c.fix(f),
            None => c,
        }
    }
}
