// SPDX-License-Identifier: GPL-2.0

//! `/sys/block/rdmadiskN/rdmadisk/`: what the disk is, how it is doing, and its knobs.
//!
//! Every knob is validated on write: bad input is `EINVAL` with a log line naming the knob
//! and its range, and leaves the value as it was.

use core::{fmt::Write, sync::atomic::Ordering};
use kernel::{c_str, prelude::*, sync::Arc};

use super::{DiskDev, State, FAST_IO_FAIL_OFF};
use crate::kapi::blk_mq::{DiskAttr, DiskAttrs};
use crate::kapi::sysfs::ShowBuf;
use crate::proto::policy::{
    Mode, PolicyConfig, State as PState, Transport, MAX_FAILOVER_THRESHOLD,
};
use crate::proto::wire::SECTOR_SIZE;
use crate::rdma_queue::{INLINE_CAP, QUEUE_DEPTH};

/// Parses a decimal knob value in `min..=max`; `EINVAL` with a log line otherwise.
/// A whole number in decimal digits, with surrounding whitespace (the newline `echo` adds) and
/// nothing else: `u32::from_str` alone would also take a sign ("+5").
fn parse_digits(input: &[u8]) -> Option<u32> {
    let digits = input.trim_ascii();
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    core::str::from_utf8(digits).ok()?.parse().ok()
}

fn parse_knob(who: &str, knob: &str, input: &[u8], min: u32, max: u32) -> Result<u32> {
    let v = parse_digits(input).filter(|v| (min..=max).contains(v));
    v.ok_or_else(|| {
        pr_err!("{who}: {knob}: expected a whole number from {min} to {max}\n");
        EINVAL
    })
}

fn show_value(out: &mut ShowBuf<'_>, v: impl core::fmt::Display) -> Result {
    writeln!(out, "{v}").map_err(|_| EFBIG)
}

impl DiskDev {
    fn show_name(&self, out: &mut ShowBuf<'_>) -> Result {
        show_value(out, self.name())
    }

    fn show_export(&self, out: &mut ShowBuf<'_>) -> Result {
        show_value(out, self.info.export)
    }

    fn show_address(&self, out: &mut ShowBuf<'_>) -> Result {
        show_value(out, self.info.peer)
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
        let ms = parse_knob(self.name(), "io_timeout_ms", input, 1_000, 600_000)?;
        if let Some(d) = self.disk.lock().as_ref() {
            d.set_timeout_ms(ms);
        }
        self.info.knobs.io_timeout_ms.store(ms, Ordering::Relaxed);
        Ok(())
    }

    fn show_loss_timeout(&self, out: &mut ShowBuf<'_>) -> Result {
        show_value(out, self.loss_timeout_s())
    }

    fn store_loss_timeout(self: &Arc<Self>, input: &[u8]) -> Result {
        let s = parse_knob(self.name(), "loss_timeout_s", input, 0, 86_400)?;
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
        let s = match input.trim_ascii() {
            b"off" => FAST_IO_FAIL_OFF,
            v => match parse_digits(v) {
                Some(s) if s <= 86_400 => s,
                _ => {
                    pr_err!(
                        "{}: fast_io_fail_s: expected 'off' or a whole number from 0 to 86400\n",
                        self.name()
                    );
                    return Err(EINVAL);
                }
            },
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
        let n = parse_knob(self.name(), "max_credits", input, 1, u32::from(QUEUE_DEPTH))?;
        self.info.knobs.max_credits.store(n, Ordering::Relaxed);
        Ok(())
    }

    fn show_inline_max(&self, out: &mut ShowBuf<'_>) -> Result {
        show_value(out, self.info.knobs.inline_max.load(Ordering::Relaxed))
    }

    fn store_inline_max(self: &Arc<Self>, input: &[u8]) -> Result {
        let n = parse_knob(self.name(), "inline_max", input, 0, INLINE_CAP)?;
        if n % SECTOR_SIZE != 0 {
            pr_err!(
                "{}: inline_max: must be a multiple of {SECTOR_SIZE}\n",
                self.name()
            );
            return Err(EINVAL);
        }
        self.info.knobs.inline_max.store(n, Ordering::Relaxed);
        Ok(())
    }

    fn show_keepalive(&self, out: &mut ShowBuf<'_>) -> Result {
        show_value(out, self.info.keepalive_ms())
    }

    fn store_keepalive(self: &Arc<Self>, input: &[u8]) -> Result {
        let ms = match parse_knob(self.name(), "keepalive_ms", input, 0, 600_000)? {
            ms @ (0 | 100..) => ms,
            _ => {
                pr_err!(
                    "{}: keepalive_ms: expected 0 (off) or 100 to 600000\n",
                    self.name()
                );
                return Err(EINVAL);
            }
        };
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
        let mode = match input.trim_ascii() {
            b"auto" => Mode::Auto,
            b"rdma" => Mode::Rdma,
            b"tcp" => Mode::Tcp,
            _ => {
                pr_err!("{}: transport: expected auto, rdma or tcp\n", self.name());
                return Err(EINVAL);
            }
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
        (min, max): (u32, u32),
        set: fn(&mut PolicyConfig, u32),
    ) -> Result {
        let v = parse_knob(self.name(), knob, input, min, max)?;
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
            (1, MAX_FAILOVER_THRESHOLD),
            |c, v| c.failover_threshold = v,
        )
    }

    fn show_failover_window(&self, out: &mut ShowBuf<'_>) -> Result {
        show_value(out, self.policy.lock().config().failover_window_ms)
    }

    fn store_failover_window(self: &Arc<Self>, input: &[u8]) -> Result {
        self.store_policy(input, "failover_window_ms", (1, 3_600_000), |c, v| {
            c.failover_window_ms = v.into()
        })
    }

    fn show_failback_probes(&self, out: &mut ShowBuf<'_>) -> Result {
        show_value(out, self.policy.lock().config().failback_probes)
    }

    fn store_failback_probes(self: &Arc<Self>, input: &[u8]) -> Result {
        self.store_policy(input, "failback_probes", (1, 1_000), |c, v| {
            c.failback_probes = v
        })
    }

    fn show_probe_interval(&self, out: &mut ShowBuf<'_>) -> Result {
        show_value(out, self.policy.lock().config().probe_interval_ms)
    }

    fn store_probe_interval(self: &Arc<Self>, input: &[u8]) -> Result {
        self.store_policy(input, "probe_interval_ms", (100, 600_000), |c, v| {
            c.probe_interval_ms = v.into()
        })
    }
}

static NAME: DiskAttr<DiskDev> = DiskAttr::ro(c_str!("name"), DiskDev::show_name);
static EXPORT: DiskAttr<DiskDev> = DiskAttr::ro(c_str!("export"), DiskDev::show_export);
static ADDRESS: DiskAttr<DiskDev> = DiskAttr::ro(c_str!("address"), DiskDev::show_address);
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
    &ADDRESS,
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
    &FAILOVER_THRESHOLD,
    &FAILOVER_WINDOW,
    &FAILBACK_PROBES,
    &PROBE_INTERVAL,
];
