//! The `key=value` option strings written to the module's control files
//! (`map_device` and `probe`), in the style of RNBD's `map_device`.
//!
//! Input is whitespace-separated tokens, each `key=value`, except the bare
//! flag `ro`. Keys may appear once. Parsing is pure and allocation-free so
//! that the kernel module runs exactly the code tested here; every error
//! names the offending key so the module can log it.
//!
//! Target addresses are IPv4 or IPv6. In `target=`, whose entries separate
//! ports with colons, an IPv6 address goes in brackets (`[fd00::2]:7700`),
//! as in a URL; `addr=` takes it with or without them.

use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::auth::Secret;
use super::wire::ExportName;

/// Longest device name accepted by `name=`, in bytes.
pub const DEVICE_NAME_MAX: usize = 32;
/// Most hardware queues a device may ask for with `queues=`.
pub const MAX_QUEUES: u16 = 256;
/// rdma_cm port used when `port=` is absent (the target's default too).
pub const DEFAULT_RDMA_PORT: u16 = 7700;
/// TCP port used when `tcp_port=` is absent (the target's default too).
pub const DEFAULT_TCP_PORT: u16 = 7701;
/// Longest unknown key quoted back in an error, in bytes.
pub const KEY_QUOTE_MAX: usize = 32;
/// Most targets (gateways) one `target=` may name.
pub const MAX_TARGETS: usize = 4;

/// The keys this parser knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// `name=`: the block device's name.
    Name,
    /// `addr=`: the target's IPv4 or IPv6 address.
    Addr,
    /// `port=`: the target's rdma_cm port.
    Port,
    /// `export=`: the export to attach to.
    Export,
    /// `ro` or `ro=0|1`: map read-only.
    Ro,
    /// `queues=`: number of hardware queues.
    Queues,
    /// `poll_queues=`: hardware queues polled by blk-mq instead of interrupt-driven.
    PollQueues,
    /// `tcp_port=`: the target's TCP fallback port.
    TcpPort,
    /// `secret=`: the key this host proves (its own key, or the export's shared
    /// secret), in hex (32 to 128 digits).
    Secret,
    /// `target_secret=`: the key the target must prove, when it is not the
    /// same as `secret=` (DH-HMAC-CHAP's controller key), in hex.
    TargetSecret,
    /// `target=`: one to [`MAX_TARGETS`] targets (gateways) serving the
    /// export, `ADDR[:PORT[:TCP_PORT]]` separated by commas (an IPv6 `ADDR` in
    /// brackets); instead of `addr=`.
    Target,
}

impl Key {
    /// Every key, in the order they are documented.
    pub const ALL: [Key; 11] = [
        Key::Name,
        Key::Addr,
        Key::Port,
        Key::Export,
        Key::Ro,
        Key::Queues,
        Key::PollQueues,
        Key::TcpPort,
        Key::Secret,
        Key::TargetSecret,
        Key::Target,
    ];

    /// The key as written in the option string.
    pub fn as_str(self) -> &'static str {
        match self {
            Key::Name => "name",
            Key::Addr => "addr",
            Key::Port => "port",
            Key::Export => "export",
            Key::Ro => "ro",
            Key::Queues => "queues",
            Key::PollQueues => "poll_queues",
            Key::TcpPort => "tcp_port",
            Key::Secret => "secret",
            Key::TargetSecret => "target_secret",
            Key::Target => "target",
        }
    }

    fn from_bytes(b: &[u8]) -> Option<Key> {
        Key::ALL.into_iter().find(|k| k.as_str().as_bytes() == b)
    }

    fn bit(self) -> u16 {
        1 << (self as u16)
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A key the parser does not know, kept (truncated to [`KEY_QUOTE_MAX`]
/// bytes, non-printable bytes shown as `?`) so the error can quote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnknownKey {
    bytes: [u8; KEY_QUOTE_MAX],
    len: u8,
}

impl UnknownKey {
    fn new(raw: &[u8]) -> UnknownKey {
        let mut bytes = [0; KEY_QUOTE_MAX];
        let len = raw.len().min(KEY_QUOTE_MAX);
        for (d, &s) in bytes.iter_mut().zip(&raw[..len]) {
            *d = if s.is_ascii_graphic() { s } else { b'?' };
        }
        UnknownKey {
            bytes,
            len: len as u8,
        }
    }

    /// The quoted key; always printable ASCII.
    pub fn as_str(&self) -> &str {
        core::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or("?")
    }
}

/// Why an option string was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionError {
    /// A key this parser does not know.
    UnknownKey(UnknownKey),
    /// A key given twice.
    Duplicate(Key),
    /// A value that does not parse, is out of range, or is empty.
    BadValue(Key),
    /// A key that needs a value was given without `=`.
    MissingValue(Key),
    /// A key the caller requires is absent.
    Missing(Key),
    /// Two keys that exclude each other were both given (`target=` and
    /// `addr=`).
    Conflict(Key, Key),
    /// Nothing but whitespace.
    Empty,
}

impl OptionError {
    /// The key the error is about, for callers that log it separately (the
    /// first of a [`OptionError::Conflict`]); `None` for
    /// [`OptionError::UnknownKey`] and [`OptionError::Empty`].
    pub fn key(&self) -> Option<Key> {
        match *self {
            OptionError::Duplicate(k)
            | OptionError::BadValue(k)
            | OptionError::MissingValue(k)
            | OptionError::Missing(k)
            | OptionError::Conflict(k, _) => Some(k),
            OptionError::UnknownKey(_) | OptionError::Empty => None,
        }
    }
}

impl fmt::Display for OptionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OptionError::UnknownKey(k) => write!(f, "unknown key '{}'", k.as_str()),
            OptionError::Duplicate(k) => write!(f, "duplicate key '{k}'"),
            OptionError::BadValue(k) => write!(f, "bad value for key '{k}'"),
            OptionError::MissingValue(k) => write!(f, "key '{k}' needs a value"),
            OptionError::Missing(k) => write!(f, "missing key '{k}'"),
            OptionError::Conflict(a, b) => write!(f, "keys '{a}' and '{b}' cannot both be given"),
            OptionError::Empty => f.write_str("no options given"),
        }
    }
}

/// A block device name: 1..=[`DEVICE_NAME_MAX`] bytes of `[A-Za-z0-9._-]`,
/// so it is safe in sysfs, logs and `/dev` without escaping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceName {
    bytes: [u8; DEVICE_NAME_MAX],
    len: u8,
}

impl DeviceName {
    /// Validates `name`; `None` if it is empty, too long or has other bytes.
    pub fn new(name: &[u8]) -> Option<DeviceName> {
        if name.is_empty()
            || name.len() > DEVICE_NAME_MAX
            || !name
                .iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
        {
            return None;
        }
        let mut bytes = [0; DEVICE_NAME_MAX];
        bytes[..name.len()].copy_from_slice(name);
        Some(DeviceName {
            bytes,
            len: name.len() as u8,
        })
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        core::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or("?")
    }
}

/// One target (gateway) of a disk: its address and both ports, resolved
/// (a port not given in `target=` is `port=` / `tcp_port=`, else the default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TargetAddr {
    /// The address; never an IPv4-mapped IPv6 one (that is its IPv4 address).
    pub addr: IpAddr,
    /// rdma_cm port, non-zero.
    pub port: u16,
    /// TCP fallback port, non-zero.
    pub tcp_port: u16,
}

impl TargetAddr {
    const NONE: TargetAddr = TargetAddr {
        addr: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        port: 0,
        tcp_port: 0,
    };
}

/// The targets of a disk, 1..=[`MAX_TARGETS`] in the order given, no two with
/// the same address and rdma_cm port. A fixed array: no allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Targets {
    list: [TargetAddr; MAX_TARGETS],
    len: u8,
}

impl Targets {
    /// A list of the one target `t`.
    pub fn single(t: TargetAddr) -> Targets {
        let mut list = [TargetAddr::NONE; MAX_TARGETS];
        list[0] = t;
        Targets { list, len: 1 }
    }

    /// How many targets (at least 1 for a list from the parser).
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Whether the list is empty (never, for a list from the parser).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The `i`th target, in the order given.
    pub fn get(&self, i: usize) -> Option<&TargetAddr> {
        self.as_slice().get(i)
    }

    /// The targets, in the order given.
    pub fn iter(&self) -> core::slice::Iter<'_, TargetAddr> {
        self.as_slice().iter()
    }

    /// The targets as a slice.
    pub fn as_slice(&self) -> &[TargetAddr] {
        &self.list[..self.len()]
    }
}

impl<'a> IntoIterator for &'a Targets {
    type Item = &'a TargetAddr;
    type IntoIter = core::slice::Iter<'a, TargetAddr>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// Parses the value of `target=` with ports left 0 where not given
/// ([`Options::parse`] fills them once every key is in). `None` if an entry is
/// empty or malformed, a port is 0, or there are more than [`MAX_TARGETS`].
fn parse_targets(v: &[u8]) -> Option<Targets> {
    let mut t = Targets {
        list: [TargetAddr::NONE; MAX_TARGETS],
        len: 0,
    };
    for entry in v.split(|&c| c == b',') {
        let slot = t.list.get_mut(usize::from(t.len))?;
        // An IPv6 address only in brackets: bare, `fd00::2:7700` would be an address, not a
        // port, and a typo would map another host.
        let (addr, rest) = match entry.strip_prefix(b"[") {
            Some(r) => {
                let end = r.iter().position(|&c| c == b']')?;
                (parse_ipv6(&r[..end])?, &r[end + 1..])
            }
            None => {
                let end = entry.iter().position(|&c| c == b':').unwrap_or(entry.len());
                (IpAddr::from(parse_ipv4(&entry[..end])?), &entry[end..])
            }
        };
        slot.addr = addr;
        if !rest.is_empty() {
            let mut ports = rest.strip_prefix(b":")?.split(|&c| c == b':');
            slot.port = parse_port(ports.next()?)?;
            if let Some(p) = ports.next() {
                slot.tcp_port = parse_port(p)?;
            }
            if ports.next().is_some() {
                return None;
            }
        }
        t.len += 1;
    }
    Some(t)
}

/// The parsed options; each field is `None` (or `false`) when its key was
/// absent, so callers decide which keys they need ([`Options::require`]) and
/// what the defaults are.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Options {
    /// `name=`.
    pub name: Option<DeviceName>,
    /// `addr=`; never an IPv4-mapped IPv6 address (that is its IPv4 address).
    pub addr: Option<IpAddr>,
    /// `port=`, non-zero.
    pub port: Option<u16>,
    /// `export=`.
    pub export: Option<ExportName>,
    /// `ro` / `ro=1`.
    pub read_only: bool,
    /// `queues=`, `1..=MAX_QUEUES`.
    pub queues: Option<u16>,
    /// `poll_queues=`; with `queues=` (or its default of 1) at most [`MAX_QUEUES`] in all.
    pub poll_queues: Option<u16>,
    /// `tcp_port=`, non-zero.
    pub tcp_port: Option<u16>,
    /// `secret=`.
    pub secret: Option<Secret>,
    /// `target_secret=`; only with `secret=`.
    pub target_secret: Option<Secret>,
    /// `target=`, ports resolved; never with `addr=`. [`Options::target_list`]
    /// gives the targets of either form.
    pub targets: Option<Targets>,
}

impl Options {
    /// Parses `input` (ASCII, whitespace-separated tokens; a trailing newline
    /// as `echo` writes is fine). The first error found wins.
    pub fn parse(input: &[u8]) -> Result<Options, OptionError> {
        let mut o = Options::default();
        let mut seen = 0u16;
        let mut any = false;
        for tok in input
            .split(|c| c.is_ascii_whitespace())
            .filter(|t| !t.is_empty())
        {
            any = true;
            let (k, v) = match tok.iter().position(|&c| c == b'=') {
                Some(i) => (&tok[..i], Some(&tok[i + 1..])),
                None => (tok, None),
            };
            let key = Key::from_bytes(k).ok_or(OptionError::UnknownKey(UnknownKey::new(k)))?;
            if seen & key.bit() != 0 {
                return Err(OptionError::Duplicate(key));
            }
            seen |= key.bit();
            if seen & Key::Target.bit() != 0 && seen & Key::Addr.bit() != 0 {
                return Err(OptionError::Conflict(Key::Target, Key::Addr));
            }
            o.set(key, v)?;
        }
        if u32::from(o.queues.unwrap_or(1)) + u32::from(o.poll_queues.unwrap_or(0))
            > u32::from(MAX_QUEUES)
        {
            return Err(OptionError::BadValue(Key::PollQueues));
        }
        if o.target_secret.is_some() && o.secret.is_none() {
            return Err(OptionError::Missing(Key::Secret));
        }
        // `port=` and `tcp_port=` may come after `target=`.
        let (port, tcp_port) = o.default_ports();
        if let Some(t) = o.targets.as_mut() {
            for e in &mut t.list[..usize::from(t.len)] {
                if e.port == 0 {
                    e.port = port;
                }
                if e.tcp_port == 0 {
                    e.tcp_port = tcp_port;
                }
            }
            let l = t.as_slice();
            if (1..l.len()).any(|i| {
                l[..i]
                    .iter()
                    .any(|e| (e.addr, e.port) == (l[i].addr, l[i].port))
            }) {
                return Err(OptionError::BadValue(Key::Target));
            }
        }
        if any {
            Ok(o)
        } else {
            Err(OptionError::Empty)
        }
    }

    fn set(&mut self, key: Key, value: Option<&[u8]>) -> Result<(), OptionError> {
        let bad = OptionError::BadValue(key);
        if key == Key::Ro {
            self.read_only = match value {
                None | Some(b"1") => true,
                Some(b"0") => false,
                Some(_) => return Err(bad),
            };
            return Ok(());
        }
        let v = value.ok_or(OptionError::MissingValue(key))?;
        match key {
            Key::Name => self.name = Some(DeviceName::new(v).ok_or(bad)?),
            Key::Addr => self.addr = Some(parse_addr(v).ok_or(bad)?),
            Key::Port => self.port = Some(parse_port(v).ok_or(bad)?),
            Key::TcpPort => self.tcp_port = Some(parse_port(v).ok_or(bad)?),
            Key::Export => self.export = Some(ExportName::new(v).map_err(|_| bad)?),
            Key::Queues => {
                let q = parse_u16(v).filter(|q| (1..=MAX_QUEUES).contains(q));
                self.queues = Some(q.ok_or(bad)?);
            }
            Key::PollQueues => {
                let q = parse_u16(v).filter(|q| *q <= MAX_QUEUES);
                self.poll_queues = Some(q.ok_or(bad)?);
            }
            Key::Secret => self.secret = Some(Secret::from_hex(v).map_err(|_| bad)?),
            Key::TargetSecret => self.target_secret = Some(Secret::from_hex(v).map_err(|_| bad)?),
            Key::Target => self.targets = Some(parse_targets(v).ok_or(bad)?),
            Key::Ro => {}
        }
        Ok(())
    }

    /// The rdma_cm and TCP ports of a target that names none: `port=` and
    /// `tcp_port=`, else the defaults.
    fn default_ports(&self) -> (u16, u16) {
        (
            self.port.unwrap_or(DEFAULT_RDMA_PORT),
            self.tcp_port.unwrap_or(DEFAULT_TCP_PORT),
        )
    }

    /// The disk's targets, whichever form gave them: `target=`'s list, or the
    /// one target of `addr=` with `port=` / `tcp_port=` or their defaults.
    /// [`OptionError::Missing`]`(`[`Key::Addr`]`)` if neither was given.
    pub fn target_list(&self) -> Result<Targets, OptionError> {
        if let Some(t) = self.targets {
            return Ok(t);
        }
        let addr = self.addr.ok_or(OptionError::Missing(Key::Addr))?;
        let (port, tcp_port) = self.default_ports();
        Ok(Targets::single(TargetAddr {
            addr,
            port,
            tcp_port,
        }))
    }

    /// Whether `k` was given (`ro`: whether the disk is read-only).
    fn has(&self, k: Key) -> bool {
        match k {
            Key::Name => self.name.is_some(),
            Key::Addr => self.addr.is_some(),
            Key::Port => self.port.is_some(),
            Key::Export => self.export.is_some(),
            Key::Ro => self.read_only,
            Key::Queues => self.queues.is_some(),
            Key::PollQueues => self.poll_queues.is_some(),
            Key::TcpPort => self.tcp_port.is_some(),
            Key::Secret => self.secret.is_some(),
            Key::TargetSecret => self.target_secret.is_some(),
            Key::Target => self.targets.is_some(),
        }
    }

    /// Checks that every key in `keys` was given; the first absent one is
    /// the error. (`ro` is a flag and always counts as given.) `addr` asks
    /// for the disk's target address, so `target=` satisfies it too; `target`
    /// asks for `target=` itself.
    pub fn require(&self, keys: &[Key]) -> Result<(), OptionError> {
        let given = |k: Key| match k {
            Key::Ro => true,
            Key::Addr => self.has(Key::Addr) || self.has(Key::Target),
            k => self.has(k),
        };
        match keys.iter().find(|&&k| !given(k)) {
            Some(&k) => Err(OptionError::Missing(k)),
            None => Ok(()),
        }
    }

    /// Checks that no key outside `allowed` was given, for control files
    /// that take only some of the keys. The first extra key is the error,
    /// reported as [`OptionError::UnknownKey`].
    pub fn only(&self, allowed: &[Key]) -> Result<(), OptionError> {
        match Key::ALL
            .into_iter()
            .find(|k| self.has(*k) && !allowed.contains(k))
        {
            Some(k) => Err(OptionError::UnknownKey(UnknownKey::new(
                k.as_str().as_bytes(),
            ))),
            None => Ok(()),
        }
    }
}

/// Decimal `u16` of 1..=5 digits, no sign, no leading `+`.
fn parse_u16(v: &[u8]) -> Option<u16> {
    if v.is_empty() || v.len() > 5 {
        return None;
    }
    let mut n: u32 = 0;
    for &c in v {
        if !c.is_ascii_digit() {
            return None;
        }
        n = n * 10 + u32::from(c - b'0');
    }
    u16::try_from(n).ok()
}

fn parse_port(v: &[u8]) -> Option<u16> {
    parse_u16(v).filter(|&p| p != 0)
}

/// Dotted-quad IPv4. Leading zeros are refused because some tools read
/// them as octal, so `010.0.0.1` would mean different hosts to different
/// programs.
fn parse_ipv4(v: &[u8]) -> Option<[u8; 4]> {
    let mut out = [0u8; 4];
    let mut parts = v.split(|&c| c == b'.');
    for o in out.iter_mut() {
        let p = parts.next()?;
        if p.is_empty() || p.len() > 3 || (p.len() > 1 && p[0] == b'0') {
            return None;
        }
        let n = parse_u16(p)?;
        *o = u8::try_from(n).ok()?;
    }
    if parts.next().is_some() {
        return None;
    }
    Some(out)
}

/// IPv6 as RFC 4291 writes it (an IPv4 tail allowed), with no zone. A link-local address
/// means nothing without the interface a zone names, so it is refused. An IPv4-mapped address
/// is the IPv4 address it maps: the same target either way, over IPv4.
fn parse_ipv6(v: &[u8]) -> Option<IpAddr> {
    let a: Ipv6Addr = core::str::from_utf8(v).ok()?.parse().ok()?;
    if a.is_unicast_link_local() {
        return None;
    }
    Some(match a.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(a),
    })
}

/// `addr=`'s value: IPv4, or IPv6 with or without brackets.
fn parse_addr(v: &[u8]) -> Option<IpAddr> {
    if let Some(inner) = v.strip_prefix(b"[").and_then(|r| r.strip_suffix(b"]")) {
        parse_ipv6(inner)
    } else if v.contains(&b':') {
        parse_ipv6(v)
    } else {
        parse_ipv4(v).map(IpAddr::from)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    fn err(s: &str) -> OptionError {
        Options::parse(s.as_bytes()).unwrap_err()
    }

    #[test]
    fn secrets() {
        let o = Options::parse(b"export=a secret=00112233445566778899aabbccddeeff").unwrap();
        assert_eq!(o.secret.as_ref().unwrap().as_bytes().len(), 16);
        assert_eq!(err("secret=0011"), OptionError::BadValue(Key::Secret));
        assert_eq!(err("secret=xyz"), OptionError::BadValue(Key::Secret));
        assert_eq!(err("secret"), OptionError::MissingValue(Key::Secret));
        assert_eq!(
            err("secret=00112233445566778899aabbccddeeff secret=00112233445566778899aabbccddeeff"),
            OptionError::Duplicate(Key::Secret)
        );
        // The secret is never printed by the options' Debug.
        let text = std::format!("{o:?}");
        let hidden = !text.contains("0011") && text.contains("16 bytes");
        assert!(hidden, "{text}");
        let both = Options::parse(
            b"secret=00112233445566778899aabbccddeeff target_secret=ffeeddccbbaa99887766554433221100",
        )
        .unwrap();
        assert_eq!(both.target_secret.as_ref().unwrap().as_bytes()[0], 0xff);
        assert_eq!(
            err("target_secret=00112233445566778899aabbccddeeff"),
            OptionError::Missing(Key::Secret),
            "a target key alone means nothing"
        );
        assert_eq!(
            err("target_secret=00"),
            OptionError::BadValue(Key::TargetSecret)
        );
    }

    #[test]
    fn probe_line() {
        let o = Options::parse(b"addr=192.0.2.2 port=7700 export=disk0\n").unwrap();
        assert_eq!(o.addr, Some(IpAddr::from([192, 0, 2, 2])));
        assert_eq!(o.port, Some(7700));
        assert_eq!(o.export.unwrap().as_str(), "disk0");
        assert!(!o.read_only);
        assert_eq!(o.name, None);
        o.require(&[Key::Addr, Key::Export]).unwrap();
        o.only(&[Key::Addr, Key::Port, Key::Export]).unwrap();
    }

    #[test]
    fn map_line_all_keys() {
        let o = Options::parse(
            b"  name=rd0\taddr=10.1.2.3  port=1 export=a.b-c_d ro queues=256 tcp_port=65535 ",
        )
        .unwrap();
        assert_eq!(o.name.unwrap().as_str(), "rd0");
        assert_eq!(o.addr, Some(IpAddr::from([10, 1, 2, 3])));
        assert_eq!(o.port, Some(1));
        assert!(o.read_only);
        assert_eq!(o.queues, Some(256));
        assert_eq!(o.tcp_port, Some(65535));
        assert_eq!(
            o.only(&[Key::Addr, Key::Port, Key::Export]),
            Err(OptionError::UnknownKey(UnknownKey::new(b"name")))
        );
    }

    #[test]
    fn poll_queues_share_the_queue_limit() {
        let o = Options::parse(b"queues=2 poll_queues=1").unwrap();
        assert_eq!((o.queues, o.poll_queues), (Some(2), Some(1)));
        assert_eq!(
            Options::parse(b"poll_queues=0").unwrap().poll_queues,
            Some(0)
        );
        let o = Options::parse(b"queues=200 poll_queues=56").unwrap();
        assert_eq!(o.poll_queues, Some(56));
        assert_eq!(
            err("poll_queues=1 poll_queues=1"),
            OptionError::Duplicate(Key::PollQueues)
        );
        assert_eq!(
            Options::parse(b"poll_queues=1").unwrap().only(&[Key::Addr]),
            Err(OptionError::UnknownKey(UnknownKey::new(b"poll_queues")))
        );
    }

    #[test]
    fn ro_forms() {
        assert!(Options::parse(b"ro=1").unwrap().read_only);
        assert!(!Options::parse(b"ro=0").unwrap().read_only);
        assert_eq!(err("ro=yes"), OptionError::BadValue(Key::Ro));
        assert_eq!(err("ro ro=0"), OptionError::Duplicate(Key::Ro));
    }

    #[test]
    fn unknown_and_duplicate_keys_are_named() {
        let e = err("addr=1.2.3.4 colour=blue");
        assert_eq!(e, OptionError::UnknownKey(UnknownKey::new(b"colour")));
        let mut s = [0u8; 64];
        let n = fmt_into(&mut s, &e);
        assert_eq!(&s[..n], b"unknown key 'colour'");
        assert_eq!(err("port=1 port=2"), OptionError::Duplicate(Key::Port));
        assert_eq!(err("=5"), OptionError::UnknownKey(UnknownKey::new(b"")));
        assert_eq!(err("Addr=1.2.3.4").key(), None);
    }

    #[test]
    fn unknown_key_is_truncated_and_printable() {
        let long = [b'x'; 100];
        let mut input = [0u8; 102];
        input[..100].copy_from_slice(&long);
        input[100] = b'=';
        input[101] = b'1';
        match Options::parse(&input).unwrap_err() {
            OptionError::UnknownKey(k) => assert_eq!(k.as_str().len(), KEY_QUOTE_MAX),
            e => panic!("{e:?}"),
        }
        match err("a\u{7f}b=1") {
            OptionError::UnknownKey(k) => assert_eq!(k.as_str(), "a?b"),
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn bad_values_name_the_key() {
        for (s, k) in [
            ("addr=1.2.3", Key::Addr),
            ("addr=1.2.3.4.5", Key::Addr),
            ("addr=256.1.1.1", Key::Addr),
            ("addr=01.1.1.1", Key::Addr),
            ("addr=1..1.1", Key::Addr),
            ("addr=a.b.c.d", Key::Addr),
            ("addr=", Key::Addr),
            ("port=0", Key::Port),
            ("port=65536", Key::Port),
            ("port=-1", Key::Port),
            ("port=+1", Key::Port),
            ("port=123456", Key::Port),
            ("tcp_port=0", Key::TcpPort),
            ("queues=0", Key::Queues),
            ("queues=257", Key::Queues),
            ("poll_queues=257", Key::PollQueues),
            ("poll_queues=-1", Key::PollQueues),
            ("poll_queues=256", Key::PollQueues),
            ("queues=200 poll_queues=57", Key::PollQueues),
            ("export=", Key::Export),
            ("export=a/b", Key::Export),
            ("export=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", Key::Export),
            ("name=", Key::Name),
            ("name=x/y", Key::Name),
        ] {
            let e = err(s);
            assert_eq!(e.key(), Some(k), "{s}: {e:?}");
            assert_eq!(e, OptionError::BadValue(k), "{s}");
        }
        assert_eq!(
            Options::parse(b"addr=0.0.0.0").unwrap().addr,
            Some(IpAddr::from([0; 4]))
        );
        assert_eq!(
            Options::parse(b"addr=255.255.255.255").unwrap().addr,
            Some(IpAddr::from([255; 4]))
        );
    }

    #[test]
    fn missing_values_and_keys() {
        assert_eq!(err("port"), OptionError::MissingValue(Key::Port));
        assert_eq!(err(""), OptionError::Empty);
        assert_eq!(err(" \n\t"), OptionError::Empty);
        let o = Options::parse(b"addr=1.2.3.4").unwrap();
        assert_eq!(
            o.require(&[Key::Addr, Key::Export]),
            Err(OptionError::Missing(Key::Export))
        );
    }

    fn t(addr: impl Into<IpAddr>, port: u16, tcp_port: u16) -> TargetAddr {
        TargetAddr {
            addr: addr.into(),
            port,
            tcp_port,
        }
    }

    fn targets(s: &str) -> std::vec::Vec<TargetAddr> {
        let o = Options::parse(s.as_bytes()).unwrap();
        let l = o.target_list().unwrap();
        assert_eq!(Some(l), o.targets, "{s}");
        l.iter().copied().collect()
    }

    #[test]
    fn target_forms_and_defaults() {
        assert_eq!(
            targets("target=10.0.0.1"),
            [t([10, 0, 0, 1], DEFAULT_RDMA_PORT, DEFAULT_TCP_PORT)]
        );
        assert_eq!(
            targets("target=10.0.0.1:9000,10.0.0.2:9001:9002,10.0.0.3"),
            [
                t([10, 0, 0, 1], 9000, DEFAULT_TCP_PORT),
                t([10, 0, 0, 2], 9001, 9002),
                t([10, 0, 0, 3], DEFAULT_RDMA_PORT, DEFAULT_TCP_PORT),
            ]
        );
        // Ports not given in an entry come from port= / tcp_port=, before or after target=.
        let want = [t([1, 2, 3, 4], 5, 6), t([1, 2, 3, 5], 7, 6)];
        for s in [
            "port=5 tcp_port=6 target=1.2.3.4,1.2.3.5:7",
            "target=1.2.3.4,1.2.3.5:7 port=5 tcp_port=6",
            "tcp_port=6 target=1.2.3.4,1.2.3.5:7 port=5",
        ] {
            assert_eq!(targets(s), want, "{s}");
        }
        // The same address on two ports is two targets.
        assert_eq!(targets("target=1.1.1.1:1,1.1.1.1:2").len(), 2);
        let o = Options::parse(b"target=1.1.1.1,2.2.2.2,3.3.3.3,4.4.4.4").unwrap();
        let l = o.targets.unwrap();
        assert_eq!((l.len(), l.is_empty()), (MAX_TARGETS, false));
        assert_eq!(l.get(3).map(|e| e.addr), Some(IpAddr::from([4; 4])));
        assert_eq!(l.get(4), None);
        assert_eq!((&l).into_iter().count(), 4);
        assert_eq!(o.addr, None, "target= does not fill addr=");
    }

    #[test]
    fn bad_targets() {
        for s in [
            "target=",
            "target=,",
            "target=1.2.3.4,",
            "target=,1.2.3.4",
            "target=1.2.3.4,,1.2.3.5",
            "target=1.2.3.4:",
            "target=1.2.3.4::7701",
            "target=1.2.3.4:7700:",
            "target=1.2.3.4:0",
            "target=1.2.3.4:7700:0",
            "target=1.2.3.4:65536",
            "target=1.2.3.4:1:2:3",
            "target=1.2.3",
            "target=01.2.3.4",
            "target=1.2.3.4;1.2.3.5",
            "target=host:7700",
            // More than MAX_TARGETS.
            "target=1.1.1.1,2.2.2.2,3.3.3.3,4.4.4.4,5.5.5.5",
            // The same (address, port) twice, however the port was given.
            "target=1.2.3.4,1.2.3.4",
            "target=1.2.3.4:9,1.2.3.4:9:10",
            "target=1.2.3.4,1.2.3.4:7700",
            "port=9 target=1.2.3.4,5.6.7.8,1.2.3.4:9",
            "target=1.2.3.4:9,1.2.3.4 port=9",
        ] {
            assert_eq!(err(s), OptionError::BadValue(Key::Target), "{s}");
        }
        assert_eq!(err("target"), OptionError::MissingValue(Key::Target));
        assert_eq!(
            err("target=1.1.1.1 target=2.2.2.2"),
            OptionError::Duplicate(Key::Target)
        );
        // Same address and rdma_cm port with other TCP ports is still the same target; a
        // different rdma_cm port after defaults is not.
        assert_eq!(targets("port=9 target=1.2.3.4,1.2.3.4:7700").len(), 2);
    }

    fn v6(s: &str) -> IpAddr {
        IpAddr::V6(s.parse().unwrap())
    }

    #[test]
    fn ipv6_addr_forms() {
        for s in [
            "addr=fd00:db8::2",
            "addr=[fd00:db8::2]",
            "addr=FD00:0DB8:0:0:0:0:0:2",
        ] {
            let o = Options::parse(s.as_bytes()).unwrap();
            assert_eq!(o.addr, Some(v6("fd00:db8::2")), "{s}");
        }
        let o = Options::parse(b"addr=2001:db8::1 port=9 tcp_port=10").unwrap();
        assert_eq!(
            o.target_list().unwrap().as_slice(),
            [t(v6("2001:db8::1"), 9, 10)]
        );
        // An IPv4-mapped address is its IPv4 address.
        let o = Options::parse(b"addr=::ffff:192.0.2.2").unwrap();
        assert_eq!(o.addr, Some(IpAddr::from([192, 0, 2, 2])));
        assert_eq!(Options::parse(b"addr=::").unwrap().addr, Some(v6("::")));
        for s in [
            "addr=fd00:::2",
            "addr=fd00::2::3",
            "addr=1:2:3:4:5:6:7:8:9",
            "addr=12345::1",
            "addr=fd00::g",
            "addr=[fd00::2",
            "addr=fd00::2]",
            "addr=[[fd00::2]]",
            "addr=[]",
            "addr=[1.2.3.4]",
            "addr=[fd00::2]:7700",
            // Link-local: no zone, so no interface; with one, refused too.
            "addr=fe80::1",
            "addr=fe80::1%eth0",
            "addr=[fe80::1%2]",
        ] {
            assert_eq!(err(s), OptionError::BadValue(Key::Addr), "{s}");
        }
    }

    #[test]
    fn ipv6_targets() {
        assert_eq!(
            targets("target=[fd00:db8::2]"),
            [t(v6("fd00:db8::2"), DEFAULT_RDMA_PORT, DEFAULT_TCP_PORT)]
        );
        assert_eq!(
            targets("port=5 target=[fd00::2]:9000,192.0.2.3,[fd00::3]:9001:9002,[::1]"),
            [
                t(v6("fd00::2"), 9000, DEFAULT_TCP_PORT),
                t([192, 0, 2, 3], 5, DEFAULT_TCP_PORT),
                t(v6("fd00::3"), 9001, 9002),
                t(v6("::1"), 5, DEFAULT_TCP_PORT),
            ]
        );
        assert_eq!(
            targets("target=[::ffff:10.0.0.1]:7"),
            [t([10, 0, 0, 1], 7, DEFAULT_TCP_PORT)]
        );
        for s in [
            // Bare: its colons would be read as ports.
            "target=fd00::2",
            "target=::1",
            "target=[fd00::2]7700",
            "target=[fd00::2]]",
            "target=[fd00::2",
            "target=[fd00::2]:",
            "target=[fd00::2]::7701",
            "target=[fd00::2]:0",
            "target=[fd00::2]:1:2:3",
            "target=[]",
            "target=[]:7700",
            "target=[1.2.3.4]",
            "target=[fe80::1]",
            "target=[fe80::1%eth0]:7700",
            "target=[fd00::2],",
            // The same target, however it is written.
            "target=[fd00::2],[fd00:0:0::2]",
            "target=[FD00::2]:7700,[fd00::2]",
            "target=[::ffff:1.2.3.4],1.2.3.4",
        ] {
            assert_eq!(err(s), OptionError::BadValue(Key::Target), "{s}");
        }
    }

    #[test]
    fn target_and_addr_conflict() {
        for s in [
            "addr=1.2.3.4 target=1.2.3.5",
            "target=1.2.3.5 addr=1.2.3.4",
            "name=a target=1.2.3.5 export=x addr=1.2.3.4 port=1",
        ] {
            let e = err(s);
            assert_eq!(e, OptionError::Conflict(Key::Target, Key::Addr), "{s}");
            assert_eq!(e.key(), Some(Key::Target));
        }
        let mut s = [0u8; 64];
        let n = fmt_into(&mut s, &err("addr=1.2.3.4 target=1.2.3.5"));
        assert_eq!(&s[..n], b"keys 'target' and 'addr' cannot both be given");
    }

    #[test]
    fn target_list_of_either_form() {
        // The single form, as before.
        let o = Options::parse(b"name=d addr=192.0.2.2 export=e").unwrap();
        assert_eq!(o.targets, None);
        assert_eq!(o.addr, Some(IpAddr::from([192, 0, 2, 2])));
        let l = o.target_list().unwrap();
        assert_eq!(
            l.as_slice(),
            [t([192, 0, 2, 2], DEFAULT_RDMA_PORT, DEFAULT_TCP_PORT)]
        );
        let o = Options::parse(b"addr=192.0.2.2 tcp_port=80 port=81").unwrap();
        assert_eq!(
            o.target_list().unwrap().as_slice(),
            [t([192, 0, 2, 2], 81, 80)]
        );
        // Neither form.
        let o = Options::parse(b"name=d export=e").unwrap();
        assert_eq!(o.target_list(), Err(OptionError::Missing(Key::Addr)));
        assert_eq!(
            o.require(&[Key::Name, Key::Addr]),
            Err(OptionError::Missing(Key::Addr))
        );
        // What the kernel asks: name and export, then the targets.
        let o = Options::parse(b"name=d export=e target=10.0.0.1,10.0.0.2 ro").unwrap();
        o.require(&[Key::Name, Key::Export, Key::Ro]).unwrap();
        assert_eq!(o.target_list().unwrap().len(), 2);
        // `addr` asks for a target address, which target= gives; `target` asks for target=.
        o.require(&[Key::Addr, Key::Target]).unwrap();
        let single = Options::parse(b"addr=10.0.0.1").unwrap();
        assert_eq!(
            single.require(&[Key::Addr, Key::Target]),
            Err(OptionError::Missing(Key::Target))
        );
        // `only` names target= itself: the probe takes addr= only.
        assert_eq!(
            Options::parse(b"target=10.0.0.1 export=e").unwrap().only(&[
                Key::Addr,
                Key::Port,
                Key::Export
            ]),
            Err(OptionError::UnknownKey(UnknownKey::new(b"target")))
        );
        Options::parse(b"target=10.0.0.1 export=e")
            .unwrap()
            .only(&[Key::Target, Key::Export])
            .unwrap();
    }

    #[test]
    fn key_bits_stay_distinct() {
        let mut bits = 0u16;
        for k in Key::ALL {
            assert_eq!(bits & k.bit(), 0, "{k}");
            bits |= k.bit();
            assert_eq!(Key::from_bytes(k.as_str().as_bytes()), Some(k));
        }
        assert_eq!(Key::ALL.last(), Some(&Key::Target));
    }

    #[test]
    fn never_panics_on_odd_bytes() {
        let mut buf = [0u8; 8];
        for seed in 0u32..20_000 {
            let mut x = seed.wrapping_mul(2_654_435_761);
            for b in buf.iter_mut() {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                *b = b"ap=. 0\n9x\xff:[]"[(x % 13) as usize];
            }
            let _ = Options::parse(&buf);
        }
        // target= values: whatever parses has 1..=MAX_TARGETS entries, non-zero ports and
        // no (address, port) twice.
        let frags: [&[u8]; 12] = [
            b"1.2.3.4",
            b"1.2.3.4:9",
            b"1.2.3.5:9:9",
            b"1.2.3.6::9",
            b"",
            b"1.2.3.4:0",
            b"port=9 ",
            b"1.2.3",
            b"[fd00::2]",
            b"[fd00::2]:9",
            b"[::ffff:1.2.3.4]:9:8",
            b"[fd00::",
        ];
        let mut ok = 0;
        for seed in 0u32..20_000 {
            let mut x = seed.wrapping_mul(2_654_435_761) | 1;
            let mut line = std::vec::Vec::from(&b"target="[..]);
            for i in 0..1 + seed % 6 {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                if i > 0 {
                    line.push(b',');
                }
                line.extend_from_slice(frags[(x % 12) as usize]);
            }
            if let Ok(o) = Options::parse(&line) {
                let l = o.target_list().unwrap();
                assert!((1..=MAX_TARGETS).contains(&l.len()));
                for (i, e) in l.iter().enumerate() {
                    assert!(e.port != 0 && e.tcp_port != 0);
                    assert!(l
                        .iter()
                        .skip(i + 1)
                        .all(|f| (f.addr, f.port) != (e.addr, e.port)));
                }
                ok += 1;
            }
        }
        assert!(ok > 1000, "only {ok} target= lines parsed");
    }

    fn fmt_into(out: &mut [u8], e: &OptionError) -> usize {
        struct W<'a>(&'a mut [u8], usize);
        impl fmt::Write for W<'_> {
            fn write_str(&mut self, s: &str) -> fmt::Result {
                let end = self.1 + s.len();
                self.0
                    .get_mut(self.1..end)
                    .ok_or(fmt::Error)?
                    .copy_from_slice(s.as_bytes());
                self.1 = end;
                Ok(())
            }
        }
        let mut w = W(out, 0);
        fmt::write(&mut w, format_args!("{e}")).unwrap();
        w.1
    }
}
