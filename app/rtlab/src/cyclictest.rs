//! Import of cyclictest histograms (`cyclictest -h N` output on stdout, or `--histfile FILE`).
//!
//! Format (one column per measurement thread, latencies in µs, bucket `i` = latencies in
//! `[i, i+1)` µs):
//! ```text
//! # Histogram
//! 000000 000000 000000
//! 000001 000012 000003
//! ...
//! # Total: 000001500 000001500
//! # Min Latencies: 00016 00015
//! # Avg Latencies: 00068 00048
//! # Max Latencies: 00140 00160
//! # Histogram Overflows: 00000 00000
//! # Histogram Overflow at cycle number:
//! # Thread 0:
//! ```
//! `# Total` counts the samples inside the histogram; overflows are the samples above its range.
//! Other `#` lines and cyclictest's status lines (`T: 0 (...)`, `policy: ...`) are ignored.

use std::path::Path;

use anyhow::{Result, anyhow, bail};

use rtcat_results::HDR_HIGHEST_NS;

/// Largest cyclictest file read: a `-h 1000000` histogram (cyclictest's HIST_MAX) of one thread
/// is 14 MB; a `-h 100000` one of 16 threads 12 MB.
pub const FILE_LIMIT: u64 = 16 << 20;
/// Most threads (count columns). cyclictest runs one measurement thread per CPU (`-S`, `-t`);
/// 1024 is far above any board rtcat targets (the RK3588 has 8 CPUs) and bounds what a report
/// holds: every column becomes a 1 ns .. 60 s histogram of 216 KiB, so at most 216 MiB.
pub const MAX_THREADS: usize = 1024;
/// Most histogram buckets (rows): cyclictest's HIST_MAX, the largest `-h` it accepts.
pub const MAX_BUCKETS: usize = 1_000_000;
/// Largest latency (min/avg/max) accepted, in µs: the 60 s range of rtcat's histograms, into
/// which the report converts every thread (µs × 1000 = ns then fits with room to spare).
pub const MAX_LATENCY_US: u64 = HDR_HIGHEST_NS / 1000;

/// One measurement thread of a cyclictest histogram.
#[derive(Debug, Clone, PartialEq)]
pub struct CtThread {
    /// `counts[i]`: samples with latency in `[i, i+1)` µs.
    pub counts: Vec<u64>,
    /// Samples inside the histogram (`# Total`).
    pub total: u64,
    /// Samples above the histogram range (`# Histogram Overflows`).
    pub overflows: u64,
    pub min_us: u64,
    pub avg_us: u64,
    pub max_us: u64,
}

impl CtThread {
    /// All samples (inside the histogram and above it). [`parse`] checks that the sum fits.
    pub fn samples(&self) -> u64 {
        self.total.saturating_add(self.overflows)
    }

    /// Latency (µs, lower bound of its bucket) at quantile `q`: the smallest bucket whose cumulative
    /// count reaches `ceil(q * samples)`. Returns `(value, exact)`; when the rank lies among the
    /// overflows the value is the reported maximum (an upper bound) and `exact` is false.
    pub fn quantile_us(&self, q: f64) -> (u64, bool) {
        let n = self.samples();
        if n == 0 {
            return (0, true);
        }
        // the epsilon keeps 0.99 * 1500 at rank 1485 despite binary floating point
        let rank = ((q * n as f64 - 1e-9).ceil() as u64).clamp(1, n);
        let mut cum: u64 = 0;
        for (i, c) in self.counts.iter().enumerate() {
            cum = cum.saturating_add(*c);
            if cum >= rank {
                return (i as u64, true);
            }
        }
        (self.max_us, false)
    }
}

/// A parsed cyclictest histogram file.
#[derive(Debug, Clone, PartialEq)]
pub struct CtHistogram {
    pub threads: Vec<CtThread>,
}

/// The numbers of a line; at most `max` of them are collected (the error says how many there
/// were), and each must fit in 64 bits. `what` names the line, columns count from 1.
fn numbers(path: &Path, lno: usize, what: &str, s: &str, max: usize) -> Result<Vec<u64>> {
    let mut v = Vec::new();
    for (k, t) in s.split_whitespace().enumerate() {
        if k == max {
            let n = s.split_whitespace().count();
            bail!(
                "{}: line {lno}: {what}: {n} numbers, at most {max}",
                path.display()
            );
        }
        let x = t.parse::<u64>().map_err(|_| {
            let why = if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
                "does not fit in 64 bits"
            } else {
                "is not a number"
            };
            anyhow!(
                "{}: line {lno}: {what}: \"{t}\" (column {}) {why}",
                path.display(),
                k + 1
            )
        })?;
        v.push(x);
    }
    Ok(v)
}

/// Parses a cyclictest histogram; errors name the file and the line (and the column of a value).
pub fn parse(path: &Path, text: &str) -> Result<CtHistogram> {
    let p = path.display();
    // counts[t][b]: column t of bucket row b, filled row by row
    let mut counts: Vec<Vec<u64>> = Vec::new();
    let mut nrows: usize = 0;
    let mut last_bucket: Option<u64> = None;
    let (mut total, mut min, mut avg, mut max, mut ovf) = (None, None, None, None, None);
    let mut seen_header = false;
    // a summary line has one value per thread; before the rows are known, at most MAX_THREADS
    let per_line = |counts: &Vec<Vec<u64>>| {
        if counts.is_empty() {
            MAX_THREADS
        } else {
            counts.len()
        }
    };
    for (i, raw) in text.lines().enumerate() {
        let lno = i + 1;
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(c) = line.strip_prefix('#') {
            let c = c.trim();
            let field = |name: &str| c.strip_prefix(name).map(str::trim);
            let n = per_line(&counts);
            if c == "Histogram" {
                seen_header = true;
            } else if let Some(v) = field("Total:") {
                total = Some((lno, numbers(path, lno, "# Total", v, n)?));
            } else if let Some(v) = field("Min Latencies:") {
                min = Some((lno, numbers(path, lno, "# Min Latencies", v, n)?));
            } else if let Some(v) = field("Avg Latencies:") {
                avg = Some((lno, numbers(path, lno, "# Avg Latencies", v, n)?));
            } else if let Some(v) = field("Max Latencies:") {
                max = Some((lno, numbers(path, lno, "# Max Latencies", v, n)?));
            } else if let Some(v) = field("Histogram Overflows:") {
                ovf = Some((lno, numbers(path, lno, "# Histogram Overflows", v, n)?));
            }
            continue;
        }
        if line.starts_with("T:")
            || line.starts_with("policy:")
            || !line.starts_with(|c: char| c.is_ascii_digit())
        {
            continue;
        }
        let ncols = line.split_whitespace().count().saturating_sub(1);
        if ncols == 0 {
            bail!("{p}: line {lno}: histogram row has no count column");
        }
        if ncols > MAX_THREADS {
            bail!(
                "{p}: line {lno}: {ncols} count columns, at most {MAX_THREADS} (one per measurement thread)"
            );
        }
        if !counts.is_empty() && ncols != counts.len() {
            bail!(
                "{p}: line {lno}: {ncols} count columns, earlier rows have {}",
                counts.len()
            );
        }
        if nrows == MAX_BUCKETS {
            bail!(
                "{p}: line {lno}: more than {MAX_BUCKETS} histogram rows (cyclictest's largest -h)"
            );
        }
        let v = numbers(path, lno, "histogram row", line, ncols + 1)?;
        match last_bucket {
            None if v[0] != 0 => {
                bail!("{p}: line {lno}: the first bucket is {}, expected 0", v[0])
            }
            Some(prev) if Some(v[0]) != prev.checked_add(1) => bail!(
                "{p}: line {lno}: bucket {} follows bucket {prev} (buckets must be consecutive)",
                v[0]
            ),
            _ => {}
        }
        last_bucket = Some(v[0]);
        if counts.is_empty() {
            counts = vec![Vec::new(); ncols];
        }
        for (col, c) in counts.iter_mut().zip(&v[1..]) {
            col.push(*c);
        }
        nrows += 1;
    }
    let n = counts.len();
    if n == 0 {
        if seen_header {
            bail!("{p}: \"# Histogram\" has no rows (truncated file?)");
        }
        bail!(
            "{p}: not a cyclictest histogram (no \"# Histogram\" rows; expected `cyclictest -h N` output or a --histfile)"
        );
    }
    let need = |name: &str, v: Option<(usize, Vec<u64>)>| -> Result<(usize, Vec<u64>)> {
        let (lno, v) = v.ok_or_else(|| anyhow!("{p}: no \"# {name}\" line (truncated file?)"))?;
        if v.len() != n {
            bail!(
                "{p}: line {lno}: \"# {name}\" has {} values for {n} threads",
                v.len()
            );
        }
        Ok((lno, v))
    };
    let total = need("Total:", total)?.1;
    let latencies = |name: &str, v| -> Result<Vec<u64>> {
        let (lno, v) = need(name, v)?;
        if let Some((t, x)) = v.iter().enumerate().find(|(_, x)| **x > MAX_LATENCY_US) {
            bail!(
                "{p}: line {lno}: # {name} column {}: {x} µs is above the 60 s ({MAX_LATENCY_US} µs) a latency histogram holds",
                t + 1
            );
        }
        Ok(v)
    };
    let min = latencies("Min Latencies:", min)?;
    let avg = latencies("Avg Latencies:", avg)?;
    let max = latencies("Max Latencies:", max)?;
    let ovf = match ovf {
        Some(o) => need("Histogram Overflows:", Some(o))?.1,
        None => vec![0; n],
    };
    let mut threads = Vec::with_capacity(n);
    for (t, col) in counts.into_iter().enumerate() {
        let sum = col
            .iter()
            .try_fold(0u64, |a, c| a.checked_add(*c))
            .ok_or_else(|| {
                anyhow!(
                    "{p}: thread {t}: the histogram rows hold more than {} samples",
                    u64::MAX
                )
            })?;
        if sum != total[t] {
            bail!(
                "{p}: thread {t}: \"# Total\" is {} but the histogram rows hold {sum} samples",
                total[t]
            );
        }
        if total[t].checked_add(ovf[t]).is_none() {
            bail!(
                "{p}: thread {t}: {} samples plus {} overflows do not fit in 64 bits",
                total[t],
                ovf[t]
            );
        }
        let th = CtThread {
            counts: col,
            total: total[t],
            overflows: ovf[t],
            min_us: min[t],
            avg_us: avg[t],
            max_us: max[t],
        };
        if th.samples() == 0 {
            bail!("{p}: thread {t}: no samples");
        }
        if th.min_us > th.avg_us || th.avg_us > th.max_us {
            bail!(
                "{p}: thread {t}: min {} / avg {} / max {} µs are not ordered",
                th.min_us,
                th.avg_us,
                th.max_us
            );
        }
        if th.overflows > 0 && th.max_us < nrows as u64 {
            bail!(
                "{p}: thread {t}: {} overflows but max {} µs lies inside the histogram range ({} µs)",
                th.overflows,
                th.max_us,
                nrows
            );
        }
        threads.push(th);
    }
    Ok(CtHistogram { threads })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &str = "# /dev/cpu_dma_latency set to 0us\n# Histogram\n000000 000000\t000000\n000001 000002\t000001\n\
000002 000001\t000003\n000003 000001\t000000\n# Total: 000000004 000000004\n# Min Latencies: 00001 00001\n\
# Avg Latencies: 00001 00001\n# Max Latencies: 00003 00002\n# Histogram Overflows: 00000 00000\n\
# Histogram Overflow at cycle number:\n# Thread 0:\n# Thread 1:\n";

    #[test]
    fn parses_two_threads() {
        let h = parse(Path::new("ct.txt"), TWO).unwrap();
        assert_eq!(h.threads.len(), 2);
        assert_eq!(h.threads[0].counts, vec![0, 2, 1, 1]);
        assert_eq!(h.threads[1].max_us, 2);
        assert_eq!(h.threads[0].quantile_us(0.5), (1, true));
        assert_eq!(h.threads[0].quantile_us(0.99), (3, true));
        assert_eq!(h.threads[1].quantile_us(0.0), (1, true));
    }

    #[test]
    fn overflow_quantile_is_an_upper_bound() {
        let text = "# Histogram\n000000 000001\n000001 000001\n# Total: 000000002\n# Min Latencies: 00000\n\
# Avg Latencies: 00100\n# Max Latencies: 00464\n# Histogram Overflows: 00002\n";
        let h = parse(Path::new("hf"), text).unwrap();
        assert_eq!(h.threads[0].samples(), 4);
        assert_eq!(h.threads[0].quantile_us(0.5), (1, true));
        assert_eq!(h.threads[0].quantile_us(0.99), (464, false));
    }

    #[test]
    fn malformed_inputs_name_file_and_line() {
        let e = |t: &str| parse(Path::new("ct.txt"), t).unwrap_err().to_string();
        assert!(e("hello\n").starts_with("ct.txt: not a cyclictest histogram"));
        assert!(e("# Histogram\n").contains("has no rows"));
        assert_eq!(
            e(&TWO.replace("# Total: 000000004 000000004\n", "")),
            "ct.txt: no \"# Total:\" line (truncated file?)"
        );
        assert_eq!(
            e(&TWO.replace("000002 000001\t000003", "000002 000001")),
            "ct.txt: line 5: 1 count columns, earlier rows have 2"
        );
        assert!(
            e(&TWO.replace("000003 000001", "000004 000001"))
                .starts_with("ct.txt: line 6: bucket 4 follows bucket 2")
        );
        assert_eq!(
            e(&TWO.replace(
                "# Total: 000000004 000000004",
                "# Total: 000000005 000000004"
            )),
            "ct.txt: thread 0: \"# Total\" is 5 but the histogram rows hold 4 samples"
        );
        assert!(
            e(&TWO.replace("000001 000002", "000001 0000x2"))
                .starts_with("ct.txt: line 4: histogram row: \"0000x2\"")
        );
    }

    #[test]
    fn columns_rows_and_values_are_bounded() {
        let e = |t: &str| parse(Path::new("ct.txt"), t).unwrap_err().to_string();
        let wide = format!("# Histogram\n000000{}\n", " 0".repeat(MAX_THREADS + 1));
        assert_eq!(
            e(&wide),
            "ct.txt: line 2: 1025 count columns, at most 1024 (one per measurement thread)"
        );
        let mut tall = String::from("# Histogram\n");
        for b in 0..=MAX_BUCKETS {
            tall.push_str(&format!("{b} 0\n"));
        }
        assert_eq!(
            e(&tall),
            "ct.txt: line 1000002: more than 1000000 histogram rows (cyclictest's largest -h)"
        );
        // a summary line longer than the rows are wide
        let t = TWO.replace("# Min Latencies: 00001 00001", "# Min Latencies: 1 1 1");
        assert_eq!(
            e(&t),
            "ct.txt: line 8: # Min Latencies: 3 numbers, at most 2"
        );
        // 60 s is the most a latency may be; µs -> ns can then never overflow
        let t = TWO.replace(
            "# Max Latencies: 00003 00002",
            "# Max Latencies: 60000001 00002",
        );
        assert_eq!(
            e(&t),
            "ct.txt: line 10: # Max Latencies: column 1: 60000001 µs is above the 60 s (60000000 µs) a latency histogram holds"
        );
        let t = TWO.replace(
            "# Histogram Overflows: 00000 00000",
            "# Histogram Overflows: 18446744073709551615 00000",
        );
        assert!(
            e(&t).contains("thread 0: 4 samples plus 18446744073709551615 overflows do not fit")
        );
        let t = TWO.replace("000001 000002", "000001 18446744073709551616");
        assert!(e(&t).contains("\"18446744073709551616\" (column 2) does not fit in 64 bits"));
    }
}
