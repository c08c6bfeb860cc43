//! One run of one stage: apply the stage's knobs, start the load, run the bench, stop the load,
//! restore, then classify the run and file its results.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rttune::KnobGroup;
use rttune::tune::{self, Outcome};

use super::log::{LadderLog, RunLog, RunStatus};
use super::plan::Plan;
use super::progress::Progress;
use super::restore::{Tuned, host_for};
use super::{StageId, bench, output, unix_now};
use crate::interrupt::Interrupt;

/// Notes on what the stage's knobs did: N/A and refused knobs (attributed to the stage that adds
/// their group, also when that stage is not in the list), and a stage that changed nothing.
pub(super) fn stage_notes(stage: StageId, apply: &Outcome) -> Vec<String> {
    let owner = |g: KnobGroup| {
        StageId::ALL
            .into_iter()
            .find(|s| KnobGroup::expand(&s.own_groups()).contains(&g))
            .unwrap_or(stage)
    };
    let mut notes = Vec::new();
    for s in &apply.skipped {
        let o = owner(s.group);
        notes.push(format!(
            "{} ({}): {} N/A here: {}",
            o.id(),
            o.change(),
            s.id,
            s.reason
        ));
    }
    for i in apply
        .items
        .iter()
        // a task that exited between plan and apply is not a refusal
        .filter(|i| i.result.starts_with("refused") && i.result != "refused: task exited")
    {
        let o = owner(i.group);
        notes.push(format!(
            "{} ({}): {}: {}",
            o.id(),
            o.change(),
            i.what,
            i.result
        ));
    }
    let own = KnobGroup::expand(&stage.own_groups());
    let applied = apply
        .items
        .iter()
        .any(|i| own.contains(&i.group) && i.result == "applied");
    if !own.is_empty() && !applied {
        notes.push(format!(
            "{} ({}): changed nothing on this system (already in effect, N/A or refused): \
             it measures the same setup as the stage below",
            stage.id(),
            stage.change()
        ));
    }
    notes
}

pub(super) struct RunCtx<'a> {
    pub plan: &'a Plan,
    pub stop: &'a dyn Interrupt,
    pub exe: &'a Path,
    pub log: &'a mut LadderLog,
    pub prog: &'a mut Progress,
    pub csv: &'a mut fs::File,
}

pub(super) enum Next {
    Continue,
    /// Stopped by a signal.
    Stop,
    /// The ladder cannot go on (a knob could not be applied or restored).
    Fatal(String),
}

pub(super) fn one_run(c: &mut RunCtx<'_>, stage: StageId, k: u32) -> Result<(RunLog, Next)> {
    let plan = c.plan;
    let started = unix_now().as_nanos() as u64;
    let t0 = Instant::now();
    let rel = format!("{}/run{k}", stage.id());
    let dir = plan.out.join(&rel);
    let run_name = format!("run{k}");
    let stage_dir = plan
        .dir
        .subdir(stage.id(), true)
        .with_context(|| format!("{}: cannot create", stage.id()))?;
    let run_dir = stage_dir
        .subdir(&run_name, true)
        .with_context(|| format!("{rel}: cannot create"))?;
    let mut rl = RunLog {
        stage: stage.id(),
        run: k,
        status: RunStatus::Failed,
        dir: rel.clone(),
        started_unix_ns: started,
        wall_s: 0.0,
        bench_exit: None,
        error: None,
        tune_apply: None,
        tune_restore: None,
        load: None,
    };
    // 1. the stage's knobs
    let groups = stage.groups();
    let mut guard = None;
    let mut fatal = None;
    let mut bench_err = None;
    if let (false, Some(tc)) = (groups.is_empty(), &plan.tune) {
        guard = Some(Tuned {
            root: &plan.root,
            journal: plan.journal(),
            armed: true,
        });
        match tune::apply(
            &plan.root,
            tc,
            host_for(&plan.root),
            &groups,
            &plan.journal(),
        ) {
            Ok(o) => {
                for n in stage_notes(stage, &o) {
                    c.log.note(n);
                }
                rl.tune_apply = Some(o);
            }
            Err(e) => {
                // restore (below) puts back whatever was journalled before the error
                let m = format!("rtcat tune apply: {e:#}");
                bench_err = Some(m.clone());
                fatal = Some(m);
            }
        }
    }
    // 2. load, 3. bench
    let mut load = None;
    if let (Some(cpus), None) = (&plan.load_cpus, &bench_err) {
        let spec = crate::LoadSpec::reference_mix(
            cpus.clone(),
            Duration::from_secs_f64(plan.duration * 1.5 + 30.0),
        );
        match crate::LoadHandle::spawn(c.exe, &spec) {
            Ok(h) => {
                load = Some(h);
                // let the load reach its steady state before measuring
                std::thread::sleep(Duration::from_millis(300));
            }
            Err(e) => bench_err = Some(format!("load: {e:#}")),
        }
    }
    let mut end = None;
    if bench_err.is_none() && c.stop.count() == 0 {
        let mut cmd = plan.bench_command(c.exe, stage, &dir);
        let log = run_dir
            .create("bench.log", 0o644)
            .with_context(|| format!("{rel}/bench.log: cannot create"));
        match log.and_then(|f| bench::spawn(&mut cmd, f)) {
            Ok(mut child) => match bench::wait(&mut child, plan, c.stop, c.prog, stage, k) {
                Ok(e) => end = Some(e),
                Err(e) => {
                    bench::kill_group(&child, nix::sys::signal::Signal::SIGKILL);
                    let _ = child.wait();
                    bench_err = Some(format!("waiting for rtcat bench: {e:#}"));
                }
            },
            Err(e) => bench_err = Some(format!("{e:#}")),
        }
    }
    if let Some(h) = load {
        match h.stop() {
            Ok(r) => {
                if !r.errors.is_empty() {
                    c.log
                        .note(format!("{rel}: load errors: {}", r.errors.join("; ")));
                }
                rl.load = Some(r);
            }
            Err(e) => c
                .log
                .note(format!("{rel}: load did not stop cleanly: {e:#}")),
        }
    }
    // 4. restore
    if let Some(g) = guard.take() {
        match g.restore() {
            Ok(o) => {
                if o.failed > 0 {
                    fatal = Some(format!(
                        "{} knob(s) could not be restored (still journalled in {}): {}",
                        o.failed,
                        plan.journal().path().display(),
                        o.items
                            .iter()
                            .filter(|i| i.result.starts_with("FAILED"))
                            .map(|i| format!("{}: {}", i.what, i.result))
                            .collect::<Vec<_>>()
                            .join("; ")
                    ));
                }
                rl.tune_restore = Some(o);
            }
            Err(e) => fatal = Some(format!("rtcat tune restore: {e:#}")),
        }
    }
    rl.wall_s = t0.elapsed().as_secs_f64();
    rl.bench_exit = end.as_ref().and_then(|e| e.exit);
    // 5. classify the run: a signal during the measurement interrupts it; one that comes after
    // the bench ended leaves the run complete and stops the ladder after it
    let interrupted = match &end {
        Some(e) => e.signal_seen,
        None => bench_err.is_none(),
    };
    if interrupted {
        rl.status = RunStatus::Interrupted;
        if end.as_ref().is_some_and(|e| e.killed) {
            rl.error = Some("rtcat bench killed by the second signal".into());
        }
    } else if let Some(e) = bench_err {
        rl.error = Some(e);
    } else {
        match end.as_ref().and_then(|e| e.exit) {
            Some(0) => match crate::report::read_bench_dir(&dir) {
                Ok((s, _)) if s.stage.as_deref() == Some(stage.id()) => {
                    output::append_row(c.csv, stage.id(), k, &s)?;
                    rl.status = RunStatus::Ok;
                    c.prog.line(format!(
                        "ladder: {rel}: wake mean {:.3} µs, P99 {:.3} µs, max {:.3} µs, exec max {:.3} µs, missed {}, WKC mismatches {}",
                        s.wake_lateness_ns.mean / 1e3,
                        s.wake_lateness_ns.p99 as f64 / 1e3,
                        s.wake_lateness_ns.max as f64 / 1e3,
                        s.exec_ns.max as f64 / 1e3,
                        s.missed_deadlines,
                        s.wkc.mismatches
                    ));
                }
                Ok((s, _)) => {
                    rl.error = Some(format!(
                        "summary.json records stage {:?}, expected {}",
                        s.stage,
                        stage.id()
                    ))
                }
                Err(e) => rl.error = Some(format!("results unreadable: {e:#}")),
            },
            Some(code) => {
                rl.error = Some(format!(
                    "rtcat bench exited with {code}{} (see {rel}.failed/bench.log)",
                    bench::last_error(&run_dir)
                        .map(|l| format!(": {l}"))
                        .unwrap_or_default()
                ))
            }
            None => rl.error = Some("rtcat bench was killed by a signal".into()),
        }
    }
    // the run's own record next to its results
    let rec = serde_json::json!({
        "stage": stage.id(), "run": k, "status": rl.status, "bench_exit": rl.bench_exit,
        "error": rl.error, "tune_apply": rl.tune_apply, "tune_restore": rl.tune_restore,
        "load": rl.load,
    });
    let _ = run_dir.write_atomic(
        "tune.json",
        format!("{}\n", serde_json::to_string_pretty(&rec)?).as_bytes(),
        0o644,
    );
    if rl.status != RunStatus::Ok {
        let suffix = if rl.status == RunStatus::Interrupted {
            "interrupted"
        } else {
            "failed"
        };
        let moved = format!("{run_name}.{suffix}");
        stage_dir
            .rename(&run_name, &moved)
            .with_context(|| format!("cannot move {rel} to {}/{moved}", stage.id()))?;
        rl.dir = format!("{rel}.{suffix}");
        if rl.status == RunStatus::Failed {
            c.prog.line(format!(
                "ladder: {rel} FAILED: {}",
                rl.error.as_deref().unwrap_or("?")
            ));
        }
    }
    let next = if let Some(f) = fatal {
        Next::Fatal(format!("{rel}: {f}"))
    } else if interrupted || c.stop.count() > 0 {
        Next::Stop
    } else {
        Next::Continue
    };
    Ok((rl, next))
}
