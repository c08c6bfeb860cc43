//! The real-time knobs, one file per area: kernel build, boot arguments, scheduler, power, IRQs,
//! workqueues, memory, tasks, NIC, capabilities; and, not knobs but read the same way, how the
//! cycle waits (judged against its CPU) and the A/B update slots.
//!
//! Each area file is the one place to read for its knobs: which fact is read (its own readers,
//! or the shared ones of [`crate::facts`]), how `rtcat doctor` judges it (the area's checks, as
//! methods of doctor's context) and how `rtcat tune` plans it (`plan_*`, one per knob group of
//! the area). What happens to a planned change afterwards does not depend on the knob, only on
//! its kind — a kernel file, a service, NIC coalescing, a task's affinity — so applying,
//! restoring and showing it live with [`crate::journal::Change`], and `tune/` is split by phase
//! around them. The fake machine of the tests is `testkit` (feature `testkit`).
//!
//! This split follows the code: a knob's judgement and its plan share the same facts and rules
//! (e.g. the governor: the cpufreq policy owning the RT CPU and `[tune].governor`), while its
//! apply/restore is one write of a file shared by every sysfs knob.

pub(crate) mod boot;
pub(crate) mod caps;
pub(crate) mod irq;
pub(crate) mod kernel;
pub(crate) mod memory;
pub(crate) mod nic;
pub(crate) mod power;
pub(crate) mod sched;
pub(crate) mod slots;
pub(crate) mod tasks;
pub(crate) mod wait;
pub(crate) mod workqueue;
