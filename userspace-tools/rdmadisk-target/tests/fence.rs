//! The fencing rule over TCP against the real target: superseded connection sets cannot write,
//! nor attach again; probes are never fenced.

mod common;

use std::net::IpAddr;

use common::{pattern, read, simple, write, Target};
use rdmadisk_net::client::ConnectOptions;
use rdmadisk_proto::wire::{HelloStatus, Opcode, Status};

fn opts(session: u32, epoch: u32) -> ConnectOptions {
    ConnectOptions {
        session_id: session,
        epoch,
        ..ConnectOptions::new("rw")
    }
}

#[test]
fn superseded_sets_are_fenced() {
    let mut t = Target::start(&["--no-exclusive", "rw"]);
    let old = pattern(1, 4096);
    let new = pattern(2, 4096);

    // Two connection sets of session 7 attach; neither has sent anything yet.
    let mut e1 = t.connect_with(&opts(7, 1));
    let mut e2 = t.connect_with(&opts(7, 2));
    assert_eq!(write(&mut e1, 1, 8, &old), Status::Ok, "epoch 1 is current");
    // Epoch 2's first request moves the fence...
    assert_eq!(write(&mut e2, 2, 0, &new), Status::Ok);
    t.wait_line("fence for 127.0.0.1 rw moved to session 7 epoch 2");
    // ...so epoch 1's modifying requests are no longer applied.
    assert_eq!(write(&mut e1, 3, 0, &old), Status::Fenced);
    assert_eq!(simple(&mut e1, Opcode::Discard, 4, 0, 4096), Status::Fenced);
    assert_eq!(
        simple(&mut e1, Opcode::WriteZeroes, 5, 0, 4096),
        Status::Fenced
    );
    t.wait_line("session 7 epoch 1 is superseded (fence at session 7 epoch 2)");
    // Reads of the superseded set are served (harmless) and see epoch 2's data.
    assert_eq!(read(&mut e1, 6, 0, 4096), (Status::Ok, new.clone()));
    assert_eq!(simple(&mut e1, Opcode::Flush, 7, 0, 0), Status::Ok);
    assert_eq!(read(&mut e2, 8, 0, 4096), (Status::Ok, new.clone()));
    assert_eq!(read(&mut e2, 9, 8, 4096), (Status::Ok, old.clone()));

    // Epoch 1 may not attach again; epoch 2 and newer may.
    assert_eq!(t.refusal(&opts(7, 1)), HelloStatus::Stale);
    t.wait_line("stale hello from 127.0.0.1:");
    t.wait_line("session 7 epoch 1, but the fence is at session 7 epoch 2");
    let mut e2b = t.connect_with(&opts(7, 2));
    assert_eq!(write(&mut e2b, 10, 16, &new), Status::Ok);

    // Another session from the same address moves the fence with its first request, of any
    // kind, and session 7 is out for good.
    let mut s9 = t.connect_with(&opts(9, 1));
    assert_eq!(simple(&mut s9, Opcode::Nop, 11, 0, 0), Status::Ok);
    t.wait_line("fence for 127.0.0.1 rw moved to session 9 epoch 1");
    assert_eq!(write(&mut e2, 12, 0, &old), Status::Fenced);
    assert_eq!(t.refusal(&opts(7, 3)), HelloStatus::Stale);
    assert_eq!(write(&mut s9, 13, 24, &new), Status::Ok);

    // Session 0 (a probe) is never fenced and moves nothing, so it may not write either: an
    // unfenced writer could land a stale write over a newer one. Its reads are served.
    let mut probe = t.connect_with(&opts(0, 0));
    assert_eq!(write(&mut probe, 14, 32, &old), Status::ReadOnly);
    let mut probe2 = t.connect_with(&opts(0, 12345));
    assert_eq!(write(&mut probe2, 15, 40, &old), Status::ReadOnly);
    assert_eq!(read(&mut probe2, 15, 0, 4096), (Status::Ok, new.clone()));
    assert_eq!(write(&mut s9, 16, 48, &new), Status::Ok, "s9 still current");

    // Another address is another client with its own fence.
    let elsewhere = ConnectOptions {
        bind: Some("127.0.0.2".parse::<IpAddr>().unwrap()),
        ..opts(7, 1)
    };
    let mut other = t.connect_with(&elsewhere);
    assert_eq!(write(&mut other, 17, 56, &old), Status::Ok);
    t.wait_line("fence for 127.0.0.2 rw moved to session 7 epoch 1");

    // Nothing superseded ever landed on sector 0.
    assert_eq!(read(&mut s9, 18, 0, 4096), (Status::Ok, new));

    assert_eq!(t.counter("stale_hellos"), 2);
    assert_eq!(t.counter_now("fenced_requests"), 4);
    assert_eq!(t.counter_now("fence_moves"), 4);
    assert_eq!(t.counter_now("refused"), 2);
    assert_eq!(t.counter_now("fence_table_full"), 0);
}

/// A superseded set's write that arrives after the newer set's write to the same blocks, the
/// reissue race the rule exists for: the newer data survives, whatever order the two
/// connections were opened in.
#[test]
fn a_late_old_write_never_overwrites_a_newer_one() {
    let t = Target::start(&[]);
    for round in 0..20u32 {
        let s = 100 + round;
        let mut new = t.connect_with(&opts(s, 2));
        let mut old = t.connect_with(&opts(s, 1));
        let newer = pattern(1000 + round, 8192);
        let older = pattern(2000 + round, 8192);
        assert_eq!(write(&mut new, 1, 0, &newer), Status::Ok);
        assert_eq!(write(&mut old, 2, 0, &older), Status::Fenced);
        assert_eq!(read(&mut new, 3, 0, 8192), (Status::Ok, newer));
    }
}
