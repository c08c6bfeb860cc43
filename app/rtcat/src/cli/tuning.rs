//! `rtcat doctor` and `rtcat tune` flags, converted into [`rttune::DoctorOptions`] and
//! [`rttune::TuneOptions`].

use super::values::value_enum;
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
