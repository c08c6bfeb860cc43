//! `rtcat config check|example|from-bus|from-eni|cpus`: the configuration file validated (and
//! compared with a bus), printed, generated from a bus or an ENI, and the kernel CPU-list parser
//! the CI scripts use.

use super::bus::{emit, json};
use super::sdo::{on_segment, say_emergencies};
use crate::cli::BusArgs;
use crate::outcome::{Failure, Outcome};
use clap::Subcommand;
use rtcat_master::coe::segment::{self, DeviceMapping};
use rtcat_master::sii::Direction;
use std::fmt::Write as _;
use std::path::PathBuf;

#[derive(Subcommand, Debug)]
pub enum ConfigCmd {
    /// Validate a configuration file (exit 2 with the offending key on error); with --sim or
    /// --iface also compare it with the bus (count, identity, order, mapping: exit 2 naming
    /// every difference)
    Check {
        /// The configuration (or --config FILE)
        #[arg(value_name = "FILE", required_unless_present = "config")]
        file: Option<PathBuf>,
        #[command(flatten)]
        bus: BusArgs,
    },
    /// Print the example configuration (every key, commented)
    Example,
    /// Read every subdevice's PDO assignment and mapping (brings the segment to PRE-OP) and
    /// print the [[device]] configuration that reproduces it, commented, ready to edit
    FromBus {
        #[command(flatten)]
        bus: BusArgs,
    },
    /// Turn an ENI (EtherCAT network information, ETG.2100: a whole network as a vendor's
    /// configuration tool exports it) into an rtcat.toml: topology, a [[device]] per
    /// subdevice with its PDO assignment, mapping and startup SDOs. What rtcat does not run is
    /// listed on stderr and as comments
    FromEni {
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// Write the configuration to this file instead of stdout
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Normalise a kernel CPU list (`0-3,5`): its canonical form, count and members (exit 2
    /// naming the bad item). The one parser the CI scripts ask instead of their own.
    Cpus {
        #[arg(value_name = "LIST", allow_hyphen_values = true)]
        list: String,
        /// Print `{"list": "0-3,5", "count": 5, "cpus": [0, 1, 2, 3, 5]}` instead of the list
        #[arg(long, conflicts_with = "members")]
        json: bool,
        /// Print the members on one line (`0 1 2 3 5`), for shell scripts
        #[arg(long)]
        members: bool,
    },
}

fn entry_text(index: u16, sub: u8, bits: u8) -> String {
    format!("0x{index:04X}:{sub:02X}:{bits}")
}

fn toml_str(s: &str) -> String {
    // A TOML basic string: JSON's escaping is a subset of TOML's.
    serde_json::to_string(s).expect("a string serializes")
}

fn hex_list(v: &[u16]) -> String {
    v.iter()
        .map(|i| format!("0x{i:04X}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn writable_note(w: Option<bool>) -> &'static str {
    match w {
        Some(true) => "",
        Some(false) => "read-only in PRE-OP (fixed by the device)",
        None => "writability not known (no SDO information)",
    }
}

/// The `[[device]]` configuration that reproduces `devices`' current mapping, commented, in
/// the format of rtcat.toml. Fixed parts (read-only assignment or mapping objects, devices
/// without CoE) are written as comments: applying them at a bring-up would be refused.
pub fn from_bus_toml(devices: &[DeviceMapping], source: &str) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# rtcat config from-bus: the PDO assignment and mapping read in PRE-OP\n\
         # from {source}.\n\
         # Each [[device]] reproduces what the subdevice holds now; edit it and add it to\n\
         # rtcat.toml (matched by position: add the identity to match the device wherever it\n\
         # sits). Parts the device fixes are comments: writing them would be refused."
    );
    for d in devices {
        let id = &d.identity;
        o.push('\n');
        let label = if d.name.is_empty() { "?" } else { &d.name };
        let _ = writeln!(
            o,
            "# Position {}: {label}: vendor_id = {:#010x}, product_id = {:#010x}, revision = \
             {:#010x}, serial {}{}",
            d.position,
            id.vendor_id,
            id.product_code,
            id.revision,
            id.serial,
            if d.alias != 0 {
                format!(", alias {:#06x}", d.alias)
            } else {
                String::new()
            }
        );
        if !d.coe {
            // The SII's assignment per SM: a [[device]] may state it, the master compares it.
            let assign: Vec<String> = d
                .assignments
                .iter()
                .map(|a| format!("sm{} = [{}]", a.sm, hex_list(&a.pdos)))
                .collect();
            let _ = writeln!(
                o,
                "# No CoE: its process data is fixed by its SII ({} in, {} out); nothing to \
                 configure (uncommented, the master compares this with the SII).\n\
                 # [[device]]\n# position = {}\n# name = {}\n# input_bytes = {}\n\
                 # output_bytes = {}",
                bytes(d.input_bytes),
                bytes(d.output_bytes),
                d.position,
                toml_str(&d.name),
                d.input_bytes,
                d.output_bytes
            );
            if !assign.is_empty() {
                let _ = writeln!(o, "# pdo_assign = {{ {} }}", assign.join(", "));
            }
            continue;
        }
        if !d.sdo_info {
            let _ = writeln!(
                o,
                "# No SDO information: names from the SII, writability not known."
            );
        }
        let _ = writeln!(o, "[[device]]");
        let _ = writeln!(o, "position = {}", d.position);
        let _ = writeln!(o, "name = {}", toml_str(&d.name));
        let _ = writeln!(o, "input_bytes = {}", d.input_bytes);
        let _ = writeln!(o, "output_bytes = {}", d.output_bytes);
        let mut active = Vec::new();
        let mut fixed = Vec::new();
        let mut other_sm = Vec::new();
        for a in &d.assignments {
            let item = format!("sm{} = [{}]", a.sm, hex_list(&a.pdos));
            if !matches!(a.sm, 2 | 3) {
                other_sm.push(item);
            } else if a.writable == Some(false) {
                fixed.push(item);
            } else {
                active.push(item);
            }
        }
        if !other_sm.is_empty() {
            let _ = writeln!(
                o,
                "# Process data on other sync managers than SM2/SM3, which rtcat.toml does not assign: {{ {} }}",
                other_sm.join(", ")
            );
        }
        let unknown = d.assignments.iter().any(|a| a.writable.is_none());
        if !active.is_empty() {
            let _ = writeln!(
                o,
                "# PDO assignment: sm2 = outputs (0x1C12), sm3 = inputs (0x1C13){}",
                if unknown {
                    format!("; {}", writable_note(None))
                } else {
                    String::new()
                }
            );
            let _ = writeln!(o, "pdo_assign = {{ {} }}", active.join(", "));
        }
        if !fixed.is_empty() {
            let _ = writeln!(
                o,
                "# pdo_assign, {}: {{ {} }}",
                writable_note(Some(false)),
                fixed.join(", ")
            );
        }
        for p in &d.pdos {
            let lead = if p.writable == Some(false) { "# " } else { "" };
            o.push('\n');
            let dir = match p.direction {
                Direction::Outputs => "RxPDO (outputs)",
                Direction::Inputs => "TxPDO (inputs)",
            };
            let name = p
                .name
                .as_deref()
                .map(|n| format!(" {n:?}"))
                .unwrap_or_default();
            let note = writable_note(p.writable);
            let _ = writeln!(
                o,
                "# {dir} 0x{:04X}{name}{}",
                p.index,
                if note.is_empty() {
                    String::new()
                } else {
                    format!(": {note}")
                }
            );
            let _ = writeln!(o, "{lead}[[device.pdo_map]]");
            let _ = writeln!(o, "{lead}index = 0x{:04X}", p.index);
            let _ = writeln!(o, "{lead}entries = [");
            for e in &p.entries {
                let t = entry_text(e.index, e.sub, e.bits);
                match (&e.name, e.index) {
                    (_, 0) => {
                        let _ = writeln!(o, "{lead}  {},  # padding", toml_str(&t));
                    }
                    (Some(n), _) => {
                        let _ = writeln!(
                            o,
                            "{lead}  {{ entry = {}, name = {} }},",
                            toml_str(&t),
                            toml_str(n)
                        );
                    }
                    (None, _) => {
                        let _ = writeln!(o, "{lead}  {},", toml_str(&t));
                    }
                }
            }
            let _ = writeln!(o, "{lead}]");
        }
    }
    o
}

fn bytes(n: u32) -> String {
    format!("{n} byte{}", if n == 1 { "" } else { "s" })
}

/// `rtcat config from-bus`.
fn from_bus(bus: BusArgs) -> Outcome {
    let source = if bus.sim {
        match &bus.segment {
            Some(p) => format!("the simulated segment {}", p.display()),
            None => "the simulated reference segment".into(),
        }
    } else {
        match &bus.iface {
            Some(i) => format!("interface {i}"),
            None => "[bus] interface".into(),
        }
    };
    let devices = on_segment(&bus, segment::read_mappings)?;
    for d in &devices {
        say_emergencies(&d.emergencies);
    }
    emit(&if bus.json {
        json(&devices)
    } else {
        from_bus_toml(&devices, &source)
    });
    Ok(())
}

/// Every way `cfg` does not fit the subdevices `bus` read in PRE-OP (before any configuration
/// is written): the count, the identity at each checked position (an identity found elsewhere
/// is reported as the order), `[[device]]` entries nothing matches, and per matched entry what
/// the subdevice cannot take (PDO configuration without CoE, a fixed assignment or mapping
/// configured otherwise) and process-data sizes that the mapping it would run with does not
/// give. Empty when the configuration fits.
pub fn bus_differences(cfg: &crate::config::MasterConfig, bus: &[DeviceMapping]) -> Vec<String> {
    use rtcat_master::devices::{Found, parse_entry};
    // The bus as a bring-up's ethercrab group holds it: the members of groups on a junction's
    // port (by alias) are kept out, wherever they are, and positions count without them
    // (docs/NOTES.md §17.2); `absent_members` gives their entries.
    let main: Vec<DeviceMapping> = (bus.iter())
        .filter(|b| !rtcat_master::hotconnect::on_a_branch(&cfg.group, b.alias))
        .enumerate()
        .map(|(p, b)| DeviceMapping {
            position: u16::try_from(p).unwrap_or(u16::MAX),
            ..b.clone()
        })
        .collect();
    let bus = main.as_slice();
    let mut out = Vec::new();
    let n = bus.len();
    let ident = |b: &DeviceMapping| {
        format!(
            "{} (vendor_id {:#010x} product_id {:#010x})",
            if b.name.is_empty() { "?" } else { &b.name },
            b.identity.vendor_id,
            b.identity.product_code
        )
    };
    if let Some(want) = cfg.segment.subdevices
        && usize::from(want) != n
    {
        out.push(format!(
            "count: segment.subdevices = {want}, the bus has {n} subdevice{}",
            if n == 1 { "" } else { "s" }
        ));
    }
    for (i, e) in cfg.segment.device.iter().enumerate() {
        let fits = |b: &DeviceMapping| {
            e.vendor_id.is_none_or(|v| v == b.identity.vendor_id)
                && e.product_id.is_none_or(|p| p == b.identity.product_code)
        };
        let want = format!(
            "vendor_id {} product_id {}",
            e.vendor_id.map_or("any".into(), |v| format!("{v:#010x}")),
            e.product_id.map_or("any".into(), |v| format!("{v:#010x}"))
        );
        let Some(b) = bus.get(usize::from(e.position)) else {
            out.push(format!(
                "count: segment.device[{i}] expects {want} at position {}, the bus has {n} subdevice{}",
                e.position,
                if n == 1 { "" } else { "s" }
            ));
            continue;
        };
        if fits(b) {
            continue;
        }
        let elsewhere: Vec<String> = bus
            .iter()
            .filter(|x| fits(x))
            .map(|x| x.position.to_string())
            .collect();
        if elsewhere.is_empty() {
            out.push(format!(
                "identity: segment.device[{i}] expects {want} at position {}, the bus has {} there",
                e.position,
                ident(b)
            ));
        } else {
            out.push(format!(
                "order: segment.device[{i}] expects {want} at position {}, the bus has it at position {} and {} at {}",
                e.position,
                elsewhere.join(", "),
                ident(b),
                e.position
            ));
        }
    }
    // the subdevices as `[[device]]` and `[[group]]` select them
    let found: Vec<Found> = bus
        .iter()
        .map(|b| Found {
            position: b.position,
            alias: b.alias,
            identity: (
                b.identity.vendor_id,
                b.identity.product_code,
                b.identity.revision,
            ),
        })
        .collect();
    // Members of optional groups not on the bus: their `[[device]]` entries give their mapping.
    let absent = rtcat_master::hotconnect::absent_members(&cfg.group, &cfg.device, &found);
    for (i, d) in cfg.device.iter().enumerate() {
        let hits: Vec<&DeviceMapping> = bus
            .iter()
            .zip(&found)
            .filter(|(_, f)| d.matches(f))
            .map(|(b, _)| b)
            .collect();
        if hits.is_empty() && !absent.iter().any(|f| d.matches(f)) {
            out.push(format!(
                "identity: device[{i}] ({}): no subdevice on the bus matches",
                d.matcher()
            ));
        }
        for b in hits {
            let who = format!("device[{i}] at position {} {}", b.position, ident(b));
            // Without CoE an assignment of SM0/SM1 states the SII's mapping (the master compares
            // it, and a member absent at bring-up takes its layout from it); SM2/SM3 and startup
            // SDOs would have to be written.
            let writes = d.pdo_assign.as_ref().is_some_and(|a| !a.names_sm01())
                || d.pdo_assign.is_none() && !d.pdo_map.is_empty();
            if !b.coe && (writes || !d.sdo.is_empty()) {
                out.push(format!(
                    "mapping: {who}: has no CoE mailbox; its pdo_assign, pdo_map and sdo cannot be written"
                ));
                continue;
            }
            let entries = |v: &[(u16, u8, u8)]| {
                v.iter()
                    .map(|(i, s, b)| format!("{i:#06x}:{s:02x}:{b}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            for p in &d.pdo_map {
                let want: Vec<(u16, u8, u8)> = p
                    .entries
                    .iter()
                    .map(|e| parse_entry(e.text()).unwrap_or((0, 0, 0)))
                    .collect();
                if let Some(q) = b.pdos.iter().find(|q| q.index == p.index) {
                    let got: Vec<(u16, u8, u8)> =
                        q.entries.iter().map(|e| (e.index, e.sub, e.bits)).collect();
                    if got != want && q.writable == Some(false) {
                        out.push(format!(
                            "mapping: {who}: {:#06x} is fixed at [{}], configured [{}]",
                            p.index,
                            entries(&got),
                            entries(&want)
                        ));
                    }
                }
            }
            let assign = d.pdo_assign.as_ref();
            for (sm, dir, list, key, want_bytes) in [
                (
                    2u8,
                    Direction::Outputs,
                    assign.and_then(|a| a.sm2.as_ref()),
                    "output_bytes",
                    d.output_bytes,
                ),
                (
                    3,
                    Direction::Inputs,
                    assign.and_then(|a| a.sm3.as_ref()),
                    "input_bytes",
                    d.input_bytes,
                ),
            ] {
                let on_bus = b.assignments.iter().find(|a| a.sm == sm);
                if let (Some(want), Some(a)) = (list, on_bus)
                    && &a.pdos != want
                    && a.writable == Some(false)
                {
                    out.push(format!(
                        "mapping: {who}: the sm{sm} assignment is fixed at [{}], configured [{}]",
                        hex_list(&a.pdos),
                        hex_list(want)
                    ));
                }
                // The size it would run with: the configured (else the current) assignment,
                // each PDO's configured (else current) mapping; unknown when a PDO assigned by
                // the configuration is not assigned now (its mapping is not read).
                let Some(want_bytes) = want_bytes else {
                    continue;
                };
                let pdos: Vec<u16> = match (list, on_bus) {
                    (Some(l), _) => l.clone(),
                    (None, Some(a)) => a.pdos.clone(),
                    (None, None) => b
                        .pdos
                        .iter()
                        .filter(|q| q.direction == dir)
                        .map(|q| q.index)
                        .collect(),
                };
                let mut bits = Some(0u32);
                for pdo in &pdos {
                    let one = match d.pdo_map.iter().find(|m| m.index == *pdo) {
                        Some(m) => Some(
                            m.entries
                                .iter()
                                .map(|e| parse_entry(e.text()).map_or(0, |x| u32::from(x.2)))
                                .sum::<u32>(),
                        ),
                        None => b
                            .pdos
                            .iter()
                            .find(|q| q.index == *pdo)
                            .map(|q| q.entries.iter().map(|e| u32::from(e.bits)).sum()),
                    };
                    bits = bits.zip(one).map(|(a, b)| a + b);
                }
                if let Some(bits) = bits
                    && bits.div_ceil(8) != want_bytes
                {
                    out.push(format!(
                        "mapping: {who}: {key} = {want_bytes}, the PDOs it would run with ([{}]) map {bits} bits ({} bytes)",
                        hex_list(&pdos),
                        bits.div_ceil(8)
                    ));
                }
            }
        }
    }
    // [[group]]: members on the bus, optional ones at the end of the line.
    if let Err(why) = rtcat_master::hotconnect::check_line(&cfg.group, &cfg.device, &found) {
        out.push(format!("group: {why}"));
    }
    out
}

/// `rtcat config …`.
pub fn run(c: ConfigCmd) -> Outcome {
    match c {
        ConfigCmd::Check { file, bus } => {
            match (file.or_else(|| bus.config.clone()), &bus.config) {
                (Some(f), Some(c)) if &f != c => Err(Failure::Usage(format!(
                    "config check: two files given ({} and --config {}): give one",
                    f.display(),
                    c.display()
                ))),
                (Some(f), _) => check(&f, bus),
                // clap requires one of the two.
                (None, _) => Err(Failure::usage("config check: no file given")),
            }
        }
        ConfigCmd::FromBus { bus } => from_bus(bus),
        ConfigCmd::FromEni { file, out } => from_eni(&file, out.as_deref()),
        ConfigCmd::Example => {
            emit(crate::config::EXAMPLE);
            Ok(())
        }
        ConfigCmd::Cpus {
            list,
            json,
            members,
        } => cpus(&list, json, members),
    }
}

/// `rtcat config cpus LIST`: the canonical form, as JSON or as members.
fn cpus(list: &str, json: bool, members: bool) -> Outcome {
    let cpus = rtlab::cpus::parse_cpu_list(list)
        .map_err(|e| Failure::Usage(format!("CPU list {list:?}: {e}")))?;
    let canon = rtlab::cpus::format_cpu_list(&cpus);
    if json {
        let v = serde_json::json!({"list": canon, "count": cpus.len(), "cpus": cpus});
        emit(&format!("{v}\n"));
    } else if members {
        let m: Vec<String> = cpus.iter().map(|c| c.to_string()).collect();
        emit(&format!("{}\n", m.join(" ")));
    } else {
        emit(&format!("{canon}\n"));
    }
    Ok(())
}

/// `rtcat config check FILE`, and with `--sim`/`--iface` the comparison with the bus
/// ([`bus_differences`]): exit 2 naming every difference, 1 when the bus fails.
fn check(file: &std::path::Path, mut bus: BusArgs) -> Outcome {
    let cfg = crate::config::Config::load(file).map_err(Failure::usage)?;
    emit(&format!("{}: OK\n", file.display()));
    for g in &cfg.master.group {
        emit(&format!("{}\n", g.describe()));
    }
    // --control is refused by `open` below: the check reads the bus itself.
    if !bus.sim && bus.iface.is_none() && bus.control.is_none() {
        // Checked offline (the file may be for another machine): a note, not an error.
        if let Err(why) =
            rttune::netif::check_exists(&rttune::SysRoot::live(), &cfg.master.bus.interface)
        {
            crate::say!("rtcat: note: bus.interface: {why}");
        }
        return Ok(());
    }
    bus.config = Some(file.to_path_buf());
    let found = on_segment(&bus, segment::read_mappings)?;
    let diffs = bus_differences(&cfg.master, &found);
    if diffs.is_empty() {
        emit(&format!(
            "bus: {} subdevices fit the configuration (count, identity, order, mapping)\n",
            found.len()
        ));
        return Ok(());
    }
    for d in &diffs {
        crate::say!("rtcat: {d}");
    }
    Err(Failure::Usage(format!(
        "{}: {} difference{} with the bus",
        file.display(),
        diffs.len(),
        if diffs.len() == 1 { "" } else { "s" }
    )))
}

/// `rtcat config from-eni FILE [--out FILE]`: the ENI read ([`rtcat_esi::read_eni`]), turned
/// into a configuration, checked by the master's own parser, written; what is not run goes to
/// stderr as notes (and is in the file as comments). Bad input exits 2, a failed write 1.
fn from_eni(file: &std::path::Path, out: Option<&std::path::Path>) -> Outcome {
    let eni = rtcat_esi::read_eni(file).map_err(|e| {
        if e.is_input() {
            Failure::Usage(e.to_string())
        } else {
            Failure::Runtime(e.to_string())
        }
    })?;
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| file.display().to_string());
    let made = eni
        .to_config(&name)
        .map_err(|e| Failure::Usage(e.to_string()))?;
    // rtcat.toml is read with a size bound: a file it would refuse is not written.
    let max = crate::config::MAX_CONFIG_BYTES;
    if made.toml.len() as u64 > max {
        return Err(Failure::Usage(format!(
            "the configuration made from {name} ({} subdevices) is {} bytes, more than \
                 rtcat reads from a configuration file ({max})",
            eni.slaves.len(),
            made.toml.len()
        )));
    }
    // The generated text must be a configuration the master accepts; if it is not, the ENI
    // holds something this import does not bound (the master's message names the key).
    crate::config::Config::parse(&made.toml, &format!("configuration made from {name}"))
        .map_err(|e| Failure::Usage(format!("{e} (the ENI's values do not fit rtcat's limits)")))?;
    for n in &made.notes {
        crate::say!("rtcat: note: {name}: not run: {n}");
    }
    match out {
        Some(p) => std::fs::write(p, &made.toml)
            .map_err(|e| Failure::Runtime(format!("{}: {e}", p.display())))?,
        None => emit(&made.toml),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MasterConfig;
    use rtcat_master::layout::Identity;

    fn device(position: u16, alias: u16, product_code: u32) -> DeviceMapping {
        DeviceMapping {
            position,
            name: format!("D{product_code}"),
            alias,
            identity: Identity {
                vendor_id: 2,
                product_code,
                revision: 1,
                serial: 0,
            },
            coe: false,
            sdo_info: false,
            assignments: Vec::new(),
            pdos: Vec::new(),
            input_bytes: 0,
            output_bytes: 0,
            emergencies: Vec::new(),
        }
    }

    /// A junction (position 0) with a two-device group on its port 3 and two terminals after
    /// it: the members are kept out of the positions the configuration counts, as at a
    /// bring-up, so the terminals are at positions 1 and 2 whether the group is there or not.
    #[test]
    fn members_of_a_group_on_a_junction_s_port_do_not_count_in_positions() {
        let with_group = [
            device(0, 0, 1),
            device(1, 0x10, 7),
            device(2, 0x11, 7),
            device(3, 0, 2),
            device(4, 0, 3),
        ];
        let text = |behind: &str| {
            format!(
                "[health]\nrecovery = \"subdevice\"\n\
                 [segment]\nsubdevices = 3\n\
                 [[segment.device]]\nposition = 1\nvendor_id = 2\nproduct_id = 2\n\
                 [[group]]\nname = \"tool\"\noptional = true\n{behind}\
                 members = [{{ alias = 0x10 }}, {{ alias = 0x11 }}]\n\
                 [[device]]\nalias = 0x10\npdo_assign = {{ sm0 = [0x1a00] }}\n\
                 [[device.pdo_map]]\nindex = 0x1a00\nentries = [\"0x6000:01:8\"]\n\
                 [[device]]\nalias = 0x11\npdo_assign = {{ sm0 = [0x1a00] }}\n\
                 [[device.pdo_map]]\nindex = 0x1a00\nentries = [\"0x6000:01:8\"]\n"
            )
        };
        let cfg = MasterConfig::parse(&text("behind = { position = 0, port = 3 }\n"), "t.toml")
            .expect("config");
        assert_eq!(bus_differences(&cfg, &with_group), Vec::<String>::new());
        // The group unplugged: the same.
        let without = [device(0, 0, 1), device(1, 0, 2), device(2, 0, 3)];
        assert_eq!(bus_differences(&cfg, &without), Vec::<String>::new());
        // Not placed: its members count, the terminals are elsewhere, optional devices before
        // mandatory ones.
        let cfg = MasterConfig::parse(&text(""), "t.toml").expect("config");
        let diffs = bus_differences(&cfg, &with_group).join("\n");
        for want in [
            "count: segment.subdevices = 3, the bus has 5 subdevices",
            "order: segment.device[0] expects vendor_id 0x00000002 product_id 0x00000002 at \
             position 1, the bus has it at position 3",
            "group: group \"tool\": position 1 is optional but position 3 behind it is not",
        ] {
            assert!(diffs.contains(want), "{diffs}\n(want {want:?})");
        }
    }
}
