//! rtlab: the `rtcat load` load generator, the `rtcat report` tables and plots, and the canonical
//! result types (`summary`) shared by every rtcat command that writes or reads results.

pub mod summary;
