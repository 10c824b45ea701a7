//! What `top` shows of a disk: samples of its counters and latency histograms, and the
//! rates and latencies between two samples. Kept apart from the terminal so it can be tested.

use std::time::Instant;

use rdmadisk_proto::histogram::BUCKETS;

use crate::disk::{self, Device, Disk};
use crate::error::Result;
use crate::stats;
use crate::sysfs::Sysfs;
use crate::telemetry::{self, Counts, Percentile};

/// The `stats` counters the rates come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IoCounts {
    pub reads: u64,
    pub writes: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
}

/// One disk at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub dev: Device,
    pub at: Instant,
    /// `active_transport`.
    pub transport: Option<String>,
    /// `None` while the disk has no block device, or its files could not be read.
    pub io: Option<IoCounts>,
    /// `lat_us` summed over every transport and operation: the I/O of an interval ran on
    /// whichever transport was up, and its latency is what the user felt either way.
    pub lat_us: Option<Counts>,
    /// blk-mq's requests in flight, which is the credits in use.
    pub inflight: Option<u64>,
}

impl Sample {
    /// Whether `other` is the same disk: a number reused by a new mapping starts afresh.
    fn same_disk(&self, other: &Sample) -> bool {
        self.dev.device == other.dev.device && self.dev.name == other.dev.name
    }
}

fn io_counts(c: &stats::Counters) -> Option<IoCounts> {
    let get = |k: &str| c.iter().find(|(n, _)| n == k).map(|&(_, v)| v);
    Some(IoCounts {
        reads: get("reads")?,
        writes: get("writes")?,
        read_bytes: get("read_bytes")?,
        write_bytes: get("write_bytes")?,
    })
}

/// Samples one disk. Failures leave fields `None` rather than stop `top`: a disk may be
/// unmapped or still connecting between two reads.
pub fn sample(sysfs: &Sysfs, dev: Device) -> Sample {
    let d = Disk::of(sysfs, dev);
    let at = Instant::now();
    let io = stats::read_counters(&d).ok().and_then(|c| io_counts(&c));
    let lat_us = telemetry::read(&d).ok().and_then(|entries| {
        if entries.is_empty() {
            return None;
        }
        let mut sum = [0u64; BUCKETS];
        for e in &entries {
            for (s, c) in sum.iter_mut().zip(&e.figures.lat_us) {
                *s = s.saturating_add(*c);
            }
        }
        Some(sum)
    });
    Sample {
        transport: d.read_optional("active_transport").ok().flatten(),
        inflight: d.inflight(),
        io,
        lat_us,
        at,
        dev: d.dev,
    }
}

pub fn sample_all(sysfs: &Sysfs) -> Result<Vec<Sample>> {
    Ok(disk::list(sysfs)?
        .into_iter()
        .map(|d| sample(sysfs, d))
        .collect())
}

/// A row of `top`: rates are `None` on the first sample of a disk, or when its counters went
/// back (a telemetry reset).
#[derive(Debug, Clone, PartialEq)]
pub struct DiskRates {
    pub device: String,
    pub name: String,
    pub state: String,
    pub transport: Option<String>,
    pub read_iops: Option<f64>,
    pub write_iops: Option<f64>,
    pub read_mbs: Option<f64>,
    pub write_mbs: Option<f64>,
    /// Latency percentiles of the I/O completed since the previous sample; `None` also when
    /// none completed.
    pub p50: Option<Percentile>,
    pub p99: Option<Percentile>,
    pub inflight: Option<u64>,
}

/// `cur - prev` bucket by bucket; `None` if any went back.
fn histogram_delta(prev: &Counts, cur: &Counts) -> Option<Counts> {
    let mut d = [0u64; BUCKETS];
    for ((d, p), c) in d.iter_mut().zip(prev).zip(cur) {
        *d = c.checked_sub(*p)?;
    }
    Some(d)
}

pub fn rates(prev: &[Sample], cur: &Sample) -> DiskRates {
    let prev = prev.iter().find(|p| p.same_disk(cur));
    let secs = prev.map(|p| cur.at.duration_since(p.at).as_secs_f64());
    let per_sec = |f: fn(&IoCounts) -> u64, scale: f64| -> Option<f64> {
        let (p, c) = (prev?.io?, cur.io?);
        let secs = secs.filter(|s| *s > 0.0)?;
        Some(f(&c).checked_sub(f(&p))? as f64 / secs / scale)
    };
    let lat = prev.and_then(|p| histogram_delta(p.lat_us.as_ref()?, cur.lat_us.as_ref()?));
    let pct = |pm| lat.and_then(|l| Percentile::of(&l, pm));
    DiskRates {
        device: cur.dev.device.clone(),
        name: cur.dev.name.clone(),
        state: cur.dev.state.clone(),
        transport: cur.transport.clone(),
        read_iops: per_sec(|c| c.reads, 1.0),
        write_iops: per_sec(|c| c.writes, 1.0),
        read_mbs: per_sec(|c| c.read_bytes, 1e6),
        write_mbs: per_sec(|c| c.write_bytes, 1e6),
        p50: pct(500),
        p99: pct(990),
        inflight: cur.inflight,
    }
}

/// A latency for a narrow column: the bucket's upper bound ("≤16.4ms").
pub fn latency_cell(p: Option<Percentile>) -> String {
    let Some(p) = p else {
        return "-".to_owned();
    };
    let (sign, us) = match p.high_us {
        Some(h) => ("≤", h),
        None => ("≥", p.low_us),
    };
    match us {
        0..1_000 => format!("{sign}{us}µs"),
        1_000..1_000_000 => format!("{sign}{:.1}ms", us as f64 / 1e3),
        _ => format!("{sign}{:.1}s", us as f64 / 1e6),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn dev() -> Device {
        disk::parse_devices("rdmadisk0 d1 192.0.2.2:7700 vol0 live\n").unwrap()[0].clone()
    }

    fn at(t0: Instant, ms: u64, reads: u64, lat: &[(usize, u64)]) -> Sample {
        let mut h = [0u64; BUCKETS];
        for &(i, c) in lat {
            h[i] = c;
        }
        Sample {
            dev: dev(),
            at: t0 + Duration::from_millis(ms),
            transport: Some("rdma".into()),
            io: Some(IoCounts {
                reads,
                writes: reads / 2,
                read_bytes: reads * 4096,
                write_bytes: 0,
            }),
            lat_us: Some(h),
            inflight: Some(3),
        }
    }

    #[test]
    fn rates_come_from_deltas() {
        let t0 = Instant::now();
        let a = at(t0, 0, 1000, &[(5, 1000)]);
        let first = rates(&[], &a);
        assert_eq!((first.read_iops, first.p50), (None, None));
        assert_eq!(first.inflight, Some(3));
        // 500 ms later: 2000 more reads, all of them in bucket 3 (8..15 µs) but one.
        let b = at(t0, 500, 3000, &[(3, 1999), (5, 1000), (9, 1)]);
        let r = rates(std::slice::from_ref(&a), &b);
        assert_eq!(r.read_iops, Some(4000.0));
        assert_eq!(r.write_iops, Some(2000.0));
        assert_eq!(r.read_mbs, Some(4000.0 * 4096.0 / 1e6));
        assert_eq!(r.write_mbs, Some(0.0));
        assert_eq!(r.p50.unwrap().bucket, 3);
        assert_eq!(r.p99.unwrap().bucket, 3);
        assert_eq!(latency_cell(r.p50), "≤15µs");
    }

    #[test]
    fn resets_and_new_mappings_start_afresh() {
        let t0 = Instant::now();
        let a = at(t0, 0, 1000, &[(5, 1000)]);
        let reset = at(t0, 1000, 1500, &[(5, 10)]);
        let r = rates(std::slice::from_ref(&a), &reset);
        assert_eq!(r.read_iops, Some(500.0));
        assert_eq!(r.p50, None);
        let mut other = at(t0, 1000, 5000, &[]);
        other.dev.name = "d2".into();
        assert_eq!(rates(&[a], &other).read_iops, None);
    }

    #[test]
    fn latency_cells_are_short() {
        let p = |bucket| {
            Percentile::of(
                &{
                    let mut h = [0u64; BUCKETS];
                    h[bucket] = 1;
                    h
                },
                500,
            )
        };
        assert_eq!(latency_cell(None), "-");
        assert_eq!(latency_cell(p(0)), "≤1µs");
        assert_eq!(latency_cell(p(13)), "≤16.4ms");
        assert_eq!(latency_cell(p(21)), "≤4.2s");
        assert_eq!(latency_cell(p(BUCKETS - 1)), "≥33.6s");
    }
}
