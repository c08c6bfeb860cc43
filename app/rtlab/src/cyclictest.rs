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
    /// All samples (inside the histogram and above it).
    pub fn samples(&self) -> u64 {
        self.total + self.overflows
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
        let mut cum = 0;
        for (i, c) in self.counts.iter().enumerate() {
            cum += c;
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

fn numbers(path: &Path, lno: usize, what: &str, s: &str) -> Result<Vec<u64>> {
    s.split_whitespace()
        .map(|t| {
            t.parse::<u64>().map_err(|_| {
                anyhow!(
                    "{}: line {lno}: {what}: \"{t}\" is not a number",
                    path.display()
                )
            })
        })
        .collect()
}

/// Parses a cyclictest histogram; errors name the file and the line.
pub fn parse(path: &Path, text: &str) -> Result<CtHistogram> {
    let p = path.display();
    let mut rows: Vec<(u64, Vec<u64>)> = Vec::new();
    let mut ncols: Option<usize> = None;
    let (mut total, mut min, mut avg, mut max, mut ovf) = (None, None, None, None, None);
    let mut seen_header = false;
    for (i, raw) in text.lines().enumerate() {
        let lno = i + 1;
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(c) = line.strip_prefix('#') {
            let c = c.trim();
            let field = |name: &str| c.strip_prefix(name).map(str::trim);
            if c == "Histogram" {
                seen_header = true;
            } else if let Some(v) = field("Total:") {
                total = Some((lno, numbers(path, lno, "# Total", v)?));
            } else if let Some(v) = field("Min Latencies:") {
                min = Some((lno, numbers(path, lno, "# Min Latencies", v)?));
            } else if let Some(v) = field("Avg Latencies:") {
                avg = Some((lno, numbers(path, lno, "# Avg Latencies", v)?));
            } else if let Some(v) = field("Max Latencies:") {
                max = Some((lno, numbers(path, lno, "# Max Latencies", v)?));
            } else if let Some(v) = field("Histogram Overflows:") {
                ovf = Some((lno, numbers(path, lno, "# Histogram Overflows", v)?));
            }
            continue;
        }
        if line.starts_with("T:")
            || line.starts_with("policy:")
            || !line.starts_with(|c: char| c.is_ascii_digit())
        {
            continue;
        }
        let v = numbers(path, lno, "histogram row", line)?;
        if v.len() < 2 {
            bail!("{p}: line {lno}: histogram row has no count column");
        }
        match ncols {
            None => ncols = Some(v.len() - 1),
            Some(n) if n != v.len() - 1 => {
                bail!(
                    "{p}: line {lno}: {} count columns, earlier rows have {n}",
                    v.len() - 1
                )
            }
            _ => {}
        }
        if let Some((prev, _)) = rows.last()
            && v[0] != prev + 1
        {
            bail!(
                "{p}: line {lno}: bucket {} follows bucket {prev} (buckets must be consecutive)",
                v[0]
            );
        }
        if rows.is_empty() && v[0] != 0 {
            bail!("{p}: line {lno}: the first bucket is {}, expected 0", v[0]);
        }
        rows.push((v[0], v[1..].to_vec()));
    }
    let Some(n) = ncols else {
        if seen_header {
            bail!("{p}: \"# Histogram\" has no rows (truncated file?)");
        }
        bail!(
            "{p}: not a cyclictest histogram (no \"# Histogram\" rows; expected `cyclictest -h N` output or a --histfile)"
        );
    };
    let need = |name: &str, v: Option<(usize, Vec<u64>)>| -> Result<Vec<u64>> {
        let (lno, v) = v.ok_or_else(|| anyhow!("{p}: no \"# {name}\" line (truncated file?)"))?;
        if v.len() != n {
            bail!(
                "{p}: line {lno}: \"# {name}\" has {} values for {n} threads",
                v.len()
            );
        }
        Ok(v)
    };
    let total = need("Total:", total)?;
    let min = need("Min Latencies:", min)?;
    let avg = need("Avg Latencies:", avg)?;
    let max = need("Max Latencies:", max)?;
    let ovf = match ovf {
        Some(o) => need("Histogram Overflows:", Some(o))?,
        None => vec![0; n],
    };
    let mut threads = Vec::new();
    for t in 0..n {
        let counts: Vec<u64> = rows.iter().map(|(_, c)| c[t]).collect();
        let sum: u64 = counts.iter().sum();
        if sum != total[t] {
            bail!(
                "{p}: thread {t}: \"# Total\" is {} but the histogram rows hold {sum} samples",
                total[t]
            );
        }
        let th = CtThread {
            counts,
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
        if th.overflows > 0 && th.max_us < rows.len() as u64 {
            bail!(
                "{p}: thread {t}: {} overflows but max {} µs lies inside the histogram range ({} µs)",
                th.overflows,
                th.max_us,
                rows.len()
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
}
