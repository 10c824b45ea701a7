//! `stats`: a disk's counters (`stats`) and its telemetry, as text or JSON.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::disk::Disk;
use crate::error::{Error, Result};
use crate::table;
use crate::telemetry::{self, Entry, Summary, PERCENTILES};

/// The `stats` file's `key=value` counters, in the module's order.
pub type Counters = Vec<(String, u64)>;

pub fn parse_counters(text: &str) -> Result<Counters, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .ok_or_else(|| format!("line {}: expected key=value, got '{line}'", i + 1))?;
        let v = v
            .trim()
            .parse()
            .map_err(|_| format!("line {}: {k}: '{v}' is not a count", i + 1))?;
        out.push((k.to_owned(), v));
    }
    Ok(out)
}

pub fn read_counters(disk: &Disk) -> Result<Counters> {
    let text = disk.read("stats")?;
    parse_counters(&text).map_err(|msg| Error::Parse {
        path: disk.file("stats"),
        msg,
    })
}

/// What `stats` reports of one disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub disk: String,
    pub name: String,
    pub counters: Counters,
    pub telemetry: Vec<Entry>,
}

pub fn report(disk: &Disk) -> Result<Report> {
    Ok(Report {
        disk: disk.dev.device.clone(),
        name: disk.dev.name.clone(),
        counters: read_counters(disk)?,
        telemetry: telemetry::read(disk)?,
    })
}

/// `stats --json` prints one object:
///
/// ```json
/// {"disk": "rdmadisk0", "name": "d1",
///  "counters": {"reads": 400, "writes": 0, ...},
///  "telemetry": {
///    "rdma": {
///      "read": {"ios": 400, "bytes": 1638400, "errors": 0, "credit_waits": 0,
///               "lat_us": {"buckets": [[12, 3], [13, 390], [14, 7]], "mean_us": 9120,
///                          "p50": {"bucket": 13, "low_us": 8192, "high_us": 16383},
///                          "p90": {...}, "p99": {...}, "p99.9": {...}},
///               "wire_us": {...}}}}}
/// ```
///
/// - `counters`: every line of the disk's `stats` file, by name (keys sorted).
/// - `telemetry`: by transport (`rdma`, `tcp`), then operation (`read`, `write`, `flush`,
///   `discard`, `write_zeroes`); an operation with no I/O and no error is left out, and so is a
///   transport left with none. Empty when the module keeps no telemetry.
/// - `lat_us` is dispatch to completion, `wire_us` request sent to response received, both in
///   log2 buckets of µs: `buckets` lists the non-empty ones as `[index, count]`; a percentile
///   is the bucket holding it with the bucket's bounds (`high_us` is `null` for the last,
///   unbounded bucket), and is `null` when the histogram is empty; `mean_us` is exact (the
///   module's sum of the latencies over their count), `null` when empty.
#[derive(Debug, Serialize, PartialEq)]
pub struct Json {
    pub disk: String,
    pub name: String,
    pub counters: BTreeMap<String, u64>,
    pub telemetry: BTreeMap<&'static str, BTreeMap<&'static str, OpJson>>,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct OpJson {
    pub ios: u64,
    pub bytes: u64,
    pub errors: u64,
    pub credit_waits: u64,
    pub lat_us: Summary,
    pub wire_us: Summary,
}

pub fn json(r: &Report) -> Json {
    let mut tele: BTreeMap<&'static str, BTreeMap<&'static str, OpJson>> = BTreeMap::new();
    for e in r.telemetry.iter().filter(|e| e.figures.is_active()) {
        let f = &e.figures;
        tele.entry(e.via).or_default().insert(
            e.op,
            OpJson {
                ios: f.ios,
                bytes: f.bytes,
                errors: f.errors,
                credit_waits: f.credit_waits,
                lat_us: Summary::with_sum(&f.lat_us, f.lat_us_sum),
                wire_us: Summary::with_sum(&f.wire_us, f.wire_us_sum),
            },
        );
    }
    Json {
        disk: r.disk.clone(),
        name: r.name.clone(),
        counters: r.counters.iter().cloned().collect(),
        telemetry: tele,
    }
}

pub fn text(r: &Report) -> String {
    let mut out = format!("{} ({})\n", r.disk, r.name);
    let rows: Vec<[String; 2]> = r
        .counters
        .iter()
        .map(|(k, v)| [format!("  {k}"), v.to_string()])
        .collect();
    out.push_str("counters:\n");
    out.push_str(&table::render(&rows));
    let active: Vec<&Entry> = r
        .telemetry
        .iter()
        .filter(|e| e.figures.is_active())
        .collect();
    if active.is_empty() {
        return out;
    }
    out.push_str("telemetry:\n");
    let mut rows = vec![{
        let mut h = vec![
            "  transport".to_owned(),
            "op".into(),
            "ios".into(),
            "bytes".into(),
            "errors".into(),
            "credit_waits".into(),
            "histogram".into(),
            "mean".into(),
        ];
        h.extend(PERCENTILES.iter().map(|(n, _)| n.to_string()));
        h
    }];
    for e in active {
        let f = &e.figures;
        for (i, (hist, counts, sum)) in [
            ("lat_us", &f.lat_us, f.lat_us_sum),
            ("wire_us", &f.wire_us, f.wire_us_sum),
        ]
        .into_iter()
        .enumerate()
        {
            // The counts go on the first of the operation's two lines only.
            let mut row = if i == 0 {
                vec![
                    format!("  {}", e.via),
                    e.op.to_owned(),
                    f.ios.to_string(),
                    f.bytes.to_string(),
                    f.errors.to_string(),
                    f.credit_waits.to_string(),
                ]
            } else {
                vec![String::new(); 6]
            };
            row.push(hist.to_owned());
            let summary = Summary::with_sum(counts, sum);
            row.push(
                summary
                    .mean_us
                    .map_or_else(|| "-".to_owned(), |m| format!("{m} µs")),
            );
            row.extend(
                summary
                    .percentiles()
                    .iter()
                    .map(|p| p.map_or_else(|| "-".to_owned(), |p| p.text())),
            );
            rows.push(row);
        }
    }
    out.push_str(&table::render(&rows));
    out
}

/// `--reset`: zeroes the telemetry (the counters of `stats` are not reset by the module).
pub fn reset(disk: &Disk) -> Result<()> {
    disk.write("telemetry_reset", "1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::parse;

    const FILE: &str = "ios=400\nbytes=1638400\nerrors=0\ncredit_waits=2\n\
                        lat_us_sum=3648000\nwire_us_sum=3200000\n\
                        lat_us=12:3 13:390 14:7\nwire_us=12:10 13:390\n";

    fn sample() -> Report {
        let idle = parse("ios=0\nbytes=0\nerrors=0\ncredit_waits=0\nlat_us=\nwire_us=\n").unwrap();
        let failed =
            parse("ios=0\nbytes=0\nerrors=3\ncredit_waits=0\nlat_us=20:3\nwire_us=\n").unwrap();
        Report {
            disk: "rdmadisk0".into(),
            name: "d1".into(),
            counters: parse_counters("reads=400\nwrites=0\nio_errors=3\n").unwrap(),
            telemetry: vec![
                Entry {
                    via: "rdma",
                    op: "read",
                    figures: parse(FILE).unwrap(),
                },
                Entry {
                    via: "rdma",
                    op: "write",
                    figures: idle.clone(),
                },
                Entry {
                    via: "tcp",
                    op: "flush",
                    figures: failed,
                },
                Entry {
                    via: "tcp",
                    op: "read",
                    figures: idle,
                },
            ],
        }
    }

    #[test]
    fn counters_parse() {
        let c = parse_counters("reads=4\nread_bytes=16384\n\n").unwrap();
        assert_eq!(c, vec![("reads".into(), 4), ("read_bytes".into(), 16384)]);
        assert_eq!(
            parse_counters("reads=4\nwrites=-1\n").unwrap_err(),
            "line 2: writes: '-1' is not a count"
        );
        assert!(parse_counters("reads\n").is_err());
    }

    #[test]
    fn json_shape() {
        let v = serde_json::to_value(json(&sample())).unwrap();
        let b13 = serde_json::json!({"bucket": 13, "low_us": 8192, "high_us": 16383});
        let b14 = serde_json::json!({"bucket": 14, "low_us": 16384, "high_us": 32767});
        let b20 = serde_json::json!({"bucket": 20, "low_us": 1048576, "high_us": 2097151});
        let empty = serde_json::json!({"buckets": [], "mean_us": null, "p50": null,
                                       "p90": null, "p99": null, "p99.9": null});
        assert_eq!(
            v,
            serde_json::json!({
                "disk": "rdmadisk0",
                "name": "d1",
                "counters": {"io_errors": 3, "reads": 400, "writes": 0},
                "telemetry": {
                    "rdma": {"read": {
                        "ios": 400, "bytes": 1638400, "errors": 0, "credit_waits": 2,
                        "lat_us": {"buckets": [[12, 3], [13, 390], [14, 7]], "mean_us": 9120,
                                   "p50": b13, "p90": b13, "p99": b14, "p99.9": b14},
                        "wire_us": {"buckets": [[12, 10], [13, 390]], "mean_us": 8000,
                                    "p50": b13, "p90": b13, "p99": b13, "p99.9": b13},
                    }},
                    "tcp": {"flush": {
                        "ios": 0, "bytes": 0, "errors": 3, "credit_waits": 0,
                        "lat_us": {"buckets": [[20, 3]], "mean_us": null,
                                   "p50": b20, "p90": b20, "p99": b20, "p99.9": b20},
                        "wire_us": empty,
                    }},
                },
            })
        );
    }

    #[test]
    fn text_shows_active_operations_only() {
        let t = text(&sample());
        assert_eq!(
            t,
            "rdmadisk0 (d1)\n\
             counters:\n\
             \x20 reads      400\n\
             \x20 writes     0\n\
             \x20 io_errors  3\n\
             telemetry:\n\
             \x20 transport  op     ios  bytes    errors  credit_waits  histogram  mean     p50           p90           p99           p99.9\n\
             \x20 rdma       read   400  1638400  0       2             lat_us     9120 µs  ≤ 16383 µs    ≤ 16383 µs    ≤ 32767 µs    ≤ 32767 µs\n\
             \x20                                                       wire_us    8000 µs  ≤ 16383 µs    ≤ 16383 µs    ≤ 16383 µs    ≤ 16383 µs\n\
             \x20 tcp        flush  0    0        3       0             lat_us     -        ≤ 2097151 µs  ≤ 2097151 µs  ≤ 2097151 µs  ≤ 2097151 µs\n\
             \x20                                                       wire_us    -        -             -             -             -\n"
        );
    }
}
