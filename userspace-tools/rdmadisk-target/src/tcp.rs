//! The TCP transport: one thread per connection, frames as in `rdmadisk_net::framing`.

use std::io::{self, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use rdmadisk_net::buf::AlignedBuf;
use rdmadisk_net::framing::{self, Frame, FrameError};
use rdmadisk_proto::wire::{
    FrameHeader, FrameKind, HelloReply, HelloStatus, Opcode, Response, Status, RESPONSE_LEN,
};

use crate::engine::{ConnGuard, Target};
use crate::hostile::{self, Candidate, Chooser, Kind, Rng};
use crate::stats::Stats;

/// How often blocked threads look at the shutdown flag.
const TICK: Duration = Duration::from_millis(200);
/// Write data larger than max_io_bytes up to this size is drained and answered with an error;
/// anything larger is a malformed frame.
const DRAIN_MAX: u32 = 64 << 20;

/// Accepts connections until shutdown; returns the connection threads to join.
pub fn serve(target: Arc<Target>, listener: TcpListener) -> Vec<thread::JoinHandle<()>> {
    let mut threads = Vec::new();
    if let Err(e) = listener.set_nonblocking(true) {
        eprintln!("rdmadisk-target: tcp: cannot poll the listener: {e}");
        return threads;
    }
    while !target.stopping() {
        match listener.accept() {
            Ok((stream, peer)) => {
                let t = target.clone();
                let h = thread::Builder::new()
                    .name(format!("tcp-{peer}"))
                    .spawn(move || connection(&t, stream, peer));
                match h {
                    Ok(h) => threads.push(h),
                    Err(e) => {
                        eprintln!("rdmadisk-target: tcp: cannot start a thread for {peer}: {e}")
                    }
                }
                threads.retain(|h| !h.is_finished());
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                thread::sleep(Duration::from_millis(50))
            }
            Err(e) => {
                eprintln!("rdmadisk-target: tcp: accept failed: {e}");
                thread::sleep(TICK);
            }
        }
    }
    threads
}

fn connection(t: &Target, mut s: TcpStream, peer: SocketAddr) {
    let _guard = ConnGuard::new(t);
    Stats::inc(&t.stats.tcp_connections);
    let _ = s.set_nonblocking(false);
    let _ = s.set_nodelay(true);
    let _ = s.set_read_timeout(Some(TICK));

    // Hello (within 10 s).
    let mut waited = Duration::ZERO;
    let hello = loop {
        match framing::read_frame_or_idle(&mut s, 0) {
            Ok(Some(Frame::Hello(h))) => break h,
            Ok(None) if waited < Duration::from_secs(10) && !t.stopping() => waited += TICK,
            Ok(None) => return,
            Ok(Some(f)) => {
                eprintln!("rdmadisk-target: tcp {peer}: expected Hello, got {f:?}; resetting");
                Stats::inc(&t.stats.resets);
                return;
            }
            Err(FrameError::Malformed(m)) => {
                eprintln!("rdmadisk-target: tcp {peer}: bad Hello ({m}); refusing");
                Stats::inc(&t.stats.refused);
                let _ =
                    framing::write_hello_reply(&mut s, &HelloReply::rejected(HelloStatus::Invalid));
                return;
            }
            Err(FrameError::Io(_)) => return,
        }
    };
    let (export, fence) = match t.attach(Some(peer), &hello) {
        Ok(a) => (a.export, a.fence),
        Err(st) => {
            Stats::inc(&t.stats.refused);
            match st {
                HelloStatus::NotAllowed => eprintln!("rdmadisk-target: tcp: refused connection from {peer}: address not on the allow-list"),
                // Logged in detail by attach.
                HelloStatus::Stale => {}
                _ => eprintln!(
                    "rdmadisk-target: tcp: refused connection from {peer} for export {:?}: {st:?}",
                    hello.export.as_str()
                ),
            }
            let _ = framing::write_hello_reply(&mut s, &HelloReply::rejected(st));
            return;
        }
    };
    if framing::write_hello_reply(&mut s, &t.hello_reply(&export)).is_err() {
        return;
    }
    eprintln!(
        "rdmadisk-target: tcp: {peer} attached to export {} (queue {}/{}, session {} epoch {})",
        export.name, hello.queue_id, hello.queue_count, hello.session_id, hello.epoch
    );

    let max_io = t.limits.max_io_bytes;
    let mut buf = AlignedBuf::new(max_io as usize);
    let mut chooser = Chooser::default();
    let mut rng = Rng::new(u64::from(peer.port()));
    loop {
        let frame = match framing::read_frame_or_idle(&mut s, DRAIN_MAX) {
            Ok(Some(f)) => f,
            Ok(None) if t.stopping() => break,
            Ok(None) => continue,
            Err(FrameError::Io(_)) => break,
            Err(FrameError::Malformed(m)) => {
                eprintln!("rdmadisk-target: tcp {peer}: malformed message ({m}); resetting this connection");
                Stats::inc(&t.stats.resets);
                break;
            }
        };
        let (req, data_len) = match frame {
            Frame::Request(r, n) => (r, n),
            other => {
                eprintln!(
                    "rdmadisk-target: tcp {peer}: unexpected {other:?}; resetting this connection"
                );
                Stats::inc(&t.stats.resets);
                break;
            }
        };
        let expect = if req.opcode == Opcode::Write {
            req.length
        } else {
            0
        };
        if data_len != expect {
            eprintln!(
                "rdmadisk-target: tcp {peer}: {:?} tag {} carries {data_len} data bytes, expected {expect}; resetting",
                req.opcode, req.tag
            );
            Stats::inc(&t.stats.resets);
            break;
        }
        // Read the write data now, so the stream stays in step whatever the verdict.
        if data_len > 0 {
            let r = if data_len <= max_io {
                framing::read_full(&mut s, &mut buf[..data_len as usize])
            } else {
                drain(&mut s, data_len)
            };
            if r.is_err() {
                break;
            }
        }
        let admitted = t.admit(&export, &req);
        if admitted.is_ok() && t.stalls(&req) {
            continue;
        }
        let served = t.fenced(&fence, &req, || match admitted {
            Err(st) => (st, 0, 0),
            Ok(()) => match req.opcode {
                Opcode::Read => {
                    let n = req.length as usize;
                    let (st, crc) = t.read(&export, &req, &mut buf[..n]);
                    (st, crc, if st == Status::Ok { n } else { 0 })
                }
                Opcode::Write => (t.write(&export, &req, &buf[..req.length as usize]), 0, 0),
                _ => (t.no_data(&export, &req), 0, 0),
            },
        });
        let (status, crc, out_len) = served.unwrap_or_else(|st| (st, 0, 0));
        let resp = t.response(&req, status, crc);
        let data = &buf[..out_len];
        let hostile = chooser.pick(
            &t.limits.hostile,
            &t.hostile_turn,
            &Candidate {
                tcp: true,
                opcode: req.opcode,
                ok: status == Status::Ok,
                invalidates: false,
                spare_send: true,
            },
        );
        let sent = match hostile {
            None => framing::write_response(&mut s, &resp, data).map(|()| true),
            Some(k) => {
                t.count_hostile(k);
                send_hostile(&mut s, k, &resp, data, &mut rng)
            }
        };
        match sent {
            Ok(true) => {}
            Ok(false) => {
                eprintln!("rdmadisk-target: tcp {peer}: hostile truncated response sent; closing this connection");
                break;
            }
            Err(_) => break,
        }
    }
    let _ = s.shutdown(std::net::Shutdown::Both);
}

fn drain(s: &mut TcpStream, mut n: u32) -> io::Result<()> {
    let mut junk = vec![0u8; 64 << 10];
    while n > 0 {
        let k = (n as usize).min(junk.len());
        framing::read_full(s, &mut junk[..k])?;
        n -= k as u32;
    }
    Ok(())
}

/// Writes a Response frame of `msg` whose data is the concatenation of `data`.
fn write_frame(s: &mut TcpStream, msg: &[u8; RESPONSE_LEN], data: &[&[u8]]) -> io::Result<()> {
    let total: usize = data.iter().map(|d| d.len()).sum();
    let hdr = FrameHeader {
        kind: FrameKind::Response,
        flags: 0,
        data_len: u32::try_from(total)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "data too long"))?,
    };
    let mut head = hdr.to_bytes().to_vec();
    head.extend_from_slice(msg);
    s.write_all(&head)?;
    for d in data {
        s.write_all(d)?;
    }
    s.flush()
}

/// Sends `resp` and its `data` made hostile by `k` (see the hostile module). `Ok(false)`: the
/// act ended the stream, close the connection.
fn send_hostile(
    s: &mut TcpStream,
    k: Kind,
    resp: &Response,
    data: &[u8],
    rng: &mut Rng,
) -> io::Result<bool> {
    match k {
        Kind::UnknownTag => {
            framing::write_response(s, &hostile::unknown_tag(resp), &[])?;
            framing::write_response(s, resp, data)?;
        }
        Kind::DupResponse => {
            framing::write_response(s, resp, data)?;
            framing::write_response(s, &hostile::duplicate(resp), data)?;
        }
        Kind::BadStatus => write_frame(s, &hostile::bad_status(resp), &[data])?,
        Kind::LongLength => {
            // Zeroes, never more of the export: the extra must not leak anything.
            let extra = [0u8; hostile::LONG_EXTRA as usize];
            write_frame(s, &hostile::long_length(resp).to_bytes(), &[data, &extra])?;
        }
        Kind::Truncated => {
            s.write_all(&hostile::truncated_frame(resp, data.len() as u32))?;
            s.flush()?;
            let _ = s.shutdown(std::net::Shutdown::Both);
            return Ok(false);
        }
        Kind::Garbage => {
            s.write_all(&hostile::garbage_frame(rng))?;
            s.flush()?;
        }
        Kind::CreditOverflow => {
            framing::write_response(s, &hostile::credit_overflow(resp), data)?;
        }
        // Never chosen on TCP (Kind::fits); answered normally should that change.
        Kind::WrongRkey | Kind::NoInvalidate | Kind::LateWrite => {
            framing::write_response(s, resp, data)?;
        }
    }
    Ok(true)
}
