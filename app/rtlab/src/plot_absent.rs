//! Plots in a build without the `plots` feature: every request is refused by name, so a
//! `--plots` never silently writes nothing.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use safefs::Dir;

use crate::report::Source;

/// Why a plot request fails in this build.
pub const ABSENT: &str = "this rtcat was built without plots (cargo feature `plots` of rtcat/rtlab; the default build has it)";

/// Refused: see [`ABSENT`].
pub fn write_plots(_sources: &[Source], _dir: &Path, _size: (u32, u32)) -> Result<Vec<PathBuf>> {
    bail!("{ABSENT}")
}

/// Refused: see [`ABSENT`].
pub fn write_plots_in(_sources: &[Source], _dir: &Dir, _size: (u32, u32)) -> Result<Vec<PathBuf>> {
    bail!("{ABSENT}")
}
