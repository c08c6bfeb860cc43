//! `rtcat doctor` and `rtcat tune`: their flags, converted into [`rttune::DoctorOptions`] and
//! [`rttune::TuneOptions`], and the two commands with the configuration file's `[tune]`.

use crate::cli::values::value_enum;
use crate::config::Config;
use crate::outcome::{Failure, Kind, Outcome};
use clap::Args;
use rttune::{KnobGroup, TuneAction};
use std::path::PathBuf;

value_enum!(ActionArg(TuneAction) {
    TuneAction::Apply => "apply": "Apply the runtime shield (journalled)",
    TuneAction::Restore => "restore": "Put back exactly what apply changed",
    TuneAction::Status => "status": "Show what is applied",
    TuneAction::Plan => "plan": "Show what apply would change, change nothing",
});

value_enum!(GroupArg(KnobGroup) {
    KnobGroup::Shield => "shield": "irqbalance, default IRQ affinity, movable IRQs, NIC IRQs, workqueue mask, tasks, timer_migration",
    KnobGroup::Irqbalance => "irqbalance": "Stop irqbalance",
    KnobGroup::DefaultIrqAffinity => "default-irq-affinity": "/proc/irq/default_smp_affinity off the RT CPU",
    KnobGroup::IrqAffinity => "irq-affinity": "Every movable IRQ off the RT CPU",
    KnobGroup::NicIrqs => "nic-irqs": "The NIC's IRQs to `[tune].nic_irq_cpu`",
    KnobGroup::WorkqueueMask => "workqueue-mask": "Unbound workqueue cpumask off the RT CPU",
    KnobGroup::Tasks => "tasks": "Movable tasks and kthreads off the RT CPU",
    KnobGroup::TimerMigration => "timer-migration": "kernel.timer_migration = 0",
    KnobGroup::Governor => "governor": "cpufreq governor of the RT CPU's policy",
    KnobGroup::CStates => "c-states": "Deep idle states of the RT CPU disabled",
    KnobGroup::Coalesce => "coalesce": "NIC interrupt coalescing",
});

/// `rtcat doctor [--cpu N] [--iface IF] [--config FILE] [--json]`
#[derive(Args, Clone, Debug)]
pub struct DoctorArgs {
    /// RT CPU (default: [cycle].cpu, else the isolated CPUs)
    #[arg(long, value_name = "N")]
    pub cpu: Option<usize>,
    /// EtherCAT NIC (default: [bus].interface)
    #[arg(long, value_name = "IF")]
    pub iface: Option<String>,
    /// rtcat config file ([cycle].cpu, [bus].interface, [tune])
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print the report as JSON (schema rttune.doctor/1)
    #[arg(long)]
    pub json: bool,
    /// Root of the tree to inspect (fake trees in tests)
    #[arg(long, value_name = "DIR", default_value = "/", hide = true)]
    pub root: PathBuf,
}

impl DoctorArgs {
    pub fn options(&self) -> rttune::DoctorOptions {
        rttune::DoctorOptions {
            cpu: self.cpu,
            iface: self.iface.clone(),
            config: self.config.clone(),
            json: self.json,
            root: self.root.clone(),
        }
    }
}

/// `rtcat tune apply|restore|status|plan [--cpu N] [--housekeeping CPUS] [--iface IF] [--config FILE]`
#[derive(Args, Clone, Debug)]
pub struct TuneArgs {
    #[arg(value_enum)]
    pub action: ActionArg,
    /// RT CPU (default: [cycle].cpu)
    #[arg(long, value_name = "N")]
    pub cpu: Option<usize>,
    /// Housekeeping CPUs, e.g. 0-5,7 (default: [tune].housekeeping_cpus, else all but the RT CPU)
    #[arg(long, value_name = "CPUS")]
    pub housekeeping: Option<String>,
    /// EtherCAT NIC (default: [bus].interface)
    #[arg(long, value_name = "IF")]
    pub iface: Option<String>,
    /// rtcat config file
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Knob groups to act on (repeatable; default: all)
    #[arg(long = "group", value_enum, value_name = "GROUP")]
    pub groups: Vec<GroupArg>,
    /// Tune state journal (default: [tune].state_file, else /var/lib/rtcat-tune/tune-state.json)
    #[arg(long, value_name = "FILE")]
    pub state: Option<PathBuf>,
    /// Print the result as JSON
    #[arg(long)]
    pub json: bool,
    /// Root of the tree to tune (fake trees in tests)
    #[arg(long, value_name = "DIR", default_value = "/", hide = true)]
    pub root: PathBuf,
}

impl TuneArgs {
    pub fn options(&self) -> rttune::TuneOptions {
        rttune::TuneOptions {
            action: self.action.0,
            cpu: self.cpu,
            housekeeping: self.housekeeping.clone(),
            iface: self.iface.clone(),
            config: self.config.clone(),
            groups: self.groups.iter().map(|g| g.0).collect(),
            state: self.state.clone(),
            json: self.json,
            root: self.root.clone(),
        }
    }
}

/// The real-time context (`[tune]`, `[cycle]`) of the configuration file, or the defaults.
fn context_for(config: Option<&std::path::Path>) -> Result<rttune::RtContext, Failure> {
    match config {
        None => Ok(rttune::RtContext::default()),
        Some(p) => Config::load(p)
            .map(|c| c.rt_context())
            .map_err(Failure::usage),
    }
}

/// doctor/tune report knob failures in their output; an error out of them says by its kind
/// whether it was bad input (exit 2: an offline CPU, a bad CPU list, an unreadable root, a
/// refused journal) or a runtime failure (exit 1: a journal that cannot be written, stdout).
fn outcome(r: Result<i32, rttune::CommandError>) -> Outcome {
    match r {
        Ok(status) => Failure::from_status(status),
        Err(e) => {
            let kind = if e.exit_code() == 2 {
                Kind::Usage
            } else {
                Kind::Runtime
            };
            Err(Failure::of(kind, e))
        }
    }
}

/// `rtcat doctor`.
pub fn doctor(a: &DoctorArgs) -> Outcome {
    let ctx = context_for(a.config.as_deref())?;
    outcome(rttune::run_doctor(&a.options(), &ctx))
}

/// `rtcat tune`.
pub fn tune(a: &TuneArgs) -> Outcome {
    let ctx = context_for(a.config.as_deref())?;
    outcome(rttune::run_tune(&a.options(), &ctx))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    /// Every knob group has its value, named as in the journal and the JSON output.
    #[test]
    fn group_values_are_the_group_names() {
        let all: Vec<KnobGroup> = GroupArg::value_variants().iter().map(|g| g.0).collect();
        let mut want = vec![KnobGroup::Shield];
        want.extend(KnobGroup::all());
        assert_eq!(all, want);
        for g in GroupArg::value_variants() {
            assert_eq!(g.to_possible_value().unwrap().get_name(), g.0.name());
        }
        assert_eq!(ActionArg::value_variants().len(), 4);
    }
}
