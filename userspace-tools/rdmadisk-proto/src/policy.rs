//! Per-device transport policy: when to leave RDMA for TCP and when to come
//! back, after Pangu's hysteresis (switch after F failures within a window,
//! return after S consecutive successful probes).
//!
//! The policy is a pure state machine with an injected clock (`now_ms`, any
//! monotonic millisecond count). It performs nothing itself: each event
//! returns an [`Action`] for the driver to carry out, and the driver reports
//! back (`on_drained`, `on_probe_result`).
//!
//! ```text
//!   Rdma --(F failures in window | device removed | mode Tcp)--> Draining{to: Tcp}
//!   Draining{to: Tcp} --on_drained--> Probing (RDMA device present, mode not Tcp)
//!                                  \-> Tcp     (otherwise)
//!   Probing --(S probe successes | device added | mode Rdma)--> Draining{to: Rdma}
//!   Tcp     --(device added | mode Rdma, device present)------> Draining{to: Rdma}
//!   Draining{to: Rdma} --on_drained--> Rdma
//!   Draining{to: Rdma} --(RDMA failure | device removed | mode Tcp)--> Tcp/Probing (UseTcp)
//!   Rdma --fallback(Tcp)--> Draining{to: Tcp}
//!   Tcp | Probing | Draining{to: Tcp} --fallback(Rdma)--> Draining{to: Rdma}
//! ```
//!
//! The fallback edges are for a device with no connection at all: when the
//! transport the policy wants cannot be reconnected, the driver may try the
//! other one at once (mode `Auto`), so that an outage passes on whichever
//! transport comes back first ([`Policy::on_fallback`]).
//!
//! Mode rules (the sysfs `transport` knob):
//! - `Auto`: the machine above.
//! - `Tcp`: pinned to TCP; no probes, device events only tracked.
//! - `Rdma`: RDMA whenever there is an RDMA device. Failures never fail
//!   over (the driver reconnects RDMA instead), but removal of the device
//!   still moves I/O to TCP, because a pinned mode must never turn into I/O
//!   errors. On TCP, pinned `Rdma` returns at once when the device comes
//!   back, or after a single successful probe.

use core::fmt;

/// Most failures the failover threshold may require; bounds the history the
/// policy keeps without allocating.
pub const MAX_FAILOVER_THRESHOLD: u32 = 32;

/// Whether a disk that lost its connections `elapsed_ms` ago has run out of its loss timeout
/// of `loss_ms` (`None`: never). A timeout of 0 has run out at the loss itself, so that the
/// disk fails rather than reconnects however soon after the loss this is asked.
pub fn loss_expired(loss_ms: Option<i64>, elapsed_ms: i64) -> bool {
    loss_ms.is_some_and(|loss| elapsed_ms >= loss)
}

/// Tunables (sysfs attributes of the device).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyConfig {
    /// F: RDMA failures within the window that cause failover,
    /// `1..=MAX_FAILOVER_THRESHOLD`.
    pub failover_threshold: u32,
    /// Window in which failures are counted, in ms, > 0.
    pub failover_window_ms: u64,
    /// S: consecutive successful probes needed to fail back, >= 1.
    pub failback_probes: u32,
    /// T: interval between probes, in ms, > 0. A probe asked for and not reported within T
    /// counts as failed ([`Policy::on_tick`]); the kernel driver reports every probe itself,
    /// each bounded by T clamped to 5..10 s.
    pub probe_interval_ms: u64,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            failover_threshold: 3,
            failover_window_ms: 10_000,
            failback_probes: 3,
            probe_interval_ms: 1_000,
        }
    }
}

/// Which [`PolicyConfig`] field is out of range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyError {
    /// `failover_threshold` is 0 or above [`MAX_FAILOVER_THRESHOLD`].
    FailoverThreshold,
    /// `failover_window_ms` is 0.
    FailoverWindow,
    /// `failback_probes` is 0.
    FailbackProbes,
    /// `probe_interval_ms` is 0.
    ProbeInterval,
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PolicyError::FailoverThreshold => "failover_threshold must be 1..=32",
            PolicyError::FailoverWindow => "failover_window_ms must be > 0",
            PolicyError::FailbackProbes => "failback_probes must be > 0",
            PolicyError::ProbeInterval => "probe_interval_ms must be > 0",
        })
    }
}

impl PolicyConfig {
    /// Checks every field's range.
    pub fn validate(&self) -> Result<(), PolicyError> {
        if self.failover_threshold == 0 || self.failover_threshold > MAX_FAILOVER_THRESHOLD {
            return Err(PolicyError::FailoverThreshold);
        }
        if self.failover_window_ms == 0 {
            return Err(PolicyError::FailoverWindow);
        }
        if self.failback_probes == 0 {
            return Err(PolicyError::FailbackProbes);
        }
        if self.probe_interval_ms == 0 {
            return Err(PolicyError::ProbeInterval);
        }
        Ok(())
    }

    /// The nearest valid configuration: every field clamped into range.
    pub fn clamped(&self) -> PolicyConfig {
        PolicyConfig {
            failover_threshold: self.failover_threshold.clamp(1, MAX_FAILOVER_THRESHOLD),
            failover_window_ms: self.failover_window_ms.max(1),
            failback_probes: self.failback_probes.max(1),
            probe_interval_ms: self.probe_interval_ms.max(1),
        }
    }
}

/// The sysfs `transport` knob.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Fail over and back automatically.
    Auto,
    /// Use RDMA whenever an RDMA device exists (see the module rules).
    Rdma,
    /// Use TCP only.
    Tcp,
}

/// A transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// RDMA (RoCEv2 RC queue pairs).
    Rdma,
    /// Kernel TCP sockets.
    Tcp,
}

/// Where the device's I/O goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// I/O runs on RDMA.
    Rdma,
    /// Switching: the driver connects the new transport while the old one, if it
    /// still has connections, goes on carrying I/O; then it puts the new
    /// connections in place, tears the old ones down, reissues their requests
    /// on the new transport, and calls `on_drained`.
    Draining {
        /// The transport being switched to.
        to: Transport,
    },
    /// I/O runs on TCP and RDMA is not probed (no device, or mode `Tcp`).
    Tcp,
    /// I/O runs on TCP and RDMA is probed every `probe_interval_ms`.
    Probing,
}

impl State {
    /// Whether one policy step may move from `self` to `next` (staying put included): the
    /// graph `RDMA -> DRAINING -> TCP <-> PROBING -> DRAINING -> RDMA`, where a drain back to
    /// RDMA may be abandoned. The tests and the fuzzer check every step against it.
    pub fn may_move_to(self, next: State) -> bool {
        use State::*;
        self == next
            || matches!(
                (self, next),
                (Rdma, Draining { to: Transport::Tcp })
                    | (Draining { to: Transport::Tcp }, Tcp | Probing)
                    | (Tcp, Probing)
                    | (Probing, Tcp)
                    | (
                        Tcp | Probing,
                        Draining {
                            to: Transport::Rdma
                        }
                    )
                    | (
                        Draining {
                            to: Transport::Rdma
                        },
                        Rdma | Tcp | Probing
                    )
                    | (
                        Draining { to: Transport::Tcp },
                        Draining {
                            to: Transport::Rdma
                        }
                    )
            )
    }

    /// The transport the policy has settled on, or `None` while draining. (The
    /// kernel driver does not stop I/O for a drain: it issues it on whatever
    /// connections are installed until the new ones replace them.)
    pub fn transport(self) -> Option<Transport> {
        match self {
            State::Rdma => Some(Transport::Rdma),
            State::Tcp | State::Probing => Some(Transport::Tcp),
            State::Draining { .. } => None,
        }
    }
}

/// What the driver must do after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing.
    None,
    /// Connect TCP, put it in RDMA's place, tear the RDMA connections down
    /// (their requests are reissued on TCP), then call `on_drained`.
    DrainToTcp,
    /// Connect RDMA while TCP carries I/O, put it in TCP's place, tear the
    /// TCP connections down (their requests are reissued on RDMA), then call
    /// `on_drained` (or `on_rdma_failure` if RDMA cannot be brought up).
    DrainToRdma,
    /// Drain finished: I/O runs on TCP.
    UseTcp,
    /// Drain finished: I/O runs on RDMA.
    UseRdma,
    /// Probe RDMA (connect and NOP) and report with `on_probe_result`
    /// within `probe_interval_ms`. Any earlier probe is abandoned.
    SendProbe,
}

/// Why a drain (a transport switch) was started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SwitchReason {
    /// `failover_threshold` RDMA failures within the window.
    RdmaFailures,
    /// The RDMA device was removed (NIC servicing).
    DeviceRemoved,
    /// An RDMA device came back.
    DeviceAdded,
    /// `failback_probes` RDMA probes in a row succeeded.
    Probes,
    /// The `transport` knob.
    Manual,
    /// The driver could not reconnect on the transport in use, and tried the other
    /// ([`Policy::on_fallback`]).
    NoConnection,
}

impl SwitchReason {
    /// Every reason, in the order of [`SwitchReason::index`].
    pub const ALL: [SwitchReason; 6] = [
        SwitchReason::RdmaFailures,
        SwitchReason::DeviceRemoved,
        SwitchReason::DeviceAdded,
        SwitchReason::Probes,
        SwitchReason::Manual,
        SwitchReason::NoConnection,
    ];

    /// A position in [`SwitchReason::ALL`], for per-reason counters.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The reason's name in logs and counters.
    pub fn name(self) -> &'static str {
        match self {
            SwitchReason::RdmaFailures => "rdma_failures",
            SwitchReason::DeviceRemoved => "device_removed",
            SwitchReason::DeviceAdded => "device_added",
            SwitchReason::Probes => "probes",
            SwitchReason::Manual => "manual",
            SwitchReason::NoConnection => "no_connection",
        }
    }
}

/// The failover/failback state machine of one device.
#[derive(Debug, Clone)]
pub struct Policy {
    cfg: PolicyConfig,
    mode: Mode,
    state: State,
    device_present: bool,
    // Ring of the most recent failure times; only the newest
    // `failover_threshold` matter.
    failures: [u64; MAX_FAILOVER_THRESHOLD as usize],
    failure_count: u32,
    failure_next: usize,
    probe_successes: u32,
    probe_outstanding: bool,
    probe_sent_ms: u64,
    next_probe_ms: u64,
    /// Why the drain in progress, or the last one, was started.
    drain_reason: Option<SwitchReason>,
}

impl Policy {
    /// A policy on RDMA with an RDMA device present, in mode `Auto`. An
    /// invalid `cfg` is clamped into range (see [`PolicyConfig::clamped`]).
    pub fn new(cfg: PolicyConfig, now_ms: u64) -> Policy {
        let _ = now_ms;
        Policy {
            cfg: cfg.clamped(),
            mode: Mode::Auto,
            state: State::Rdma,
            device_present: true,
            failures: [0; MAX_FAILOVER_THRESHOLD as usize],
            failure_count: 0,
            failure_next: 0,
            probe_successes: 0,
            probe_outstanding: false,
            probe_sent_ms: 0,
            next_probe_ms: 0,
            drain_reason: None,
        }
    }

    /// A policy that starts on TCP, e.g. when no RDMA device exists at
    /// attach time. With a device present it probes, first after one
    /// interval.
    pub fn new_on_tcp(cfg: PolicyConfig, rdma_device_present: bool, now_ms: u64) -> Policy {
        let mut p = Policy::new(cfg, now_ms);
        p.device_present = rdma_device_present;
        p.enter_tcp(now_ms);
        p
    }

    /// Current state.
    pub fn state(&self) -> State {
        self.state
    }

    /// Why the drain in progress was started, or the last one (`None`: there was none). Read
    /// after [`Action::UseTcp`] or [`Action::UseRdma`] from [`Policy::on_drained`], it is why
    /// the switch that just ended happened.
    pub fn drain_reason(&self) -> Option<SwitchReason> {
        self.drain_reason
    }

    /// Current mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Current configuration.
    pub fn config(&self) -> PolicyConfig {
        self.cfg
    }

    /// Whether the policy believes an RDMA device is present.
    pub fn device_present(&self) -> bool {
        self.device_present
    }

    /// Consecutive successful probes so far.
    pub fn probe_successes(&self) -> u32 {
        self.probe_successes
    }

    /// Replaces the configuration; takes effect from the next event.
    pub fn set_config(&mut self, cfg: PolicyConfig) -> Result<(), PolicyError> {
        cfg.validate()?;
        self.cfg = cfg;
        Ok(())
    }

    /// An RDMA fault: QP fatal error, CM disconnect, I/O timeout, failed
    /// keepalive. On RDMA in mode `Auto`, fails over once
    /// `failover_threshold` failures fall within `failover_window_ms`;
    /// failures older than the window do not count. While draining to RDMA
    /// it aborts the failback. During probing it counts as a failed probe.
    pub fn on_rdma_failure(&mut self, now_ms: u64) -> Action {
        match self.state {
            State::Rdma => {
                self.record_failure(now_ms);
                if self.mode == Mode::Auto
                    && self.failures_in_window(now_ms) >= self.cfg.failover_threshold
                {
                    self.start_drain(Transport::Tcp, SwitchReason::RdmaFailures)
                } else {
                    Action::None
                }
            }
            State::Draining {
                to: Transport::Rdma,
            } => {
                self.enter_tcp(now_ms);
                Action::UseTcp
            }
            State::Probing => {
                self.probe_successes = 0;
                Action::None
            }
            State::Draining { to: Transport::Tcp } | State::Tcp => Action::None,
        }
    }

    /// The RDMA device went away (`ib_client.remove`); `last`: no other RDMA
    /// device is left. I/O leaves RDMA in every mode, so no I/O error
    /// reaches the filesystem. With other devices left, RDMA may still be
    /// in reach through one of them: probing and a failback in progress go
    /// on (a connection on the removed device fails, and counts as an RDMA
    /// failure); only the last device's removal stops them.
    pub fn on_device_removed(&mut self, last: bool, now_ms: u64) -> Action {
        if last {
            self.device_present = false;
        }
        match self.state {
            State::Rdma => self.start_drain(Transport::Tcp, SwitchReason::DeviceRemoved),
            State::Draining {
                to: Transport::Rdma,
            } if last => {
                self.enter_tcp(now_ms);
                Action::UseTcp
            }
            State::Probing if last => {
                self.enter_tcp(now_ms);
                Action::None
            }
            State::Draining { .. } | State::Probing | State::Tcp => Action::None,
        }
    }

    /// An RDMA device appeared (`ib_client.add`). On TCP, unless pinned to
    /// TCP, fails back at once: a returning device is the end of NIC
    /// servicing, the usual reason for having left.
    pub fn on_device_added(&mut self, now_ms: u64) -> Action {
        let _ = now_ms;
        self.device_present = true;
        match self.state {
            State::Tcp | State::Probing if self.mode != Mode::Tcp => {
                self.start_drain(Transport::Rdma, SwitchReason::DeviceAdded)
            }
            _ => Action::None,
        }
    }

    /// The driver finished the drain it was asked for.
    pub fn on_drained(&mut self, now_ms: u64) -> Action {
        match self.state {
            State::Draining { to: Transport::Tcp } => {
                self.enter_tcp(now_ms);
                Action::UseTcp
            }
            State::Draining {
                to: Transport::Rdma,
            } => {
                self.state = State::Rdma;
                self.clear_failures();
                Action::UseRdma
            }
            // A stale report (the drain was aborted); nothing to do.
            State::Rdma | State::Tcp | State::Probing => Action::None,
        }
    }

    /// The driver has no connection, could not re-establish one on the
    /// transport this policy wants, and asks to try `t` instead. In mode
    /// `Auto` (and, for RDMA, with a device present) the policy starts a drain
    /// to `t`: the driver reports `on_drained` once `t` is connected, or, for
    /// RDMA, `on_rdma_failure` if it is not. Pinned modes keep their transport.
    pub fn on_fallback(&mut self, t: Transport, now_ms: u64) -> Action {
        let _ = now_ms;
        if self.mode != Mode::Auto {
            return Action::None;
        }
        match (t, self.state) {
            (Transport::Tcp, State::Rdma) => {
                self.start_drain(Transport::Tcp, SwitchReason::NoConnection)
            }
            (
                Transport::Rdma,
                State::Tcp | State::Probing | State::Draining { to: Transport::Tcp },
            ) if self.device_present => {
                self.start_drain(Transport::Rdma, SwitchReason::NoConnection)
            }
            _ => Action::None,
        }
    }

    /// Periodic timer. While probing, asks for a probe every
    /// `probe_interval_ms`; a probe unanswered for that long counts as failed.
    pub fn on_tick(&mut self, now_ms: u64) -> Action {
        if self.state != State::Probing {
            return Action::None;
        }
        if self.probe_outstanding {
            if now_ms.saturating_sub(self.probe_sent_ms) < self.cfg.probe_interval_ms {
                return Action::None;
            }
            self.probe_successes = 0;
        } else if now_ms < self.next_probe_ms {
            return Action::None;
        }
        self.probe_outstanding = true;
        self.probe_sent_ms = now_ms;
        self.next_probe_ms = now_ms.saturating_add(self.cfg.probe_interval_ms);
        Action::SendProbe
    }

    /// Result of the probe last asked for. `failback_probes` consecutive
    /// successes fail back (one suffices in mode `Rdma`); a failure resets
    /// the count. Results nobody is waiting for are ignored.
    pub fn on_probe_result(&mut self, ok: bool, now_ms: u64) -> Action {
        let _ = now_ms;
        if self.state != State::Probing || !self.probe_outstanding {
            return Action::None;
        }
        self.probe_outstanding = false;
        if !ok {
            self.probe_successes = 0;
            return Action::None;
        }
        self.probe_successes = self.probe_successes.saturating_add(1);
        let needed = match self.mode {
            Mode::Rdma => 1,
            Mode::Auto | Mode::Tcp => self.cfg.failback_probes,
        };
        if self.probe_successes >= needed {
            self.start_drain(Transport::Rdma, SwitchReason::Probes)
        } else {
            Action::None
        }
    }

    /// Sets the sysfs `transport` knob.
    /// The disk moved to another target (several gateways): the failures the lost one caused
    /// say nothing of RDMA to the new one. The failure window is cleared, and a switch to TCP
    /// that they made (no connection, or RDMA failures; mode `Auto`, a device present), drained
    /// or draining, is undone, so the new target is tried on RDMA first (and TCP at once if
    /// that fails). A switch for any other reason (the device went, a manual switch) stays.
    pub fn on_new_target(&mut self, now_ms: u64) {
        let _ = now_ms;
        self.failures = [0; MAX_FAILOVER_THRESHOLD as usize];
        self.failure_count = 0;
        self.failure_next = 0;
        let dropped = matches!(
            self.drain_reason,
            Some(SwitchReason::NoConnection | SwitchReason::RdmaFailures)
        );
        let on_tcp = matches!(
            self.state,
            State::Draining { to: Transport::Tcp } | State::Tcp | State::Probing
        );
        if self.mode == Mode::Auto && self.device_present && dropped && on_tcp {
            self.state = State::Rdma;
            self.drain_reason = None;
            self.probe_outstanding = false;
            self.probe_successes = 0;
        }
    }

    pub fn set_mode(&mut self, mode: Mode, now_ms: u64) -> Action {
        self.mode = mode;
        match (mode, self.state) {
            (Mode::Tcp, State::Rdma) => self.start_drain(Transport::Tcp, SwitchReason::Manual),
            (
                Mode::Tcp,
                State::Draining {
                    to: Transport::Rdma,
                },
            ) => {
                self.enter_tcp(now_ms);
                Action::UseTcp
            }
            (Mode::Tcp, State::Probing) => {
                self.enter_tcp(now_ms);
                Action::None
            }
            (Mode::Rdma, State::Tcp | State::Probing) if self.device_present => {
                self.start_drain(Transport::Rdma, SwitchReason::Manual)
            }
            (Mode::Auto, State::Tcp) if self.device_present => {
                self.enter_tcp(now_ms);
                Action::None
            }
            _ => Action::None,
        }
    }

    fn start_drain(&mut self, to: Transport, why: SwitchReason) -> Action {
        self.state = State::Draining { to };
        self.drain_reason = Some(why);
        self.probe_outstanding = false;
        self.probe_successes = 0;
        match to {
            Transport::Tcp => Action::DrainToTcp,
            Transport::Rdma => Action::DrainToRdma,
        }
    }

    /// Settles on TCP, probing if RDMA could be used; the first probe comes
    /// one interval later, since whatever broke RDMA rarely heals at once.
    fn enter_tcp(&mut self, now_ms: u64) {
        self.probe_outstanding = false;
        self.probe_successes = 0;
        self.next_probe_ms = now_ms.saturating_add(self.cfg.probe_interval_ms);
        self.state = if self.device_present && self.mode != Mode::Tcp {
            State::Probing
        } else {
            State::Tcp
        };
    }

    fn record_failure(&mut self, now_ms: u64) {
        if let Some(slot) = self.failures.get_mut(self.failure_next) {
            *slot = now_ms;
        }
        self.failure_next = self.failure_next.wrapping_add(1) % self.failures.len();
        self.failure_count = self
            .failure_count
            .saturating_add(1)
            .min(MAX_FAILOVER_THRESHOLD);
    }

    fn failures_in_window(&self, now_ms: u64) -> u32 {
        // A timestamp from the future (clock stepped back) counts as recent.
        // Counted by hand: Iterator::count carries an overflow panic path.
        let mut recent = 0u32;
        for &t in self.failures.iter().take(self.failure_count as usize) {
            if now_ms.saturating_sub(t) < self.cfg.failover_window_ms {
                recent = recent.saturating_add(1);
            }
        }
        recent
    }

    fn clear_failures(&mut self) {
        self.failure_count = 0;
        self.failure_next = 0;
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_loss_timeout_runs_out_at_its_length_and_zero_at_the_loss() {
        assert!(loss_expired(Some(0), 0), "0: at the loss itself");
        assert!(!loss_expired(Some(15_000), 14_999));
        assert!(loss_expired(Some(15_000), 15_000));
        assert!(!loss_expired(None, i64::MAX), "never");
    }

    const DRAIN_TCP: State = State::Draining { to: Transport::Tcp };
    const DRAIN_RDMA: State = State::Draining {
        to: Transport::Rdma,
    };

    fn cfg() -> PolicyConfig {
        PolicyConfig::default()
    }

    #[test]
    fn a_new_target_forgets_the_lost_ones_failures() {
        // Failures of the lost target started a drain to TCP: dropped.
        let mut p = Policy::new(cfg(), 0);
        p.on_rdma_failure(0);
        p.on_rdma_failure(1);
        assert_eq!(p.on_fallback(Transport::Tcp, 2), Action::DrainToTcp);
        assert_eq!(p.state(), DRAIN_TCP);
        p.on_new_target(3);
        assert_eq!(p.state(), State::Rdma);
        // Drained to TCP already (and probing): back to RDMA too.
        let mut q = Policy::new(cfg(), 0);
        for t in 0..3 {
            q.on_rdma_failure(t);
        }
        assert_eq!(q.on_drained(5), Action::UseTcp);
        assert_eq!(q.state(), State::Probing);
        q.on_new_target(6);
        assert_eq!(q.state(), State::Rdma);
        // The window is empty again: two more failures do not reach the threshold of three.
        p.on_rdma_failure(4);
        p.on_rdma_failure(5);
        assert_eq!(p.state(), State::Rdma);
        // A drain because the device went stays: RDMA is out of reach on any target.
        let mut p = Policy::new(cfg(), 0);
        p.on_device_removed(true, 0);
        assert_eq!(p.state(), DRAIN_TCP);
        p.on_new_target(1);
        assert_eq!(p.state(), DRAIN_TCP);
        // So does a manual one, and a pinned mode.
        let mut p = Policy::new(cfg(), 0);
        p.set_mode(Mode::Tcp, 0);
        p.on_new_target(1);
        assert_eq!(p.state(), DRAIN_TCP);
    }

    #[test]
    fn every_switch_says_why() {
        // RDMA failures, then probes.
        let mut p = Policy::new(cfg(), 0);
        assert_eq!(p.drain_reason(), None);
        for t in 0..3 {
            p.on_rdma_failure(t);
        }
        assert_eq!(p.state(), DRAIN_TCP);
        assert_eq!(p.on_drained(10), Action::UseTcp);
        assert_eq!(p.drain_reason(), Some(SwitchReason::RdmaFailures));
        let mut now = 10;
        while p.state() == State::Probing {
            now += 1_000;
            if p.on_tick(now) == Action::SendProbe {
                p.on_probe_result(true, now);
            }
        }
        assert_eq!(p.state(), DRAIN_RDMA);
        assert_eq!(p.on_drained(now), Action::UseRdma);
        assert_eq!(p.drain_reason(), Some(SwitchReason::Probes));
        // The device, both ways.
        p.on_device_removed(true, now);
        assert_eq!(p.on_drained(now), Action::UseTcp);
        assert_eq!(p.drain_reason(), Some(SwitchReason::DeviceRemoved));
        p.on_device_added(now);
        assert_eq!(p.on_drained(now), Action::UseRdma);
        assert_eq!(p.drain_reason(), Some(SwitchReason::DeviceAdded));
        // The knob, both ways.
        p.set_mode(Mode::Tcp, now);
        assert_eq!(p.on_drained(now), Action::UseTcp);
        assert_eq!(p.drain_reason(), Some(SwitchReason::Manual));
        p.set_mode(Mode::Rdma, now);
        assert_eq!(p.on_drained(now), Action::UseRdma);
        assert_eq!(p.drain_reason(), Some(SwitchReason::Manual));
        // No connection on the transport in use.
        p.set_mode(Mode::Auto, now);
        assert_eq!(p.on_fallback(Transport::Tcp, now), Action::DrainToTcp);
        assert_eq!(p.on_drained(now), Action::UseTcp);
        assert_eq!(p.drain_reason(), Some(SwitchReason::NoConnection));
    }

    #[test]
    fn reasons_have_distinct_names_and_indexes() {
        for (i, r) in SwitchReason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
            for q in &SwitchReason::ALL[..i] {
                assert_ne!(q.name(), r.name());
            }
        }
    }

    #[test]
    fn fallback_tries_the_other_transport_in_auto_only() {
        let mut p = Policy::new(cfg(), 0);
        assert_eq!(
            p.on_fallback(Transport::Rdma, 1),
            Action::None,
            "already RDMA"
        );
        assert_eq!(p.on_fallback(Transport::Tcp, 1), Action::DrainToTcp);
        assert_eq!(p.state(), DRAIN_TCP);
        // TCP could not be reached either; RDMA is tried again.
        assert_eq!(p.on_fallback(Transport::Rdma, 2), Action::DrainToRdma);
        assert_eq!(p.state(), DRAIN_RDMA);
        // RDMA failed: back to TCP (probing), as an abandoned failback.
        assert_eq!(p.on_rdma_failure(3), Action::UseTcp);
        assert_eq!(p.state(), State::Probing);
        assert_eq!(p.on_fallback(Transport::Rdma, 4), Action::DrainToRdma);
        assert_eq!(p.on_drained(5), Action::UseRdma);
        assert_eq!(p.state(), State::Rdma);

        let mut pinned = Policy::new(cfg(), 0);
        pinned.set_mode(Mode::Rdma, 0);
        assert_eq!(pinned.on_fallback(Transport::Tcp, 1), Action::None);
        assert_eq!(pinned.state(), State::Rdma);
        let mut no_dev = Policy::new_on_tcp(cfg(), false, 0);
        assert_eq!(no_dev.on_fallback(Transport::Rdma, 1), Action::None);
        assert_eq!(no_dev.state(), State::Tcp);
    }

    /// A policy that failed over for faults and sits in Probing at `t`.
    fn probing_at(t: u64) -> Policy {
        let mut p = Policy::new(cfg(), 0);
        for _ in 0..3 {
            p.on_rdma_failure(t);
        }
        assert_eq!(p.on_drained(t), Action::UseTcp);
        assert_eq!(p.state(), State::Probing);
        p
    }

    #[test]
    fn config_validation() {
        assert_eq!(cfg().validate(), Ok(()));
        let bad = |f: fn(&mut PolicyConfig)| {
            let mut c = cfg();
            f(&mut c);
            c.validate()
        };
        assert_eq!(
            bad(|c| c.failover_threshold = 0),
            Err(PolicyError::FailoverThreshold)
        );
        assert_eq!(
            bad(|c| c.failover_threshold = 33),
            Err(PolicyError::FailoverThreshold)
        );
        assert_eq!(
            bad(|c| c.failover_window_ms = 0),
            Err(PolicyError::FailoverWindow)
        );
        assert_eq!(
            bad(|c| c.failback_probes = 0),
            Err(PolicyError::FailbackProbes)
        );
        assert_eq!(
            bad(|c| c.probe_interval_ms = 0),
            Err(PolicyError::ProbeInterval)
        );
        let zero = PolicyConfig {
            failover_threshold: 0,
            failover_window_ms: 0,
            failback_probes: 0,
            probe_interval_ms: 0,
        };
        assert_eq!(zero.clamped().validate(), Ok(()));
        assert_eq!(Policy::new(zero, 0).config(), zero.clamped());
        let mut p = Policy::new(cfg(), 0);
        assert_eq!(p.set_config(zero), Err(PolicyError::FailoverThreshold));
        assert_eq!(p.config(), cfg());
        let one = PolicyConfig {
            failover_threshold: 1,
            ..cfg()
        };
        assert_eq!(p.set_config(one), Ok(()));
        assert_eq!(p.on_rdma_failure(5), Action::DrainToTcp);
        assert!(!std::format!("{}", PolicyError::ProbeInterval).is_empty());
    }

    #[test]
    fn failover_needs_threshold_failures_within_window() {
        let mut p = Policy::new(cfg(), 0);
        assert_eq!(p.state(), State::Rdma);
        assert_eq!(p.on_rdma_failure(1_000), Action::None);
        assert_eq!(p.on_rdma_failure(2_000), Action::None);
        assert_eq!(p.state(), State::Rdma);
        assert_eq!(p.on_rdma_failure(10_999), Action::DrainToTcp);
        assert_eq!(p.state(), DRAIN_TCP);
        assert_eq!(p.state().transport(), None);
    }

    #[test]
    fn failures_older_than_window_do_not_count() {
        let mut p = Policy::new(cfg(), 0);
        p.on_rdma_failure(0);
        p.on_rdma_failure(5_000);
        // The first failure is exactly one window old: expired.
        assert_eq!(p.on_rdma_failure(10_000), Action::None);
        assert_eq!(p.on_rdma_failure(14_999), Action::DrainToTcp);
        // Sparse failures forever never fail over.
        let mut p = Policy::new(cfg(), 0);
        for i in 0..100u64 {
            assert_eq!(p.on_rdma_failure(i * 5_001), Action::None);
        }
    }

    #[test]
    fn clock_going_backwards_is_harmless() {
        let mut p = Policy::new(cfg(), 0);
        p.on_rdma_failure(50_000);
        p.on_rdma_failure(10);
        assert_eq!(p.on_rdma_failure(20), Action::DrainToTcp);
    }

    #[test]
    fn drain_to_tcp_then_probe_then_failback() {
        let mut p = probing_at(100);
        assert_eq!(p.state().transport(), Some(Transport::Tcp));
        // First probe one interval after settling on TCP.
        assert_eq!(p.on_tick(500), Action::None);
        assert_eq!(p.on_tick(1_100), Action::SendProbe);
        assert_eq!(p.on_tick(1_200), Action::None, "one probe at a time");
        assert_eq!(p.on_probe_result(true, 1_150), Action::None);
        assert_eq!(p.probe_successes(), 1);
        assert_eq!(p.on_tick(1_500), Action::None, "not due yet");
        assert_eq!(p.on_tick(2_100), Action::SendProbe);
        assert_eq!(p.on_probe_result(true, 2_150), Action::None);
        assert_eq!(p.on_tick(3_100), Action::SendProbe);
        assert_eq!(p.on_probe_result(true, 3_150), Action::DrainToRdma);
        assert_eq!(p.state(), DRAIN_RDMA);
        assert_eq!(p.on_drained(3_200), Action::UseRdma);
        assert_eq!(p.state(), State::Rdma);
        // The failure history was cleared on return.
        assert_eq!(p.on_rdma_failure(3_300), Action::None);
    }

    #[test]
    fn probe_failure_resets_count() {
        let mut p = probing_at(0);
        assert_eq!(p.on_tick(1_000), Action::SendProbe);
        p.on_probe_result(true, 1_001);
        assert_eq!(p.on_tick(2_000), Action::SendProbe);
        p.on_probe_result(true, 2_001);
        assert_eq!(p.on_tick(3_000), Action::SendProbe);
        assert_eq!(p.on_probe_result(false, 3_001), Action::None);
        assert_eq!(p.probe_successes(), 0);
        for t in [4_000, 5_000] {
            assert_eq!(p.on_tick(t), Action::SendProbe);
            assert_eq!(p.on_probe_result(true, t + 1), Action::None);
        }
        assert_eq!(p.on_tick(6_000), Action::SendProbe);
        assert_eq!(p.on_probe_result(true, 6_001), Action::DrainToRdma);
    }

    #[test]
    fn probe_timeout_counts_as_failure_and_reprobes() {
        let mut p = probing_at(0);
        assert_eq!(p.on_tick(1_000), Action::SendProbe);
        p.on_probe_result(true, 1_001);
        assert_eq!(p.on_tick(2_000), Action::SendProbe);
        assert_eq!(p.on_tick(2_999), Action::None);
        assert_eq!(p.on_tick(3_000), Action::SendProbe);
        assert_eq!(p.probe_successes(), 0);
    }

    #[test]
    fn stray_probe_results_and_drains_are_ignored() {
        let mut p = Policy::new(cfg(), 0);
        assert_eq!(p.on_probe_result(true, 0), Action::None);
        assert_eq!(p.on_drained(0), Action::None);
        assert_eq!(p.on_tick(99_999), Action::None);
        let mut p = probing_at(0);
        assert_eq!(
            p.on_probe_result(true, 10),
            Action::None,
            "no probe asked for"
        );
        assert_eq!(p.probe_successes(), 0);
        assert_eq!(p.on_drained(10), Action::None);
        assert_eq!(p.state(), State::Probing);
    }

    #[test]
    fn rdma_failure_while_probing_resets_count() {
        let mut p = probing_at(0);
        p.on_tick(1_000);
        p.on_probe_result(true, 1_001);
        assert_eq!(p.on_rdma_failure(1_500), Action::None);
        assert_eq!(p.probe_successes(), 0);
        assert_eq!(p.state(), State::Probing);
    }

    #[test]
    fn failures_while_draining_to_tcp_or_on_tcp_are_ignored() {
        let mut p = Policy::new(cfg(), 0);
        for _ in 0..3 {
            p.on_rdma_failure(0);
        }
        assert_eq!(p.on_rdma_failure(1), Action::None);
        assert_eq!(p.state(), DRAIN_TCP);
        p.on_device_removed(true, 2);
        p.on_drained(3);
        assert_eq!(p.state(), State::Tcp);
        assert_eq!(p.on_rdma_failure(4), Action::None);
        assert_eq!(p.state(), State::Tcp);
    }

    #[test]
    fn failback_aborted_by_rdma_failure() {
        let mut p = probing_at(0);
        for t in [1_000, 2_000, 3_000] {
            p.on_tick(t);
            p.on_probe_result(true, t);
        }
        assert_eq!(p.state(), DRAIN_RDMA);
        assert_eq!(p.on_rdma_failure(3_100), Action::UseTcp);
        assert_eq!(p.state(), State::Probing);
        assert_eq!(p.on_tick(3_500), Action::None, "waits an interval");
        assert_eq!(p.on_tick(4_100), Action::SendProbe);
    }

    #[test]
    fn device_removal_on_rdma_drains_in_every_mode() {
        for mode in [Mode::Auto, Mode::Rdma] {
            let mut p = Policy::new(cfg(), 0);
            assert_eq!(p.set_mode(mode, 0), Action::None);
            assert_eq!(p.on_device_removed(true, 10), Action::DrainToTcp);
            assert!(!p.device_present());
            assert_eq!(p.on_device_removed(true, 11), Action::None);
            assert_eq!(p.on_drained(20), Action::UseTcp);
            assert_eq!(p.state(), State::Tcp, "no device, no probing");
            assert_eq!(p.on_tick(100_000), Action::None);
            assert_eq!(p.on_device_added(30), Action::DrainToRdma);
            assert_eq!(p.on_drained(40), Action::UseRdma);
        }
    }

    #[test]
    fn device_removal_while_probing_or_draining_to_rdma() {
        let mut p = probing_at(0);
        assert_eq!(p.on_tick(1_000), Action::SendProbe);
        assert_eq!(p.on_device_removed(true, 1_001), Action::None);
        assert_eq!(p.state(), State::Tcp);
        assert_eq!(
            p.on_probe_result(true, 1_002),
            Action::None,
            "probe abandoned"
        );

        let mut p = probing_at(0);
        p.on_device_added(5);
        assert_eq!(p.state(), DRAIN_RDMA);
        assert_eq!(p.on_device_removed(true, 6), Action::UseTcp);
        assert_eq!(p.state(), State::Tcp);
        assert_eq!(p.on_drained(7), Action::None, "stale drain report");
    }

    #[test]
    fn removing_one_of_several_devices_keeps_rdma_in_reach() {
        // On RDMA over the removed device: to TCP, then probing (another
        // device may reach the target).
        let mut p = Policy::new(cfg(), 0);
        assert_eq!(p.on_device_removed(false, 10), Action::DrainToTcp);
        assert!(p.device_present());
        assert_eq!(p.on_drained(20), Action::UseTcp);
        assert_eq!(p.state(), State::Probing);
        // Probing, or failing back: an unrelated device's removal changes
        // nothing.
        assert_eq!(p.on_device_removed(false, 30), Action::None);
        assert_eq!(p.state(), State::Probing);
        p.on_device_added(40);
        assert_eq!(p.state(), DRAIN_RDMA);
        assert_eq!(p.on_device_removed(false, 50), Action::None);
        assert_eq!(p.state(), DRAIN_RDMA);
        assert_eq!(p.on_drained(60), Action::UseRdma);
        // Then the last one goes: no probing without a device.
        assert_eq!(p.on_device_removed(true, 70), Action::DrainToTcp);
        assert_eq!(p.on_drained(80), Action::UseTcp);
        assert_eq!(p.state(), State::Tcp);
    }

    #[test]
    fn device_added_during_drain_to_tcp_then_probes() {
        let mut p = Policy::new(cfg(), 0);
        p.on_device_removed(true, 0);
        assert_eq!(p.on_device_added(1), Action::None);
        assert_eq!(p.state(), DRAIN_TCP);
        assert_eq!(p.on_drained(2), Action::UseTcp);
        assert_eq!(p.state(), State::Probing);
    }

    #[test]
    fn device_added_on_rdma_is_nothing() {
        let mut p = Policy::new(cfg(), 0);
        assert_eq!(p.on_device_added(0), Action::None);
        assert_eq!(p.state(), State::Rdma);
    }

    #[test]
    fn device_added_while_probing_fails_back_at_once() {
        let mut p = probing_at(0);
        assert_eq!(p.on_device_added(10), Action::DrainToRdma);
    }

    #[test]
    fn mode_tcp_pins_to_tcp() {
        let mut p = Policy::new(cfg(), 0);
        assert_eq!(p.set_mode(Mode::Tcp, 0), Action::DrainToTcp);
        assert_eq!(p.on_drained(1), Action::UseTcp);
        assert_eq!(p.state(), State::Tcp);
        assert_eq!(p.mode(), Mode::Tcp);
        assert_eq!(p.on_tick(100_000), Action::None);
        assert_eq!(p.on_device_removed(true, 2), Action::None);
        assert_eq!(p.on_device_added(3), Action::None);
        assert_eq!(p.state(), State::Tcp);
        // Back to Auto: probing resumes.
        assert_eq!(p.set_mode(Mode::Auto, 4), Action::None);
        assert_eq!(p.state(), State::Probing);
        assert_eq!(p.on_tick(1_004), Action::SendProbe);
    }

    #[test]
    fn mode_tcp_while_probing_or_draining() {
        let mut p = probing_at(0);
        p.on_tick(1_000);
        assert_eq!(p.set_mode(Mode::Tcp, 1_001), Action::None);
        assert_eq!(p.state(), State::Tcp);
        assert_eq!(p.on_probe_result(true, 1_002), Action::None);

        let mut p = probing_at(0);
        p.on_device_added(1);
        assert_eq!(p.set_mode(Mode::Tcp, 2), Action::UseTcp);
        assert_eq!(p.state(), State::Tcp);

        let mut p = Policy::new(cfg(), 0);
        p.on_device_removed(true, 0);
        assert_eq!(p.set_mode(Mode::Tcp, 1), Action::None);
        assert_eq!(p.state(), DRAIN_TCP);
        p.on_device_added(2);
        assert_eq!(p.on_drained(3), Action::UseTcp);
        assert_eq!(p.state(), State::Tcp, "pinned: no probing");
    }

    #[test]
    fn mode_rdma_never_fails_over_on_faults() {
        let mut p = Policy::new(cfg(), 0);
        p.set_mode(Mode::Rdma, 0);
        for t in 0..100 {
            assert_eq!(p.on_rdma_failure(t), Action::None);
        }
        assert_eq!(p.state(), State::Rdma);
        // Back to Auto: the next failure in the window fails over.
        p.set_mode(Mode::Auto, 100);
        assert_eq!(p.on_rdma_failure(101), Action::DrainToTcp);
    }

    #[test]
    fn mode_rdma_from_tcp() {
        let mut p = probing_at(0);
        assert_eq!(p.set_mode(Mode::Rdma, 1), Action::DrainToRdma);
        assert_eq!(p.on_drained(2), Action::UseRdma);

        // Without a device the rule is: stay on TCP, no I/O error.
        let mut p = Policy::new_on_tcp(cfg(), false, 0);
        assert_eq!(p.state(), State::Tcp);
        assert_eq!(p.set_mode(Mode::Rdma, 1), Action::None);
        assert_eq!(p.state(), State::Tcp);
        assert_eq!(p.on_device_added(2), Action::DrainToRdma);

        // A failed attempt falls back to TCP; one good probe brings RDMA back.
        assert_eq!(p.on_rdma_failure(3), Action::UseTcp);
        assert_eq!(p.state(), State::Probing);
        assert_eq!(p.on_tick(1_003), Action::SendProbe);
        assert_eq!(p.on_probe_result(true, 1_004), Action::DrainToRdma);
    }

    #[test]
    fn mode_rdma_while_draining_to_tcp_finishes_then_probes() {
        let mut p = Policy::new(cfg(), 0);
        for _ in 0..3 {
            p.on_rdma_failure(0);
        }
        assert_eq!(p.set_mode(Mode::Rdma, 1), Action::None);
        assert_eq!(p.on_drained(2), Action::UseTcp);
        assert_eq!(p.state(), State::Probing);
    }

    #[test]
    fn mode_auto_is_a_no_op_where_nothing_changes() {
        let mut p = Policy::new(cfg(), 0);
        assert_eq!(p.set_mode(Mode::Auto, 0), Action::None);
        assert_eq!(p.state(), State::Rdma);
        let mut p = Policy::new_on_tcp(cfg(), false, 0);
        p.set_mode(Mode::Tcp, 0);
        assert_eq!(p.set_mode(Mode::Auto, 1), Action::None);
        assert_eq!(p.state(), State::Tcp, "no device: nothing to probe");
    }

    #[test]
    fn new_on_tcp_with_device_probes() {
        let mut p = Policy::new_on_tcp(cfg(), true, 0);
        assert_eq!(p.state(), State::Probing);
        assert_eq!(p.on_tick(999), Action::None);
        assert_eq!(p.on_tick(1_000), Action::SendProbe);
    }

    #[test]
    fn tick_at_end_of_time_does_not_overflow() {
        let mut p = Policy::new_on_tcp(cfg(), true, u64::MAX - 10);
        assert_eq!(p.on_tick(u64::MAX), Action::SendProbe);
        assert_eq!(p.on_tick(u64::MAX), Action::None);
        p.on_probe_result(true, u64::MAX);
        assert_eq!(p.on_tick(u64::MAX), Action::SendProbe);
    }

    #[derive(Debug, Clone, Copy)]
    enum Ev {
        Failure,
        Removed(bool),
        Added,
        Drained,
        Tick,
        Probe(bool),
        SetMode(Mode),
        SetConfig(u32, u32),
        Fallback(Transport),
    }

    fn ev() -> impl Strategy<Value = (Ev, u64)> {
        let e = prop_oneof![
            4 => Just(Ev::Failure),
            1 => any::<bool>().prop_map(Ev::Removed),
            1 => Just(Ev::Added),
            3 => Just(Ev::Drained),
            4 => Just(Ev::Tick),
            3 => any::<bool>().prop_map(Ev::Probe),
            1 => prop_oneof![Just(Mode::Auto), Just(Mode::Rdma), Just(Mode::Tcp)].prop_map(Ev::SetMode),
            1 => (0u32..40, 0u32..5).prop_map(|(f, s)| Ev::SetConfig(f, s)),
            2 => prop_oneof![Just(Transport::Rdma), Just(Transport::Tcp)].prop_map(Ev::Fallback),
        ];
        (e, 0u64..3_000)
    }

    proptest! {
        #[test]
        fn random_events_keep_state_and_action_consistent(events in proptest::collection::vec(ev(), 0..300)) {
            let mut p = Policy::new(cfg(), 0);
            let mut now = 0u64;
            for (e, dt) in events {
                now += dt;
                let before = p.state();
                let action = match e {
                    Ev::Failure => p.on_rdma_failure(now),
                    Ev::Removed(last) => p.on_device_removed(last, now),
                    Ev::Added => p.on_device_added(now),
                    Ev::Drained => p.on_drained(now),
                    Ev::Tick => p.on_tick(now),
                    Ev::Probe(ok) => p.on_probe_result(ok, now),
                    Ev::SetMode(m) => p.set_mode(m, now),
                    Ev::Fallback(t) => p.on_fallback(t, now),
                    Ev::SetConfig(f, s) => {
                        let c = PolicyConfig { failover_threshold: f, failback_probes: s, ..cfg() };
                        prop_assert_eq!(p.set_config(c).is_ok(), c.validate().is_ok());
                        Action::None
                    }
                };
                let after = p.state();
                prop_assert!(before.may_move_to(after), "{:?} -> {:?} on {:?}", before, after, e);
                match action {
                    Action::None => prop_assert!(
                        before == after || matches!((before, after), (State::Tcp, State::Probing) | (State::Probing, State::Tcp)),
                        "silent change {:?} -> {:?}", before, after
                    ),
                    Action::DrainToTcp => prop_assert_eq!(after, DRAIN_TCP),
                    Action::DrainToRdma => prop_assert_eq!(after, DRAIN_RDMA),
                    Action::UseTcp => prop_assert!(matches!(after, State::Tcp | State::Probing)),
                    Action::UseRdma => prop_assert_eq!(after, State::Rdma),
                    Action::SendProbe => prop_assert_eq!(after, State::Probing),
                }
                if action != Action::None {
                    prop_assert!(before != after || action == Action::SendProbe);
                }
                // Without a device nothing may run on, or move to, RDMA.
                if !p.device_present() {
                    prop_assert!(matches!(after, DRAIN_TCP | State::Tcp), "{:?} without device", after);
                }
                if p.mode() == Mode::Tcp {
                    prop_assert!(matches!(after, DRAIN_TCP | State::Tcp), "{:?} in mode Tcp", after);
                }
                if after == State::Probing {
                    prop_assert!(p.device_present() && p.mode() != Mode::Tcp);
                }
                prop_assert!(p.config().validate().is_ok());
            }
        }
    }
}
