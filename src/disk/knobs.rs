// SPDX-License-Identifier: GPL-2.0

//! `/sys/block/rdmadiskN/rdmadisk/`: what the disk is, how it is doing, and its knobs.
//!
//! Every knob is validated on write: bad input is `EINVAL` with a log line naming the knob
//! and its range, and leaves the value as it was.

use core::{fmt::Write, sync::atomic::Ordering};
use kernel::{c_str, prelude::*, sync::Arc};

use super::{DiskDev, State, FAST_IO_FAIL_OFF, LOSS_TIMEOUT_NEVER};
use crate::kapi::blk_mq::{DevAttr, DiskAttr, DiskAttrs};
use crate::kapi::sysfs::ShowBuf;
use crate::proto::knobs::{self, Setting, Values};
use crate::proto::policy::{Mode, PolicyConfig, State as PState, Transport};
use crate::telemetry::{Op, Via};

/// Checks a write to `knob` against its values (the shared table of
/// [`crate::proto::knobs`]); `EINVAL` with a log line naming them otherwise.
fn parse(who: &str, knob: &str, values: Values, input: &[u8]) -> Result<Setting> {
    values.parse(input).ok_or_else(|| {
        pr_err!("{who}: {knob}: expected {values}\n");
        EINVAL
    })
}

/// As [`parse`], for a knob that takes only numbers.
fn parse_number(who: &str, knob: &str, values: Values, input: &[u8]) -> Result<u32> {
    match parse(who, knob, values, input)? {
        Setting::Number(n) => Ok(n),
        Setting::Off | Setting::Never | Setting::Word(_) => Err(EINVAL),
    }
}

/// ` down_ms=N` after a path given up N ms ago; nothing for a negative N.
struct DownFor(i64);

impl core::fmt::Display for DownFor {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if self.0 >= 0 {
            write!(f, " down_ms={}", self.0)
        } else {
            Ok(())
        }
    }
}

fn show_value(out: &mut ShowBuf<'_>, v: impl core::fmt::Display) -> Result {
    writeln!(out, "{v}").map_err(|_| EFBIG)
}

/// A key as its sysfs file shows it: whether there is one, never the key.
fn set_or_none(k: &Option<crate::proto::auth::Secret>) -> &'static str {
    if k.is_some() {
        "set"
    } else {
        "none"
    }
}

impl DiskDev {
    fn show_name(&self, out: &mut ShowBuf<'_>) -> Result {
        show_value(out, self.name())
    }

    fn show_export(&self, out: &mut ShowBuf<'_>) -> Result {
        show_value(out, self.info.export)
    }

    /// The export's identity, as the target that the disk was mapped from sent it (a reconnect
    /// to another is refused: `check_reply`); `None` from a target that sends none.
    fn identity(&self) -> Option<crate::proto::wire::Identity> {
        match self.attach.lock().as_ref() {
            Some(Ok(a)) => a.reply.identity,
            _ => None,
        }
    }

    /// The export's serial; empty if the target sent no identity.
    fn show_serial(&self, out: &mut ShowBuf<'_>) -> Result {
        self.identity()
            .map_or(Ok(()), |id| show_value(out, id.serial))
    }

    /// The export's UUID; empty if the target sent no identity.
    fn show_uuid(&self, out: &mut ShowBuf<'_>) -> Result {
        self.identity()
            .map_or(Ok(()), |id| show_value(out, id.uuid))
    }

    /// `rdmadisk.<uuid>` (docs/design.md, "Identity"); empty if the target sent no identity.
    fn show_wwid(&self, out: &mut ShowBuf<'_>) -> Result {
        self.identity().map_or(Ok(()), |id| {
            show_value(out, format_args!("rdmadisk.{}", id.uuid))
        })
    }

    /// The active target's rdma_cm endpoint (`paths` lists them all).
    fn show_address(&self, out: &mut ShowBuf<'_>) -> Result {
        show_value(out, self.info.peer())
    }

    fn show_port(&self, out: &mut ShowBuf<'_>) -> Result {
        show_value(out, self.info.peer().port)
    }

    fn show_tcp_port(&self, out: &mut ShowBuf<'_>) -> Result {
        show_value(out, self.info.paths.addr(self.info.paths.active()).tcp_port)
    }

    /// One line per target, in the map's order: `INDEX ADDR:PORT tcp_port=N state=S
    /// transport=T inflight=N latency_us=N failures=N`. `state` is `active` (it carries the
    /// I/O), `connecting` (active, no set up yet), `down` (given up, not served since) or
    /// `standby`; `transport` is the active set's (`none` otherwise); `inflight` counts the
    /// requests on its connections now; `latency_us` is the moving average of its requests'
    /// round trips (0: none yet, or telemetry off). A failed or unmapping disk's active path is
    /// `failed`.
    fn show_paths(&self, out: &mut ShowBuf<'_>) -> Result {
        let active = self.info.paths.active();
        let disk_state = self.state();
        let transport = match disk_state {
            State::Live => self.installed(),
            _ => None,
        };
        let failed = matches!(disk_state, State::Failed | State::Deleting { .. });
        // Each connection's lock is taken apart from the disk's.
        let inflight: u32 = (0..u32::from(self.info.nr_queues))
            .filter_map(|hw| self.queue(hw))
            .map(|q| q.in_flight())
            .sum();
        let now = crate::host::now_ms();
        for (i, a) in self.info.paths.addrs().iter().enumerate() {
            let i = i as u8;
            let (failures, down_ms, lat_us) = self.info.paths.seen(i);
            let is_active = i == active;
            let state = match (is_active, transport.is_some(), down_ms) {
                (true, _, _) if failed => "failed",
                (true, true, _) => "active",
                (true, false, _) => "connecting",
                (false, _, d) if d != 0 => "down",
                _ => "standby",
            };
            let t = match transport.filter(|_| is_active) {
                Some(Transport::Rdma) => "rdma",
                Some(Transport::Tcp) => "tcp",
                None => "none",
            };
            writeln!(
                out,
                "{i} {} tcp_port={} state={state} transport={t} inflight={} latency_us={lat_us} failures={failures}{}",
                a.rdma,
                a.tcp_port,
                if is_active { inflight } else { 0 },
                if down_ms != 0 && !is_active {
                    DownFor(now - down_ms)
                } else {
                    DownFor(-1)
                }
            )
            .map_err(|_| EFBIG)?;
        }
        Ok(())
    }

    /// The index of the target new connection sets go to, and its address.
    fn show_active_path(&self, out: &mut ShowBuf<'_>) -> Result {
        let i = self.info.paths.active();
        writeln!(out, "{i} {}", self.info.paths.addr(i).rdma).map_err(|_| EFBIG)
    }

    fn show_path_policy(&self, out: &mut ShowBuf<'_>) -> Result {
        show_value(out, "failover")
    }

    fn store_path_policy(self: &Arc<Self>, input: &[u8]) -> Result {
        let word = input.trim_ascii();
        if word != b"failover"
            && knobs::PATH_POLICY_WORDS
                .iter()
                .any(|w| w.as_bytes() == word)
        {
            pr_err!(
                "{}: path_policy: only failover is supported: a read-write RBD image has one writer gateway at a time, and spreading I/O over several would move its lock back and forth\n",
                self.name()
            );
            return Err(EINVAL);
        }
        parse(self.name(), "path_policy", knobs::PATH_POLICY, input).map(|_| ())
    }

    fn show_path_failover(&self, out: &mut ShowBuf<'_>) -> Result {
        show_value(out, self.path_failover_ms())
    }

    fn store_path_failover(self: &Arc<Self>, input: &[u8]) -> Result {
        let ms = parse_number(
            self.name(),
            "path_failover_ms",
            knobs::PATH_FAILOVER_MS,
            input,
        )?;
        self.path_failover_ms.store(ms, Ordering::Relaxed);
        self.kick();
        Ok(())
    }

    /// The map's `queues=`: the interrupt-driven hardware queues.
    fn show_queues(&self, out: &mut ShowBuf<'_>) -> Result {
        show_value(out, self.info.nr_queues - self.info.nr_poll_queues)
    }

    fn show_poll_queues(&self, out: &mut ShowBuf<'_>) -> Result {
        show_value(out, self.info.nr_poll_queues)
    }

    fn show_ro(&self, out: &mut ShowBuf<'_>) -> Result {
        show_value(out, u8::from(self.info.read_only))
    }

    /// Whether the map gave a `secret=`; the secret itself is never shown.
    fn show_secret(&self, out: &mut ShowBuf<'_>) -> Result {
        show_value(out, set_or_none(&self.info.secret))
    }

    /// Whether the map gave a `target_secret=`; never shown either.
    fn show_target_secret(&self, out: &mut ShowBuf<'_>) -> Result {
        show_value(out, set_or_none(&self.info.target_secret))
    }

    /// The disk's session at the target (docs/design.md, "The fence invariant").
    fn show_session_id(&self, out: &mut ShowBuf<'_>) -> Result {
        show_value(out, self.info.session())
    }

    fn show_state(&self, out: &mut ShowBuf<'_>) -> Result {
        show_value(out, self.state_name())
    }

    fn show_stats(&self, out: &mut ShowBuf<'_>) -> Result {
        self.info.stats.show(out)
    }

    fn store_unmap(self: &Arc<Self>, input: &[u8]) -> Result {
        let force = match input.trim_ascii() {
            b"normal" => false,
            b"force" => true,
            _ => {
                pr_err!("{}: unmap: expected 'normal' or 'force'\n", self.name());
                return Err(EINVAL);
            }
        };
        self.delete(force)
    }

    fn show_io_timeout(&self, out: &mut ShowBuf<'_>) -> Result {
        show_value(out, self.io_timeout_ms())
    }

    fn store_io_timeout(self: &Arc<Self>, input: &[u8]) -> Result {
        let ms = parse_number(self.name(), "io_timeout_ms", knobs::IO_TIMEOUT_MS, input)?;
        // The knob first: a disk not set yet takes it from there in `set_disk`, under the
        // same lock.
        self.info.knobs.io_timeout_ms.store(ms, Ordering::Relaxed);
        if let Some(d) = self.disk.lock().as_ref() {
            d.set_timeout_ms(ms);
        }
        Ok(())
    }

    fn show_loss_timeout(&self, out: &mut ShowBuf<'_>) -> Result {
        match self.loss_timeout_s() {
            LOSS_TIMEOUT_NEVER => show_value(out, "never"),
            s => show_value(out, s),
        }
    }

    fn store_loss_timeout(self: &Arc<Self>, input: &[u8]) -> Result {
        let s = match parse(self.name(), "loss_timeout_s", knobs::LOSS_TIMEOUT_S, input)? {
            Setting::Number(s) => s,
            Setting::Never => LOSS_TIMEOUT_NEVER,
            Setting::Off | Setting::Word(_) => return Err(EINVAL),
        };
        self.loss_timeout_s.store(s, Ordering::Relaxed);
        // A nap until the old deadline ends now.
        self.kick();
        Ok(())
    }

    fn show_fast_io_fail(&self, out: &mut ShowBuf<'_>) -> Result {
        match self.fast_io_fail_s.load(Ordering::Relaxed) {
            FAST_IO_FAIL_OFF => show_value(out, "off"),
            s => show_value(out, s),
        }
    }

    fn store_fast_io_fail(self: &Arc<Self>, input: &[u8]) -> Result {
        let s = match parse(self.name(), "fast_io_fail_s", knobs::FAST_IO_FAIL_S, input)? {
            Setting::Number(s) => s,
            Setting::Off | Setting::Never | Setting::Word(_) => FAST_IO_FAIL_OFF,
        };
        self.fast_io_fail_s.store(s, Ordering::Relaxed);
        if s == FAST_IO_FAIL_OFF {
            // I/O waits again for the rest of this outage.
            self.ctrl.lock().fast_fail = false;
        }
        self.kick();
        Ok(())
    }

    fn show_max_credits(&self, out: &mut ShowBuf<'_>) -> Result {
        show_value(out, self.info.knobs.max_credits.load(Ordering::Relaxed))
    }

    fn store_max_credits(self: &Arc<Self>, input: &[u8]) -> Result {
        let n = parse_number(self.name(), "max_credits", knobs::MAX_CREDITS, input)?;
        self.info.knobs.max_credits.store(n, Ordering::Relaxed);
        Ok(())
    }

    fn show_inline_max(&self, out: &mut ShowBuf<'_>) -> Result {
        show_value(out, self.info.knobs.inline_max.load(Ordering::Relaxed))
    }

    fn store_inline_max(self: &Arc<Self>, input: &[u8]) -> Result {
        let n = parse_number(self.name(), "inline_max", knobs::INLINE_MAX, input)?;
        self.info.knobs.inline_max.store(n, Ordering::Relaxed);
        Ok(())
    }

    fn show_keepalive(&self, out: &mut ShowBuf<'_>) -> Result {
        show_value(out, self.info.keepalive_ms())
    }

    fn store_keepalive(self: &Arc<Self>, input: &[u8]) -> Result {
        let ms = parse_number(self.name(), "keepalive_ms", knobs::KEEPALIVE_MS, input)?;
        self.info.knobs.keepalive_ms.store(ms, Ordering::Relaxed);
        // The session work starts or stops its keepalive rounds.
        self.kick();
        Ok(())
    }

    fn show_transport(&self, out: &mut ShowBuf<'_>) -> Result {
        show_value(
            out,
            match self.policy.lock().mode() {
                Mode::Auto => "auto",
                Mode::Rdma => "rdma",
                Mode::Tcp => "tcp",
            },
        )
    }

    fn store_transport(self: &Arc<Self>, input: &[u8]) -> Result {
        // The words of knobs::TRANSPORT, in their order.
        let mode = match parse(self.name(), "transport", knobs::TRANSPORT, input)? {
            Setting::Word(0) => Mode::Auto,
            Setting::Word(1) => Mode::Rdma,
            Setting::Word(2) => Mode::Tcp,
            _ => return Err(EINVAL),
        };
        let _ = self
            .policy
            .lock()
            .set_mode(mode, crate::host::now_ms() as u64);
        self.kick();
        Ok(())
    }

    /// The transport I/O is issued on now, or `none` while there is no healthy connection.
    fn show_active_transport(&self, out: &mut ShowBuf<'_>) -> Result {
        let t = match self.state() {
            State::Live => self.installed(),
            _ => None,
        };
        show_value(
            out,
            match t {
                Some(Transport::Rdma) => "rdma",
                Some(Transport::Tcp) => "tcp",
                None => "none",
            },
        )
    }

    /// The last transport switch: `none`, or `to=T reason=R ago_ms=N`.
    fn show_last_switch(&self, out: &mut ShowBuf<'_>) -> Result {
        let last = self.ctrl.lock().last_switch;
        match last {
            None => show_value(out, "none"),
            Some((to, why, at_ms)) => writeln!(
                out,
                "to={} reason={} ago_ms={}",
                match to {
                    Transport::Rdma => "rdma",
                    Transport::Tcp => "tcp",
                },
                why.name(),
                crate::host::now_ms() - at_ms
            )
            .map_err(|_| EFBIG),
        }
    }

    fn show_session(&self, out: &mut ShowBuf<'_>) -> Result {
        show_value(
            out,
            match self.policy.lock().state() {
                PState::Rdma => "rdma",
                PState::Draining { to: Transport::Tcp } => "draining-to-tcp",
                PState::Draining {
                    to: Transport::Rdma,
                } => "draining-to-rdma",
                PState::Tcp => "tcp",
                PState::Probing => "probing",
            },
        )
    }

    /// Changes one field of the policy's configuration.
    fn store_policy(
        self: &Arc<Self>,
        input: &[u8],
        knob: &str,
        values: Values,
        set: fn(&mut PolicyConfig, u32),
    ) -> Result {
        let v = parse_number(self.name(), knob, values, input)?;
        let mut p = self.policy.lock();
        let mut cfg = p.config();
        set(&mut cfg, v);
        p.set_config(cfg).map_err(|e| {
            pr_err!("{}: {knob}: {e}\n", self.name());
            EINVAL
        })?;
        drop(p);
        self.kick();
        Ok(())
    }

    fn show_failover_threshold(&self, out: &mut ShowBuf<'_>) -> Result {
        show_value(out, self.policy.lock().config().failover_threshold)
    }

    fn store_failover_threshold(self: &Arc<Self>, input: &[u8]) -> Result {
        self.store_policy(
            input,
            "failover_threshold",
            knobs::FAILOVER_THRESHOLD,
            |c, v| c.failover_threshold = v,
        )
    }

    fn show_failover_window(&self, out: &mut ShowBuf<'_>) -> Result {
        show_value(out, self.policy.lock().config().failover_window_ms)
    }

    fn store_failover_window(self: &Arc<Self>, input: &[u8]) -> Result {
        self.store_policy(
            input,
            "failover_window_ms",
            knobs::FAILOVER_WINDOW_MS,
            |c, v| c.failover_window_ms = v.into(),
        )
    }

    fn show_failback_probes(&self, out: &mut ShowBuf<'_>) -> Result {
        show_value(out, self.policy.lock().config().failback_probes)
    }

    fn store_failback_probes(self: &Arc<Self>, input: &[u8]) -> Result {
        self.store_policy(input, "failback_probes", knobs::FAILBACK_PROBES, |c, v| {
            c.failback_probes = v
        })
    }

    fn show_probe_interval(&self, out: &mut ShowBuf<'_>) -> Result {
        show_value(out, self.policy.lock().config().probe_interval_ms)
    }

    fn store_probe_interval(self: &Arc<Self>, input: &[u8]) -> Result {
        self.store_policy(
            input,
            "probe_interval_ms",
            knobs::PROBE_INTERVAL_MS,
            |c, v| c.probe_interval_ms = v.into(),
        )
    }
}

impl DiskDev {
    fn show_telemetry(&self, out: &mut ShowBuf<'_>) -> Result {
        show_value(out, u8::from(self.info.telemetry.is_on()))
    }

    fn store_telemetry(self: &Arc<Self>, input: &[u8]) -> Result {
        let on = parse_number(self.name(), "telemetry", knobs::TELEMETRY, input)?;
        self.info.telemetry.set_on(on == 1);
        Ok(())
    }

    fn store_telemetry_reset(self: &Arc<Self>, input: &[u8]) -> Result {
        if input.trim_ascii() != b"1" {
            pr_err!(
                "{}: telemetry_reset: write 1 to zero the telemetry\n",
                self.name()
            );
            return Err(EINVAL);
        }
        self.info.telemetry.reset();
        Ok(())
    }
}

/// `telemetry_<transport>_<op>`: one read-only file per transport and operation.
macro_rules! telemetry_files {
    ($($attr:ident: $file:literal, $via:ident, $op:ident;)*) => {
        $(static $attr: DiskAttr<DiskDev> = DiskAttr::ro(c_str!($file), |d, out| {
            d.info.telemetry.show(Via::$via, Op::$op, out)
        });)*
    };
}

telemetry_files! {
    T_RDMA_READ: "telemetry_rdma_read", Rdma, Read;
    T_RDMA_WRITE: "telemetry_rdma_write", Rdma, Write;
    T_RDMA_FLUSH: "telemetry_rdma_flush", Rdma, Flush;
    T_RDMA_DISCARD: "telemetry_rdma_discard", Rdma, Discard;
    T_RDMA_WRITE_ZEROES: "telemetry_rdma_write_zeroes", Rdma, WriteZeroes;
    T_TCP_READ: "telemetry_tcp_read", Tcp, Read;
    T_TCP_WRITE: "telemetry_tcp_write", Tcp, Write;
    T_TCP_FLUSH: "telemetry_tcp_flush", Tcp, Flush;
    T_TCP_DISCARD: "telemetry_tcp_discard", Tcp, Discard;
    T_TCP_WRITE_ZEROES: "telemetry_tcp_write_zeroes", Tcp, WriteZeroes;
}

static PATHS: DiskAttr<DiskDev> = DiskAttr::ro(c_str!("paths"), DiskDev::show_paths);
static ACTIVE_PATH: DiskAttr<DiskDev> =
    DiskAttr::ro(c_str!("active_path"), DiskDev::show_active_path);
static PATH_POLICY: DiskAttr<DiskDev> = DiskAttr::rw(
    c_str!("path_policy"),
    DiskDev::show_path_policy,
    DiskDev::store_path_policy,
);
static PATH_FAILOVER: DiskAttr<DiskDev> = DiskAttr::rw(
    c_str!("path_failover_ms"),
    DiskDev::show_path_failover,
    DiskDev::store_path_failover,
);
static TELEMETRY: DiskAttr<DiskDev> = DiskAttr::rw(
    c_str!("telemetry"),
    DiskDev::show_telemetry,
    DiskDev::store_telemetry,
);
static TELEMETRY_RESET: DiskAttr<DiskDev> =
    DiskAttr::wo(c_str!("telemetry_reset"), DiskDev::store_telemetry_reset);

static NAME: DiskAttr<DiskDev> = DiskAttr::ro(c_str!("name"), DiskDev::show_name);
static SERIAL: DiskAttr<DiskDev> = DiskAttr::ro(c_str!("serial"), DiskDev::show_serial);
static UUID: DiskAttr<DiskDev> = DiskAttr::ro(c_str!("uuid"), DiskDev::show_uuid);
static WWID: DiskAttr<DiskDev> = DiskAttr::ro(c_str!("wwid"), DiskDev::show_wwid);
static DEV_SERIAL: DevAttr<DiskDev> = DevAttr::ro(c_str!("serial"), DiskDev::show_serial);
static DEV_UUID: DevAttr<DiskDev> = DevAttr::ro(c_str!("uuid"), DiskDev::show_uuid);
static DEV_WWID: DevAttr<DiskDev> = DevAttr::ro(c_str!("wwid"), DiskDev::show_wwid);

/// `/sys/block/rdmadiskN/{serial,uuid,wwid}`: the identity again, on the disk's device, where
/// it is before the add uevent, for udev (`userspace-tools/udev/60-rdmadisk.rules`).
pub(crate) static DEV_ATTRS: &[&DevAttr<DiskDev>] = &[&DEV_SERIAL, &DEV_UUID, &DEV_WWID];
static EXPORT: DiskAttr<DiskDev> = DiskAttr::ro(c_str!("export"), DiskDev::show_export);
static ADDRESS: DiskAttr<DiskDev> = DiskAttr::ro(c_str!("address"), DiskDev::show_address);
static PORT: DiskAttr<DiskDev> = DiskAttr::ro(c_str!("port"), DiskDev::show_port);
static TCP_PORT: DiskAttr<DiskDev> = DiskAttr::ro(c_str!("tcp_port"), DiskDev::show_tcp_port);
static QUEUES: DiskAttr<DiskDev> = DiskAttr::ro(c_str!("queues"), DiskDev::show_queues);
static POLL_QUEUES: DiskAttr<DiskDev> =
    DiskAttr::ro(c_str!("poll_queues"), DiskDev::show_poll_queues);
static RO: DiskAttr<DiskDev> = DiskAttr::ro(c_str!("ro"), DiskDev::show_ro);
static SECRET: DiskAttr<DiskDev> = DiskAttr::ro(c_str!("secret"), DiskDev::show_secret);
static TARGET_SECRET: DiskAttr<DiskDev> =
    DiskAttr::ro(c_str!("target_secret"), DiskDev::show_target_secret);
static SESSION_ID: DiskAttr<DiskDev> = DiskAttr::ro(c_str!("session_id"), DiskDev::show_session_id);
static STATE: DiskAttr<DiskDev> = DiskAttr::ro(c_str!("state"), DiskDev::show_state);
static STATS: DiskAttr<DiskDev> = DiskAttr::ro(c_str!("stats"), DiskDev::show_stats);
static UNMAP: DiskAttr<DiskDev> = DiskAttr::wo_self_remove(c_str!("unmap"), DiskDev::store_unmap);
static IO_TIMEOUT: DiskAttr<DiskDev> = DiskAttr::rw(
    c_str!("io_timeout_ms"),
    DiskDev::show_io_timeout,
    DiskDev::store_io_timeout,
);
static LOSS_TIMEOUT: DiskAttr<DiskDev> = DiskAttr::rw(
    c_str!("loss_timeout_s"),
    DiskDev::show_loss_timeout,
    DiskDev::store_loss_timeout,
);
static FAST_IO_FAIL: DiskAttr<DiskDev> = DiskAttr::rw(
    c_str!("fast_io_fail_s"),
    DiskDev::show_fast_io_fail,
    DiskDev::store_fast_io_fail,
);
static MAX_CREDITS: DiskAttr<DiskDev> = DiskAttr::rw(
    c_str!("max_credits"),
    DiskDev::show_max_credits,
    DiskDev::store_max_credits,
);
static INLINE_MAX: DiskAttr<DiskDev> = DiskAttr::rw(
    c_str!("inline_max"),
    DiskDev::show_inline_max,
    DiskDev::store_inline_max,
);
static KEEPALIVE: DiskAttr<DiskDev> = DiskAttr::rw(
    c_str!("keepalive_ms"),
    DiskDev::show_keepalive,
    DiskDev::store_keepalive,
);
static TRANSPORT: DiskAttr<DiskDev> = DiskAttr::rw(
    c_str!("transport"),
    DiskDev::show_transport,
    DiskDev::store_transport,
);
static ACTIVE_TRANSPORT: DiskAttr<DiskDev> =
    DiskAttr::ro(c_str!("active_transport"), DiskDev::show_active_transport);
static SESSION: DiskAttr<DiskDev> = DiskAttr::ro(c_str!("session"), DiskDev::show_session);
static LAST_SWITCH: DiskAttr<DiskDev> =
    DiskAttr::ro(c_str!("last_switch"), DiskDev::show_last_switch);
static FAILOVER_THRESHOLD: DiskAttr<DiskDev> = DiskAttr::rw(
    c_str!("failover_threshold"),
    DiskDev::show_failover_threshold,
    DiskDev::store_failover_threshold,
);
static FAILOVER_WINDOW: DiskAttr<DiskDev> = DiskAttr::rw(
    c_str!("failover_window_ms"),
    DiskDev::show_failover_window,
    DiskDev::store_failover_window,
);
static FAILBACK_PROBES: DiskAttr<DiskDev> = DiskAttr::rw(
    c_str!("failback_probes"),
    DiskDev::show_failback_probes,
    DiskDev::store_failback_probes,
);
static PROBE_INTERVAL: DiskAttr<DiskDev> = DiskAttr::rw(
    c_str!("probe_interval_ms"),
    DiskDev::show_probe_interval,
    DiskDev::store_probe_interval,
);

/// `/sys/block/rdmadiskN/rdmadisk/`.
pub(crate) static ATTRS: &DiskAttrs<DiskDev> = &[
    &NAME,
    &EXPORT,
    &SERIAL,
    &UUID,
    &WWID,
    &ADDRESS,
    &PORT,
    &TCP_PORT,
    &QUEUES,
    &POLL_QUEUES,
    &RO,
    &SECRET,
    &TARGET_SECRET,
    &SESSION_ID,
    &STATE,
    &STATS,
    &UNMAP,
    &IO_TIMEOUT,
    &LOSS_TIMEOUT,
    &FAST_IO_FAIL,
    &MAX_CREDITS,
    &INLINE_MAX,
    &KEEPALIVE,
    &TRANSPORT,
    &ACTIVE_TRANSPORT,
    &SESSION,
    &LAST_SWITCH,
    &FAILOVER_THRESHOLD,
    &FAILOVER_WINDOW,
    &FAILBACK_PROBES,
    &PROBE_INTERVAL,
    &PATHS,
    &ACTIVE_PATH,
    &PATH_POLICY,
    &PATH_FAILOVER,
    &TELEMETRY,
    &TELEMETRY_RESET,
    &T_RDMA_READ,
    &T_RDMA_WRITE,
    &T_RDMA_FLUSH,
    &T_RDMA_DISCARD,
    &T_RDMA_WRITE_ZEROES,
    &T_TCP_READ,
    &T_TCP_WRITE,
    &T_TCP_FLUSH,
    &T_TCP_DISCARD,
    &T_TCP_WRITE_ZEROES,
];
