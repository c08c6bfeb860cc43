//! The CoE example's segment (`examples/coe/segment.toml`) with its drive, the last device,
//! answering a write to 0x6085 late (`[device.timing] slow_object`): firmware that acts on a
//! value before it answers. Included with `#[path]` by sdo.rs and control.rs.

use std::path::{Path, PathBuf};

/// The segment file, written into `dir`, whose drive answers a write to 0x6085 after
/// `answer_us`.
pub fn segment(dir: &Path, answer_us: u32) -> PathBuf {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/coe/segment.toml");
    let mut s = std::fs::read_to_string(example).unwrap();
    s.push_str(&format!(
        "\n[device.timing]\nslow_object = 0x6085\nslow_object_us = {answer_us}\n"
    ));
    let path = dir.join("slow.toml");
    std::fs::write(&path, s).unwrap();
    path
}
