//! Prometheus metrics: the target-wide counters, and the request counters per export, per
//! client (address and transport) and per transport, with which transports are up; served
//! over HTTP (`metrics_listen`) and/or rewritten to a file for node_exporter's textfile
//! collector (`metrics_file`).
//!
//! Encoded by the `prometheus-client` crate (OpenMetrics text). A scraper that asks for
//! OpenMetrics gets it as is; others (and the textfile collector, which reads the older
//! Prometheus text format) get it converted ([`to_prometheus_text`]).

use std::io::{self, Read as _, Write as _};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::engine::Target;
use crate::registry::{Snapshot, Transport};

/// Which transports are listening now.
#[derive(Default)]
pub struct Up {
    pub tcp: AtomicBool,
    pub rdma: AtomicBool,
}

impl Up {
    /// "tcp and rdma", "tcp (rdma: waiting for a device)"...: for sd_notify's STATUS and the
    /// log.
    pub fn describe(&self, rdma_wanted: bool) -> String {
        let tcp = self.tcp.load(Ordering::Relaxed);
        let rdma = self.rdma.load(Ordering::Relaxed);
        match (tcp, rdma) {
            (true, true) => "tcp and rdma".into(),
            (true, false) if rdma_wanted => "tcp (rdma: waiting for a device)".into(),
            (true, false) => "tcp".into(),
            (false, true) => "rdma".into(),
            (false, false) => "nothing".into(),
        }
    }
}

/// Target-wide counters that are gauges (see `stats.rs`).
const GAUGES: &[&str] = &[
    "connections_active",
    "fences",
    "buffer_bytes",
    "buffer_bytes_peak",
    "connection_buffer_bytes",
    "ring_setup",
];

type Labels = Vec<(&'static str, String)>;

/// What the metrics are made from, gathered at one moment (so that the encoding is pure and
/// testable).
#[derive(Default, Debug, Clone)]
pub struct Sample {
    /// The target-wide counters, `stats.rs`'s names.
    pub target: Vec<(String, u64)>,
    /// Per export: its name, its counters, its connections now.
    pub exports: Vec<(String, Snapshot, u64)>,
    /// Per client of an export: export, address (None: unknown), transport, counters (gone
    /// connections' and live ones'), connections now.
    pub clients: Vec<(String, Option<IpAddr>, Transport, Snapshot, u64)>,
    /// Transports up (tcp, rdma).
    pub up: (bool, bool),
}

impl Sample {
    /// Takes one from the running target.
    pub fn take(t: &Target, up: &Up) -> Sample {
        let target = crate::stats_cmd::parse(&t.stats.render()).unwrap_or_default();
        let exports = t.exports();
        let (live, totals) = t.registry.consistent(&exports);
        let mut out = Sample {
            target,
            up: (
                up.tcp.load(Ordering::Relaxed),
                up.rdma.load(Ordering::Relaxed),
            ),
            ..Sample::default()
        };
        for (e, gone) in exports.iter().zip(totals) {
            let mine: Vec<_> = live.iter().filter(|c| c.conn.export == e.name).collect();
            out.exports
                .push((e.name.clone(), e.counters.snapshot(), mine.len() as u64));
            let mut by: std::collections::BTreeMap<(Option<IpAddr>, Transport), (Snapshot, u64)> =
                gone.into_iter().map(|(k, s)| (k, (s, 0))).collect();
            for c in mine {
                let v = by.entry((c.ip(), c.conn.transport)).or_default();
                v.0 = v.0.plus(&c.counters.snapshot());
                v.1 += 1;
            }
            for ((ip, tr), (s, n)) in by {
                out.clients.push((e.name.clone(), ip, tr, s, n));
            }
        }
        out
    }
}

fn counter_family(r: &mut Registry, name: &str, help: &str) -> Family<Labels, Counter> {
    let f = Family::<Labels, Counter>::default();
    r.register(name, help, f.clone());
    f
}

fn gauge_family(r: &mut Registry, name: &str, help: &str) -> Family<Labels, Gauge> {
    let f = Family::<Labels, Gauge>::default();
    r.register(name, help, f.clone());
    f
}

fn gauge_value(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The metrics, OpenMetrics text.
pub fn render(s: &Sample) -> String {
    let mut r = Registry::with_prefix("rdmadisk_target");
    for (name, v) in &s.target {
        if GAUGES.contains(&name.as_str()) {
            let g = Gauge::<i64>::default();
            g.set(gauge_value(*v));
            r.register(name.as_str(), format!("Target-wide {name} (a gauge)"), g);
        } else {
            let c = Counter::<u64>::default();
            c.inc_by(*v);
            r.register(name.as_str(), format!("Target-wide {name}"), c);
        }
    }
    let up = gauge_family(&mut r, "transport_up", "Whether a transport is listening");
    for (tr, on) in [("tcp", s.up.0), ("rdma", s.up.1)] {
        up.get_or_create(&vec![("transport", tr.to_string())])
            .set(i64::from(on));
    }
    let fields = Snapshot::default().fields();
    // Per export.
    let ex_conns = gauge_family(
        &mut r,
        "export_connections",
        "Connections attached to an export now",
    );
    let ex: Vec<_> = fields
        .iter()
        .map(|(n, _)| {
            counter_family(
                &mut r,
                &format!("export_{n}"),
                &format!("Per export: {}", help_of(n)),
            )
        })
        .collect();
    for (name, snap, conns) in &s.exports {
        let l = vec![("export", name.clone())];
        ex_conns.get_or_create(&l).set(gauge_value(*conns));
        for (f, (_, v)) in ex.iter().zip(snap.fields()) {
            f.get_or_create(&l).inc_by(v);
        }
    }
    // Per client, and per transport (their sum).
    let cl_conns = gauge_family(
        &mut r,
        "client_connections",
        "Connections of a client (address) to an export, on a transport, now",
    );
    let cl: Vec<_> = fields
        .iter()
        .map(|(n, _)| {
            counter_family(
                &mut r,
                &format!("client_{n}"),
                &format!("Per client address, export and transport: {}", help_of(n)),
            )
        })
        .collect();
    let tr_conns = gauge_family(
        &mut r,
        "transport_connections",
        "Connections on a transport now",
    );
    let tr: Vec<_> = fields
        .iter()
        .map(|(n, _)| {
            counter_family(
                &mut r,
                &format!("transport_{n}"),
                &format!("Per transport: {}", help_of(n)),
            )
        })
        .collect();
    for t in ["tcp", "rdma"] {
        let _ = tr_conns.get_or_create(&vec![("transport", t.to_string())]);
        for f in &tr {
            let _ = f.get_or_create(&vec![("transport", t.to_string())]);
        }
    }
    for (export, ip, t, snap, conns) in &s.clients {
        let l = vec![
            ("export", export.clone()),
            (
                "client",
                ip.map_or("unknown".to_string(), |i| i.to_string()),
            ),
            ("transport", t.name().to_string()),
        ];
        let lt = vec![("transport", t.name().to_string())];
        cl_conns.get_or_create(&l).set(gauge_value(*conns));
        tr_conns.get_or_create(&lt).inc_by(gauge_value(*conns));
        for ((c, t), (_, v)) in cl.iter().zip(&tr).zip(snap.fields()) {
            c.get_or_create(&l).inc_by(v);
            t.get_or_create(&lt).inc_by(v);
        }
    }
    let mut out = String::new();
    if prometheus_client::encoding::text::encode(&mut out, &r).is_err() {
        log::error!("cannot encode the metrics");
    }
    out
}

fn help_of(field: &str) -> &'static str {
    match field {
        "requests" => "requests received",
        "reads" => "read requests",
        "writes" => "write requests",
        "flushes" => "flush requests",
        "discards" => "discard and write-zeroes requests",
        "bytes_read" => "bytes read from the export and sent",
        "bytes_written" => "bytes received and written to the export",
        "errors" => "requests answered with an error status",
        _ => "a counter",
    }
}

/// OpenMetrics text as the Prometheus text format (0.0.4) has it: a counter's HELP and TYPE
/// name its `_total` samples, and there is no `# EOF` or `# UNIT`.
pub fn to_prometheus_text(om: &str) -> String {
    let mut counters = std::collections::HashSet::new();
    for l in om.lines() {
        if let Some(rest) = l.strip_prefix("# TYPE ") {
            if let Some(name) = rest.strip_suffix(" counter") {
                counters.insert(name.to_string());
            }
        }
    }
    let mut out = String::with_capacity(om.len());
    for l in om.lines() {
        if l == "# EOF" || l.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| l.strip_prefix(p).map(|rest| (p, rest)));
        if let Some((p, rest)) = meta {
            let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
            if counters.contains(name) {
                out += &format!("{p}{name}_total {tail}\n");
                continue;
            }
        }
        out += l;
        out.push('\n');
    }
    out
}

/// Serves the metrics over HTTP on `l` (any path but `/metrics` and `/` is 404) until the
/// target stops.
pub fn serve(t: Arc<Target>, up: Arc<Up>, l: TcpListener) {
    if let Err(e) = l.set_nonblocking(true) {
        log::error!("metrics: cannot poll the listener: {e}");
        return;
    }
    while !t.stopping() {
        match l.accept() {
            Ok((s, peer)) => {
                if let Err(e) = answer(&t, &up, s) {
                    log::debug!("metrics: {peer}: {e}");
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let fds = [Some(l.as_raw_fd()), t.stop_fd()];
                if crate::wake::readable(&fds, Some(t.idle_wait())).is_err() {
                    thread::sleep(crate::conn::TICK);
                }
            }
            Err(e) => {
                log::warn!("metrics: accept failed: {e}");
                thread::sleep(crate::conn::TICK);
            }
        }
    }
}

/// One HTTP request, one answer, then the connection closes. A scraper that does not send
/// its whole request within a second gets nothing (one thread serves them all, so the second
/// bounds the request, not each read: a byte at a time would otherwise hold it for hours).
fn answer(t: &Target, up: &Up, mut s: TcpStream) -> io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    let end = std::time::Instant::now() + Duration::from_secs(1);
    let mut req = Vec::new();
    let mut buf = [0u8; 1024];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 16 << 10 {
        let left = end.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no whole request within 1 s",
            ));
        }
        s.set_read_timeout(Some(left))?;
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        req.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&req);
    let mut first = text.lines().next().unwrap_or("").split(' ');
    let (method, path) = (first.next().unwrap_or(""), first.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    if method != "GET" || !(path == "/metrics" || path == "/") {
        let body = "only GET /metrics here\n";
        return write!(
            s,
            "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
    }
    let openmetrics = text.lines().any(|l| {
        l.to_ascii_lowercase().starts_with("accept:")
            && l.to_ascii_lowercase()
                .contains("application/openmetrics-text")
    });
    crate::refresh_gauges(t);
    let om = render(&Sample::take(t, up));
    let (ctype, body) = if openmetrics {
        (
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            om,
        )
    } else {
        (
            "text/plain; version=0.0.4; charset=utf-8",
            to_prometheus_text(&om),
        )
    };
    write!(
        s,
        "HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    s.write_all(body.as_bytes())
}

/// Rewrites the textfile atomically (node_exporter may read it any time).
pub fn write_file(t: &Target, up: &Up, p: &Path) -> io::Result<()> {
    let text = to_prometheus_text(&render(&Sample::take(t, up)));
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".rdmadisk-metrics")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .tempfile_in(dir)?;
    tmp.write_all(text.as_bytes())?;
    tmp.persist(p).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Sample {
        let snap = Snapshot {
            requests: 5,
            writes: 3,
            bytes_written: 12288,
            errors: 1,
            ..Snapshot::default()
        };
        Sample {
            target: vec![("requests".into(), 9), ("connections_active".into(), 2)],
            exports: vec![("a".into(), snap, 2), ("b".into(), Snapshot::default(), 0)],
            clients: vec![
                (
                    "a".into(),
                    Some("192.0.2.1".parse().unwrap()),
                    Transport::Rdma,
                    snap,
                    2,
                ),
                ("a".into(), None, Transport::Tcp, snap, 0),
            ],
            up: (true, false),
        }
    }

    #[test]
    fn openmetrics_has_every_level_labelled() {
        let om = render(&sample());
        for line in [
            "# TYPE rdmadisk_target_requests counter",
            "rdmadisk_target_requests_total 9",
            "# TYPE rdmadisk_target_connections_active gauge",
            "rdmadisk_target_connections_active 2",
            "rdmadisk_target_transport_up{transport=\"rdma\"} 0",
            "rdmadisk_target_transport_up{transport=\"tcp\"} 1",
            "rdmadisk_target_export_bytes_written_total{export=\"a\"} 12288",
            "rdmadisk_target_export_requests_total{export=\"b\"} 0",
            "rdmadisk_target_export_connections{export=\"a\"} 2",
            "rdmadisk_target_client_errors_total{export=\"a\",client=\"192.0.2.1\",transport=\"rdma\"} 1",
            "rdmadisk_target_client_writes_total{export=\"a\",client=\"unknown\",transport=\"tcp\"} 3",
            "rdmadisk_target_transport_requests_total{transport=\"rdma\"} 5",
            "rdmadisk_target_transport_connections{transport=\"rdma\"} 2",
            "rdmadisk_target_transport_connections{transport=\"tcp\"} 0",
            "# EOF",
        ] {
            assert!(om.lines().any(|l| l == line), "{line:?} in\n{om}");
        }
    }

    #[test]
    fn the_prometheus_text_names_counters_by_their_samples() {
        let text = to_prometheus_text(&render(&sample()));
        assert!(!text.contains("# EOF"));
        assert!(text
            .lines()
            .any(|l| l == "# TYPE rdmadisk_target_export_requests_total counter"));
        assert!(text
            .lines()
            .any(|l| l == "# TYPE rdmadisk_target_connections_active gauge"));
        assert!(text
            .lines()
            .any(|l| l.starts_with("# HELP rdmadisk_target_requests_total ")));
        // Every sample belongs to the family TYPE names just before it.
        let mut family = String::new();
        for l in text.lines() {
            if let Some(rest) = l.strip_prefix("# TYPE ") {
                family = rest.split(' ').next().unwrap().to_string();
            } else if !l.starts_with('#') {
                let name = l.split(['{', ' ']).next().unwrap();
                assert_eq!(name, family, "{l}");
            }
        }
    }

    #[test]
    fn transports_up_are_described() {
        let up = Up::default();
        up.tcp.store(true, Ordering::Relaxed);
        assert_eq!(up.describe(true), "tcp (rdma: waiting for a device)");
        assert_eq!(up.describe(false), "tcp");
        up.rdma.store(true, Ordering::Relaxed);
        assert_eq!(up.describe(true), "tcp and rdma");
    }
}
