//! The hot-connect line of the tests: the I/O segment of `examples/segment-io.toml` (three
//! mandatory devices) followed by the same three devices as the optional group "tool".

use ecsim::SegmentSpec;
use rtcat_master::Config;

/// Devices on the line: 0..3 mandatory, 3..6 the optional group.
pub const N: usize = 6;
/// The group's first position.
pub const G0: usize = 3;

/// `examples/segment-io.toml` split: the text before its devices, and each `[[device]]` block
/// (without the header).
fn segment_io() -> (String, Vec<String>) {
    let text = std::fs::read_to_string(super::line::example("segment-io.toml"))
        .expect("examples/segment-io.toml");
    let at = text.find("[[device]]").expect("devices");
    let blocks: Vec<String> = text[at..]
        .split("[[device]]")
        .filter(|b| !b.trim().is_empty())
        .map(str::to_string)
        .collect();
    assert_eq!(blocks.len(), 3, "segment-io.toml's devices");
    (text[..at].to_string(), blocks)
}

/// Device `k` of segment-io as member `k` of the group: serial 11 + k, alias 0x10 + k, and
/// `extra` keys.
fn member(k: usize, block: &str, extra: &str) -> String {
    let n = k + 1;
    let keys = format!("serial = {}\nalias = {}\n{extra}", 10 + n, 0x0f + n);
    format!(
        "[[device]]{}",
        block.replacen(&format!("serial = {n}\n"), &keys, 1)
    )
}

/// The I/O segment twice: the second copy (serials 11..13, aliases 0x10..0x12) is the group.
pub fn line() -> SegmentSpec {
    let (head, blocks) = segment_io();
    let mut t = head;
    for b in &blocks {
        t += &format!("[[device]]{b}");
    }
    for (k, b) in blocks.iter().enumerate() {
        t += &member(k, b, "");
    }
    SegmentSpec::from_toml(&t).expect("the line")
}

/// The same group behind a junction: a 4-port junction (position 0, an input terminal with four
/// ports) with the input terminal on its port 3 (1), the output terminal on its port 1 (2), and
/// the group on its port 2 (3..6), the port a frame leaves through last, so the group's
/// positions are the last ones and its cable pulled at the junction moves no other device's
/// position.
pub fn junction_line() -> SegmentSpec {
    let (head, blocks) = segment_io();
    // The junction: the input terminal with four ports (the simulator's devices have data).
    let mut t = format!(
        "{head}[[device]]{}",
        blocks[0].replacen("serial = 1\n", "serial = 100\nports = 4\n", 1)
    );
    t += &format!("[[device]]{}", blocks[0]);
    t += &format!(
        "[[device]]{}",
        blocks[1].replacen("serial = 2\n", "serial = 2\nupstream = [0, 1]\n", 1)
    );
    for (k, b) in blocks.iter().enumerate() {
        t += &member(k, b, if k == 0 { "upstream = [0, 2]\n" } else { "" });
    }
    SegmentSpec::from_toml(&t).expect("the junction line")
}

/// The group on a junction's first branch: the 4-port junction (position 0) with the group on
/// its port 3 (1..4 when plugged in), the input terminal on its port 1 and the output terminal
/// on its port 2 after it. Plugged in, the group moves the two terminals from positions 1 and 2
/// to 4 and 5: `Cable { position: 1 }` is the group's cable at the junction.
pub fn junction_first_branch() -> SegmentSpec {
    let (head, blocks) = segment_io();
    let mut t = format!(
        "{head}[[device]]{}",
        blocks[0].replacen("serial = 1\n", "serial = 100\nports = 4\n", 1)
    );
    for (k, b) in blocks.iter().enumerate() {
        t += &member(k, b, if k == 0 { "upstream = [0, 3]\n" } else { "" });
    }
    t += &format!(
        "[[device]]{}",
        blocks[0].replacen("serial = 1\n", "serial = 1\nupstream = [0, 1]\n", 1)
    );
    t += &format!(
        "[[device]]{}",
        blocks[1].replacen("serial = 2\n", "serial = 2\nupstream = [0, 2]\n", 1)
    );
    SegmentSpec::from_toml(&t).expect("the junction's first branch")
}

/// Set: [`config`] gives `[bus] bring_up = "ethercrab"` instead of the default, rtcat's own (a
/// test sets it under its lock with [`EthercrabBringUp`], which clears it again).
static ETHERCRAB_BRING_UP: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// While it lives, [`config`] brings the segment up with ethercrab's bring-up.
pub struct EthercrabBringUp;

impl EthercrabBringUp {
    pub fn set() -> EthercrabBringUp {
        ETHERCRAB_BRING_UP.store(true, std::sync::atomic::Ordering::Relaxed);
        EthercrabBringUp
    }
}

impl Drop for EthercrabBringUp {
    fn drop(&mut self) {
        ETHERCRAB_BRING_UP.store(false, std::sync::atomic::Ordering::Relaxed);
    }
}

pub fn config(optional: bool) -> Config {
    let text = format!(
        "[cycle]\nperiod_us = 1000\n\
         [health]\nrecovery = \"subdevice\"\nrecovery_backoff_ms = 50\n\
         bad_cycles_before_recovery = 1\nsubdevice_attempts = 2\n\
         [[group]]\nname = \"tool\"\noptional = {optional}\n\
         members = [{{ alias = 0x10 }}, {{ alias = 0x11 }}, {{ position = 5 }}]\n"
    );
    let mut cfg = Config::parse(&text, "hotconnect test").expect("config");
    super::patient(&mut cfg);
    if ETHERCRAB_BRING_UP.load(std::sync::atomic::Ordering::Relaxed) {
        cfg.bus.bring_up = rtcat_master::config::BringUp::Ethercrab;
    }
    cfg
}

/// The `[[device]]` entries that give the group's members their mapping while they are absent:
/// the SII's PDOs of the simulated terminals (without a mailbox: SM0 first, outputs before
/// inputs), named as `examples/segment-io.toml` names them.
pub fn group_devices() -> String {
    let mut t = String::from("[[device]]\nalias = 0x10\npdo_assign = { sm0 = [");
    let list = |base: u16| {
        (0..8)
            .map(|k| format!("{:#06x}", base + k))
            .collect::<Vec<_>>()
            .join(", ")
    };
    t += &format!("{}] }}\n", list(0x1a00));
    for k in 0..8u16 {
        t += &format!(
            "[[device.pdo_map]]\nindex = {:#06x}\nentries = [\"{:#06x}:01:1\"]\n",
            0x1a00 + k,
            0x6000 + 0x10 * k
        );
    }
    t += &format!(
        "[[device]]\nalias = 0x11\npdo_assign = {{ sm0 = [{}] }}\n",
        list(0x1600)
    );
    for k in 0..8u16 {
        t += &format!(
            "[[device.pdo_map]]\nindex = {:#06x}\nentries = [\"{:#06x}:01:1\"]\n",
            0x1600 + k,
            0x7000 + 0x10 * k
        );
    }
    t += "[[device]]\nposition = 5\npdo_assign = { sm0 = [0x1600, 0x1601], sm1 = [0x1a00, 0x1a01] }\n";
    for (index, obj) in [(0x1600, 0x7000), (0x1601, 0x7010)] {
        t += &format!(
            "[[device.pdo_map]]\nindex = {index:#06x}\nentries = [{{ entry = \"{obj:#06x}:01:16\", \
             name = \"Value\" }}]\n"
        );
    }
    for (index, obj) in [(0x1a00, 0x6000), (0x1a01, 0x6010)] {
        t += &format!(
            "[[device.pdo_map]]\nindex = {index:#06x}\nentries = [\"{obj:#06x}:01:1\", \
             \"{obj:#06x}:02:1\", \"0x0000:00:4\", \"{obj:#06x}:07:1\", \"0x0000:00:7\", \
             \"{obj:#06x}:0f:1\", \"{obj:#06x}:10:1\", \"{obj:#06x}:11:16\"]\n"
        );
    }
    t
}

/// A longer group: the I/O segment followed by `copies` copies of its three devices, all one
/// optional group "tool" (serials 11.., aliases 0x10..), with the configuration naming every
/// member by its alias and the `[[device]]` entries giving each its mapping (those of
/// [`group_devices`], one set per copy).
pub fn long_group(copies: usize) -> (SegmentSpec, Config) {
    let (head, blocks) = segment_io();
    let mut t = head;
    for b in &blocks {
        t += &format!("[[device]]{b}");
    }
    for k in 0..3 * copies {
        let j = k % 3;
        let keys = format!("serial = {}\nalias = {}\n", 11 + k, 0x10 + k);
        t += &format!(
            "[[device]]{}",
            blocks[j].replacen(&format!("serial = {}\n", j + 1), &keys, 1)
        );
    }
    let seg = SegmentSpec::from_toml(&t).expect("the long group's line");
    let members: Vec<String> = (0..3 * copies)
        .map(|k| format!("{{ alias = {:#x} }}", 0x10 + k))
        .collect();
    let text = format!(
        "[cycle]\nperiod_us = 1000\n\
         [health]\nrecovery = \"subdevice\"\nrecovery_backoff_ms = 50\n\
         bad_cycles_before_recovery = 1\nsubdevice_attempts = 2\n\
         [[group]]\nname = \"tool\"\noptional = true\nmembers = [{}]\n",
        members.join(", ")
    );
    let mut cfg = Config::parse(&text, "hotconnect test").expect("config");
    super::patient(&mut cfg);
    let one = group_devices();
    let mut devices = String::new();
    for c in 0..copies {
        devices += &one
            .replace(
                "[[device]]\nalias = 0x10\n",
                &format!("[[device]]\nalias = {:#x}\n", 0x10 + 3 * c),
            )
            .replace(
                "[[device]]\nalias = 0x11\n",
                &format!("[[device]]\nalias = {:#x}\n", 0x11 + 3 * c),
            )
            .replace(
                "[[device]]\nposition = 5\n",
                &format!("[[device]]\nalias = {:#x}\n", 0x12 + 3 * c),
            );
    }
    cfg.device = Config::parse(&devices, "hotconnect test")
        .expect("devices")
        .device;
    (seg, cfg)
}

/// The group of [`junction_first_branch`] configured where it is plugged in: behind port 3 of
/// the junction (position 0), its members named by alias (0x10..0x12) with their mapping in
/// `[[device]]` entries, the terminals on the junction's ports 1 and 2 mandatory (layout
/// positions 1 and 2, on the wire 4 and 5 while the group is there).
pub fn branch_config() -> Config {
    let text = "[cycle]\nperiod_us = 1000\n\
         [health]\nrecovery = \"subdevice\"\nrecovery_backoff_ms = 50\n\
         bad_cycles_before_recovery = 1\nsubdevice_attempts = 2\n\
         [[group]]\nname = \"tool\"\noptional = true\nbehind = { position = 0, port = 3 }\n\
         members = [{ alias = 0x10 }, { alias = 0x11 }, { alias = 0x12 }]\n";
    let mut cfg = Config::parse(text, "branch test").expect("config");
    super::patient(&mut cfg);
    let devices =
        group_devices().replace("[[device]]\nposition = 5\n", "[[device]]\nalias = 0x12\n");
    cfg.device = Config::parse(&devices, "branch test")
        .expect("devices")
        .device;
    cfg
}

/// The layout entries (name, bit offset, bits) of `positions`: what a bring-up gave them, to
/// compare the bring-ups of a run.
pub fn entries(
    l: &rtcat_master::Layout,
    positions: std::ops::Range<usize>,
) -> Vec<(String, u32, u8)> {
    positions
        .flat_map(|p| l.entries_of(p as u16))
        .map(|e| (e.name.clone(), e.bit_offset, e.bits))
        .collect()
}
