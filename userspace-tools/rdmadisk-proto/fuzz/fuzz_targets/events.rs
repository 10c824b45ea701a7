//! Random event sequences for the failover policy and the credit pair.
//!
//! Each pair of input bytes is one event. The policy must never make an
//! illegal transition or pair a state with the wrong action; the credits
//! must never let a message find no posted receive (RNR) or exceed the
//! credits granted.
#![no_main]

use std::collections::VecDeque;

use libfuzzer_sys::fuzz_target;
use rdmadisk_proto::credits::{CreditReceiver, CreditSender};
use rdmadisk_proto::policy::{Action, Mode, Policy, PolicyConfig, State, Transport};

const DRAIN_TCP: State = State::Draining { to: Transport::Tcp };
const DRAIN_RDMA: State = State::Draining {
    to: Transport::Rdma,
};

/// The credit pair plus what the hardware holds.
struct Link {
    rx: CreditReceiver,
    tx: CreditSender,
    nic_posted: u64,
    grants: VecDeque<u16>,
    msgs: u64,
    granted: u64,
    sent: u64,
    cap: u32,
}

impl Link {
    fn new(cap: u32) -> Link {
        Link {
            rx: CreditReceiver::with_cap(cap),
            tx: CreditSender::new(0),
            nic_posted: 0,
            grants: VecDeque::new(),
            msgs: 0,
            granted: 0,
            sent: 0,
            cap,
        }
    }

    fn step(&mut self, op: u8, arg: u8) {
        match op {
            0 => {
                self.rx.on_recv_posted();
                self.nic_posted += 1;
            }
            1 => {
                let n = self.rx.take_grant_capped(u16::from(arg));
                self.grants.push_back(n);
            }
            2 => {
                if let Some(n) = self.grants.pop_front() {
                    self.tx.grant(n);
                    self.granted += u64::from(n);
                }
            }
            3 => {
                if self.tx.try_consume() {
                    self.sent += 1;
                    self.msgs += 1;
                }
            }
            4 => {
                if self.msgs > 0 {
                    self.msgs -= 1;
                    assert!(self.nic_posted > 0, "RNR");
                    self.nic_posted -= 1;
                    self.rx.on_message_received().expect("message had a credit");
                    self.tx.complete();
                }
            }
            5 => {
                let n = self.rx.take_grant_capped(u16::from(arg));
                self.rx.return_grant(n);
            }
            _ => *self = Link::new(u32::from(arg % 64) + 1),
        }
        assert!(self.sent <= self.granted);
        assert!(self.rx.outstanding() <= self.rx.posted());
        assert!(self.rx.outstanding() <= self.cap);
        assert_eq!(u64::from(self.rx.posted()), self.nic_posted);
        let in_transit: u64 = self.grants.iter().map(|&n| u64::from(n)).sum();
        assert!(u64::from(self.tx.available()) + in_transit + self.msgs <= self.nic_posted);
        assert_eq!(u64::from(self.tx.in_flight()), self.msgs);
    }
}

fuzz_target!(|data: &[u8]| {
    let mut p = Policy::new(PolicyConfig::default(), 0);
    let mut link = Link::new(16);
    let mut now = 0u64;
    for ev in data.chunks_exact(2) {
        let (op, arg) = (ev[0], ev[1]);
        if op >= 128 {
            link.step((op - 128) % 7, arg);
            continue;
        }
        // Time moves in steps that straddle the default window and interval;
        // op bit 6 makes a huge jump to exercise saturation near u64::MAX.
        now = if op & 64 != 0 {
            now.saturating_add(u64::MAX / 4)
        } else {
            now.saturating_add(u64::from(arg) * 53)
        };
        let before = p.state();
        let action = match op % 10 {
            0 => p.on_rdma_failure(now),
            1 => p.on_device_removed(arg & 1 != 0, now),
            2 => p.on_device_added(now),
            3 => p.on_drained(now),
            4 => p.on_tick(now),
            5 => p.on_probe_result(arg & 1 != 0, now),
            6 => p.set_mode(
                [Mode::Auto, Mode::Rdma, Mode::Tcp][usize::from(arg % 3)],
                now,
            ),
            7 => {
                let cfg = PolicyConfig {
                    failover_threshold: u32::from(arg % 40),
                    failover_window_ms: u64::from(arg) * 100,
                    failback_probes: u32::from(arg % 5),
                    probe_interval_ms: u64::from(arg % 7) * 300,
                };
                assert_eq!(p.set_config(cfg).is_ok(), cfg.validate().is_ok());
                Action::None
            }
            8 => {
                p = Policy::new_on_tcp(PolicyConfig::default(), arg & 1 != 0, now);
                continue;
            }
            _ => p.on_fallback([Transport::Rdma, Transport::Tcp][usize::from(arg & 1)], now),
        };
        let after = p.state();
        assert!(before.may_move_to(after), "{before:?} -> {after:?}");
        match action {
            Action::None => assert!(
                before == after
                    || matches!(
                        (before, after),
                        (State::Tcp, State::Probing) | (State::Probing, State::Tcp)
                    )
            ),
            Action::DrainToTcp => assert_eq!(after, DRAIN_TCP),
            Action::DrainToRdma => assert_eq!(after, DRAIN_RDMA),
            Action::UseTcp => assert!(matches!(after, State::Tcp | State::Probing)),
            Action::UseRdma => assert_eq!(after, State::Rdma),
            Action::SendProbe => assert_eq!(after, State::Probing),
        }
        if !p.device_present() || p.mode() == Mode::Tcp {
            assert!(matches!(after, DRAIN_TCP | State::Tcp), "{after:?}");
        }
        if after == State::Probing {
            assert!(p.device_present() && p.mode() != Mode::Tcp);
        }
        assert!(p.config().validate().is_ok());
    }
});
