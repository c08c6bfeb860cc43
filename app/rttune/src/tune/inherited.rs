//! Restoring the tasks created while the shield was up: they are not in the journal, but
//! inherited the narrowed mask from the thread that created them.

use super::{KnobGroup, Outcome, OutcomeItem};
use crate::cpuset::CpuSet;
use crate::facts;
use crate::host::Host;
use crate::journal::{Change, EntryState, Journal};
use crate::sysroot::SysRoot;

/// How far up the parent chain a task created under the shield is traced.
const MAX_ANCESTRY: usize = 64;

/// A journalled task affinity, parsed.
struct Shielded<'a> {
    pid: u32,
    tid: u32,
    starttime: u64,
    comm: &'a str,
    original: CpuSet,
    target: CpuSet,
}

/// Where a task created under the shield got its mask from.
enum Source<'a> {
    /// The nearest journalled ancestor was narrowed by apply and the task still has exactly the
    /// narrowed mask; `hops` = processes walked up (0: a thread of the same process).
    Inherited(&'a Shielded<'a>, usize),
    /// A journalled ancestor exists, but the task's mask is not the one it was narrowed to.
    Differs,
    /// No journalled ancestor (or the chain leads through a task older than the shield).
    Unrelated,
}

/// Tasks created while the tasks group was applied inherited the narrowed mask from the thread
/// that created them and are not in the journal. Each such task whose mask is still exactly the
/// narrowed mask of its nearest journalled ancestor gets that ancestor's original: the mask it
/// would have inherited without the shield. Everything else is left alone.
pub(super) fn restore_inherited(root: &SysRoot, host: &dyn Host, j: &Journal, out: &mut Outcome) {
    let shielded: Vec<Shielded> = j
        .entries
        .iter()
        .filter(|e| e.state == EntryState::Applied)
        .filter_map(|e| match &e.change {
            Change::Affinity {
                pid,
                tid,
                starttime,
                comm,
                original,
                target,
            } => Some(Shielded {
                pid: *pid,
                tid: *tid,
                starttime: *starttime,
                comm,
                original: CpuSet::parse_list(original).ok()?,
                target: CpuSet::parse_list(target).ok()?,
            }),
            _ => None,
        })
        .collect();
    if shielded.is_empty() {
        return;
    }
    let Some(since) = j.tasks_since else {
        out.notes.push(
            "the journal does not say when the tasks group was applied (written by an older \
             rtcat): tasks started while the shield was up keep the narrowed CPU mask they \
             inherited"
                .into(),
        );
        return;
    };
    // every journalled task, in any state: these are restored (or not) from their own entries
    let journalled: std::collections::HashSet<(u32, u64)> = j
        .entries
        .iter()
        .filter_map(|e| match &e.change {
            Change::Affinity { tid, starttime, .. } => Some((*tid, *starttime)),
            _ => None,
        })
        .collect();
    // per process, the main thread first, then by tid
    let mut by_pid: std::collections::HashMap<u32, Vec<&Shielded>> = Default::default();
    for s in &shielded {
        by_pid.entry(s.pid).or_default().push(s);
    }
    for v in by_pid.values_mut() {
        v.sort_by_key(|s| (s.tid != s.pid, s.tid));
    }
    let procs = facts::read_processes(root);
    let tasks = facts::read_tasks(root, &procs);
    let mains: std::collections::HashMap<u32, (u32, u64)> = tasks
        .iter()
        .filter(|t| t.tid == t.pid)
        .map(|t| (t.pid, (t.ppid, t.starttime)))
        .collect();
    let ids_of = |pid: u32| {
        mains
            .get(&pid)
            .copied()
            .or_else(|| facts::read_proc_ids(root, pid))
    };
    let source = |t: &facts::Task| -> Source {
        let mut pid = t.pid;
        for hops in 0..MAX_ANCESTRY {
            // (parent, start time) of process `pid`; gone = nothing to trace
            let Some((ppid, start)) = ids_of(pid) else {
                return Source::Unrelated;
            };
            // journalled threads of this very process (not of an earlier one with the same pid):
            // the main thread with its start time, other threads started after it
            let cands: Vec<&Shielded> = by_pid
                .get(&pid)
                .map(|v| {
                    v.iter()
                        .copied()
                        .filter(|s| {
                            if s.tid == pid {
                                s.starttime == start
                            } else {
                                s.starttime >= start
                            }
                        })
                        .collect()
                })
                .unwrap_or_default();
            if !cands.is_empty() {
                return match cands.into_iter().find(|s| s.target == t.allowed) {
                    Some(s) => Source::Inherited(s, hops),
                    None => Source::Differs,
                };
            }
            // a process that is older than the shield and not journalled gave its own mask
            if start <= since || ppid == 0 {
                return Source::Unrelated;
            }
            pid = ppid;
        }
        Source::Unrelated
    };
    let me = std::process::id();
    let rtcat = facts::pids_named(&procs, "rtcat");
    let (mut differ, mut failed) = (0usize, 0usize);
    for t in &tasks {
        // only tasks created under the shield; like apply, never rtcat, kthreads (the kernel
        // sets their masks, they do not inherit kthreadd's) or PF_NO_SETAFFINITY threads
        if t.starttime <= since
            || journalled.contains(&(t.tid, t.starttime))
            || t.is_kthread()
            || t.no_setaffinity()
            || rtcat.contains(&t.pid)
            || (root.is_live() && t.pid == me)
        {
            continue;
        }
        let (s, hops) = match source(t) {
            Source::Inherited(s, hops) => (s, hops),
            Source::Differs => {
                differ += 1;
                continue;
            }
            Source::Unrelated => continue,
        };
        let rel = match hops {
            0 => "thread",
            1 => "parent",
            _ => "ancestor",
        };
        let result = match host.set_affinity(t.tid, &s.original) {
            Ok(()) => "restored".to_string(),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => "gone (task exited)".into(),
            Err(e) => {
                failed += 1;
                format!("not restored: {e}")
            }
        };
        out.items.push(OutcomeItem {
            group: KnobGroup::Tasks,
            id: format!("task:{}:{}", t.tid, t.starttime),
            what: format!(
                "task {}[{}] (started while the shield was up, inherited from {rel} {}[{}]) \
                 affinity {} -> {}",
                t.comm, t.tid, s.comm, s.tid, t.allowed, s.original
            ),
            result,
        });
    }
    if differ > 0 {
        out.notes.push(format!(
            "{differ} task(s) started while the shield was up have a CPU mask other than the one \
             the shield gave their journalled ancestor (set since): left as they are"
        ));
    }
    if failed > 0 {
        out.notes.push(format!(
            "{failed} task(s) started while the shield was up could not get their inherited CPU \
             mask back; they were never journalled, so restore will not retry them"
        ));
    }
}
