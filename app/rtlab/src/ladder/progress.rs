//! The progress bar on a terminal (and the ladder's lines above it), with the time left from the
//! measured per-run overhead.

use std::io::IsTerminal;

use super::StageId;
use crate::outfile::say;

pub(super) struct Progress {
    bar: Option<indicatif::ProgressBar>,
    total: u32,
    done: u32,
    overheads: Vec<f64>,
    duration: f64,
}

fn fmt_secs(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    if s >= 3600 {
        format!("{}h{:02}m{:02}s", s / 3600, (s / 60) % 60, s % 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

impl Progress {
    pub fn new(total: u32, duration: f64) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = indicatif::ProgressBar::with_draw_target(
                Some(u64::from(total)),
                indicatif::ProgressDrawTarget::stderr(),
            );
            if let Ok(st) = indicatif::ProgressStyle::with_template(
                "ladder [{bar:30.cyan/blue}] {pos}/{len} runs  {msg}",
            ) {
                b.set_style(st.progress_chars("=> "));
            }
            b
        });
        Progress {
            bar,
            total,
            done: 0,
            overheads: Vec::new(),
            duration,
        }
    }

    /// Seconds left: the rest of this run plus every run not started, each with the measured
    /// per-run overhead (tune, load, start-up; 1 s until one run has finished).
    fn left(&self, elapsed_in_run: f64) -> f64 {
        let over = if self.overheads.is_empty() {
            1.0
        } else {
            self.overheads.iter().sum::<f64>() / self.overheads.len() as f64
        };
        let after = f64::from(self.total.saturating_sub(self.done + 1));
        (self.duration + over - elapsed_in_run).max(0.0) + after * (self.duration + over)
    }

    pub fn tick(&self, stage: StageId, run: u32, runs: u32, elapsed: f64) {
        if let Some(b) = &self.bar {
            b.set_message(format!(
                "{} run {run}/{runs}  {:.0}/{:.0} s  ~{} left",
                stage.id(),
                elapsed.min(self.duration),
                self.duration,
                fmt_secs(self.left(elapsed))
            ));
        }
    }

    pub fn line(&self, s: String) {
        match &self.bar {
            Some(b) => b.println(s),
            None => say!("{s}"),
        }
    }

    pub fn finish_run(&mut self, wall: f64) {
        self.overheads.push((wall - self.duration).max(0.0));
        self.done += 1;
        if let Some(b) = &self.bar {
            b.set_position(u64::from(self.done));
        }
    }

    pub fn clear(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_left_counts_remaining_runs() {
        let mut p = Progress {
            bar: None,
            total: 4,
            done: 0,
            overheads: vec![],
            duration: 10.0,
        };
        assert_eq!(p.left(0.0), 44.0);
        p.finish_run(12.0);
        assert_eq!(p.left(5.0), 7.0 + 2.0 * 12.0);
        assert_eq!(fmt_secs(3725.0), "1h02m05s");
        assert_eq!(fmt_secs(65.0), "1m05s");
    }
}
