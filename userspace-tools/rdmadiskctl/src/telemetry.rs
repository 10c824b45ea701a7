//! The `telemetry_<via>_<op>` files: per transport and operation, the I/O counts and two
//! latency histograms (`lat_us`, dispatch to completion; `wire_us`, request sent to response
//! received), and the percentiles taken from them.

use rdmadisk_proto::histogram::{self, BUCKETS};
use serde::Serialize;

use crate::disk::Disk;
use crate::error::{Error, Result};

/// The transports, as the files name them.
pub const VIAS: [&str; 2] = ["rdma", "tcp"];
/// The operations, as the files name them.
pub const OPS: [&str; 5] = ["read", "write", "flush", "discard", "write_zeroes"];
/// The percentiles reported, with their names in the JSON and the text.
pub const PERCENTILES: [(&str, u32); 4] =
    [("p50", 500), ("p90", 900), ("p99", 990), ("p99.9", 999)];

pub type Counts = [u64; BUCKETS];

/// One `telemetry_<via>_<op>` file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Figures {
    pub ios: u64,
    pub bytes: u64,
    pub errors: u64,
    pub credit_waits: u64,
    /// The sums of the latencies the histograms count (µs), for their means; `None` from a
    /// module that does not give them.
    pub lat_us_sum: Option<u64>,
    pub wire_us_sum: Option<u64>,
    pub lat_us: Counts,
    pub wire_us: Counts,
}

impl Figures {
    /// Whether anything happened; the rest are not worth showing.
    pub fn is_active(&self) -> bool {
        self.ios > 0 || self.errors > 0
    }
}

/// Parses a telemetry file. Unknown keys are skipped so that a module that adds one does not
/// break this tool; every known key must be there.
pub fn parse(text: &str) -> Result<Figures, String> {
    let mut f = Figures::default();
    let mut seen = [false; 6];
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .ok_or_else(|| format!("line {}: expected key=value, got '{line}'", i + 1))?;
        let number = || {
            value
                .trim()
                .parse::<u64>()
                .map_err(|_| format!("line {}: {key}: '{value}' is not a count", i + 1))
        };
        let histogram =
            || histogram::parse_sparse(value).map_err(|e| format!("line {}: {key}: {e}", i + 1));
        let slot = match key {
            "ios" => {
                f.ios = number()?;
                0
            }
            "bytes" => {
                f.bytes = number()?;
                1
            }
            "errors" => {
                f.errors = number()?;
                2
            }
            "credit_waits" => {
                f.credit_waits = number()?;
                3
            }
            "lat_us_sum" => {
                f.lat_us_sum = Some(number()?);
                continue;
            }
            "wire_us_sum" => {
                f.wire_us_sum = Some(number()?);
                continue;
            }
            "lat_us" => {
                f.lat_us = histogram()?;
                4
            }
            "wire_us" => {
                f.wire_us = histogram()?;
                5
            }
            _ => continue,
        };
        seen[slot] = true;
    }
    let keys = [
        "ios",
        "bytes",
        "errors",
        "credit_waits",
        "lat_us",
        "wire_us",
    ];
    match seen.iter().position(|s| !s) {
        Some(i) => Err(format!("no '{}=' line", keys[i])),
        None => Ok(f),
    }
}

/// The figures of one transport and operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub via: &'static str,
    pub op: &'static str,
    pub figures: Figures,
}

/// Every telemetry file the disk has, in [`VIAS`] × [`OPS`] order; a module without
/// telemetry has none, and gives an empty list.
pub fn read(disk: &Disk) -> Result<Vec<Entry>> {
    let mut out = Vec::new();
    for via in VIAS {
        for op in OPS {
            let file = format!("telemetry_{via}_{op}");
            let Some(text) = disk.read_optional(&file)? else {
                continue;
            };
            let figures = parse(&text).map_err(|msg| Error::Parse {
                path: disk.file(&file),
                msg,
            })?;
            out.push(Entry { via, op, figures });
        }
    }
    Ok(out)
}

/// A percentile as the bucket that holds it and the latencies that bucket covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Percentile {
    pub bucket: usize,
    pub low_us: u64,
    /// `None` for the last bucket, which has no upper bound.
    pub high_us: Option<u64>,
}

impl Percentile {
    pub fn of(counts: &[u64], per_mille: u32) -> Option<Percentile> {
        let bucket = histogram::percentile(counts, per_mille)?;
        let (low_us, high_us) = histogram::bucket_bounds(bucket);
        Some(Percentile {
            bucket,
            low_us,
            high_us,
        })
    }

    /// "≤ 16383 µs": a log2 bucket is only good to a factor of two, so its upper bound is
    /// the honest figure to give.
    pub fn text(&self) -> String {
        match self.high_us {
            Some(h) => format!("≤ {h} µs"),
            None => format!("≥ {} µs", self.low_us),
        }
    }
}

/// A histogram in the JSON: its non-empty buckets as `[index, count]`, its mean (exact, from
/// the module's sum) and its percentiles (`null` when it is empty).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub buckets: Vec<(usize, u64)>,
    pub mean_us: Option<u64>,
    pub p50: Option<Percentile>,
    pub p90: Option<Percentile>,
    pub p99: Option<Percentile>,
    #[serde(rename = "p99.9")]
    pub p999: Option<Percentile>,
}

impl Summary {
    #[cfg(test)]
    pub fn of(counts: &[u64]) -> Summary {
        Summary::with_sum(counts, None)
    }

    /// As [`Summary::of`], with the mean from `sum_us`, the sum of what `counts` counts.
    pub fn with_sum(counts: &[u64], sum_us: Option<u64>) -> Summary {
        let p = |pm| Percentile::of(counts, pm);
        let n: u64 = counts.iter().sum();
        Summary {
            mean_us: sum_us.filter(|_| n > 0).map(|s| s / n),
            buckets: counts
                .iter()
                .enumerate()
                .filter(|(_, &c)| c > 0)
                .map(|(i, &c)| (i, c))
                .collect(),
            p50: p(PERCENTILES[0].1),
            p90: p(PERCENTILES[1].1),
            p99: p(PERCENTILES[2].1),
            p999: p(PERCENTILES[3].1),
        }
    }

    /// The percentiles in [`PERCENTILES`] order.
    pub fn percentiles(&self) -> [Option<Percentile>; 4] {
        [self.p50, self.p90, self.p99, self.p999]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "ios=400\nbytes=1638400\nerrors=0\ncredit_waits=0\n\
                            lat_us=12:3 13:390 14:7\nwire_us=12:10 13:390\n";

    #[test]
    fn files_parse() {
        let f = parse(FILE).unwrap();
        assert_eq!(
            (f.ios, f.bytes, f.errors, f.credit_waits),
            (400, 1638400, 0, 0)
        );
        assert_eq!(f.lat_us[12..15], [3, 390, 7]);
        assert_eq!(f.lat_us.iter().sum::<u64>(), 400);
        assert_eq!(f.wire_us[12..14], [10, 390]);
        assert!(f.is_active());
        // Empty histograms are empty strings; unknown keys are skipped.
        let idle =
            parse("ios=0\nbytes=0\nerrors=0\ncredit_waits=0\nlat_us=\nwire_us=\nnew=1\n").unwrap();
        assert_eq!(idle, Figures::default());
        assert!(!idle.is_active());
    }

    #[test]
    fn bad_files_are_refused() {
        assert_eq!(
            parse("ios=1\nbytes=0\nerrors=0\ncredit_waits=0\nlat_us=\n").unwrap_err(),
            "no 'wire_us=' line"
        );
        assert_eq!(
            parse("ios=x\n").unwrap_err(),
            "line 1: ios: 'x' is not a count"
        );
        assert_eq!(
            parse("ios=1\nlat_us=4:1 3:1\n").unwrap_err(),
            "line 2: lat_us: the bucket indexes do not increase"
        );
        assert_eq!(
            parse("garbage\n").unwrap_err(),
            "line 1: expected key=value, got 'garbage'"
        );
    }

    #[test]
    fn percentiles_are_buckets_with_bounds() {
        let f = parse(FILE).unwrap();
        let s = Summary::of(&f.lat_us);
        assert_eq!(s.buckets, vec![(12, 3), (13, 390), (14, 7)]);
        let b13 = Percentile {
            bucket: 13,
            low_us: 8192,
            high_us: Some(16383),
        };
        // 400 samples: p50 (rank 200) and p90 (rank 360) fall in bucket 13, which holds
        // ranks 4..=393; p99 (rank 396) and p99.9 (rank 400) in bucket 14.
        assert_eq!(s.p50, Some(b13));
        assert_eq!(s.p90, Some(b13));
        assert_eq!(s.p99.unwrap().bucket, 14);
        assert_eq!(s.p999.unwrap().bucket, 14);
        assert_eq!(s.p50.unwrap().text(), "≤ 16383 µs");
        let empty = Summary::of(&[0; BUCKETS]);
        assert_eq!(empty.percentiles(), [None; 4]);
        let mut top = [0; BUCKETS];
        top[BUCKETS - 1] = 1;
        assert_eq!(Percentile::of(&top, 500).unwrap().text(), "≥ 33554432 µs");
    }

    #[test]
    fn summary_json_shape() {
        let f = parse(FILE).unwrap();
        let v = serde_json::to_value(Summary::of(&f.wire_us)).unwrap();
        let b13 = serde_json::json!({"bucket": 13, "low_us": 8192, "high_us": 16383});
        assert_eq!(
            v,
            serde_json::json!({"buckets": [[12, 10], [13, 390]], "mean_us": null,
                               "p50": b13, "p90": b13, "p99": b13, "p99.9": b13})
        );
    }
}
