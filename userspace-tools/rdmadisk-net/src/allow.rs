//! Client allow-lists: a set of IP addresses and CIDR blocks.
//!
//! An empty list allows every client. IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`) are matched
//! as the IPv4 address they carry, so a dual-stack listener sees the same decision as an
//! IPv4-only one.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// One allow-list entry: an address with a prefix length (`/32` or `/128` for a single host).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

/// Why an allow-list entry did not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CidrParseError(pub String);

impl fmt::Display for CidrParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "bad allow-list entry {:?}: expected an IP address or CIDR block",
            self.0
        )
    }
}

impl std::error::Error for CidrParseError {}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

impl Cidr {
    /// `addr/prefix`; the prefix is clamped to the address family's width.
    pub fn new(addr: IpAddr, prefix: u8) -> Self {
        let addr = canonical(addr);
        let max = if addr.is_ipv4() { 32 } else { 128 };
        Cidr {
            addr,
            prefix: prefix.min(max),
        }
    }

    /// Whether `ip` lies inside this block.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, canonical(ip)) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = if self.prefix == 0 {
                    0
                } else {
                    u32::MAX << (32 - u32::from(self.prefix))
                };
                (u32::from(net) & mask) == (u32::from(ip) & mask)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = if self.prefix == 0 {
                    0
                } else {
                    u128::MAX << (128 - u32::from(self.prefix))
                };
                (u128::from(net) & mask) == (u128::from(ip) & mask)
            }
            _ => false,
        }
    }
}

impl FromStr for Cidr {
    type Err = CidrParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || CidrParseError(s.to_string());
        let s = s.trim();
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| err())?;
        let addr = canonical(addr);
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => {
                let p: u8 = p.parse().map_err(|_| err())?;
                if p > max {
                    return Err(err());
                }
                p
            }
            None => max,
        };
        Ok(Cidr { addr, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// A list of allowed client blocks. Empty means "allow everyone".
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowList {
    entries: Vec<Cidr>,
}

impl AllowList {
    /// An allow-list that admits every client.
    pub fn allow_all() -> Self {
        AllowList::default()
    }

    /// Parse each entry as an IP address or CIDR block.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Self, CidrParseError> {
        let entries = entries
            .iter()
            .map(|e| e.as_ref().parse())
            .collect::<Result<Vec<Cidr>, _>>()?;
        Ok(AllowList { entries })
    }

    /// Whether the list has no entries (and so allows everyone).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether a client at `ip` may connect.
    pub fn allows(&self, ip: IpAddr) -> bool {
        self.entries.is_empty() || self.entries.iter().any(|c| c.contains(ip))
    }

    /// The entries, for logging.
    pub fn entries(&self) -> &[Cidr] {
        &self.entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn empty_allows_all() {
        let a = AllowList::allow_all();
        assert!(a.allows(ip("10.1.2.3")));
        assert!(a.allows(ip("::1")));
    }

    #[test]
    fn single_hosts_and_blocks() {
        let a = AllowList::parse(&["127.0.0.2", "192.168.10.0/24", "fd00::/8"]).unwrap();
        assert!(a.allows(ip("127.0.0.2")));
        assert!(!a.allows(ip("127.0.0.3")));
        assert!(a.allows(ip("192.168.10.77")));
        assert!(!a.allows(ip("192.168.11.1")));
        assert!(a.allows(ip("fd12::1")));
        assert!(!a.allows(ip("fe80::1")));
        // IPv4-mapped IPv6 matches the IPv4 entry.
        assert!(a.allows(ip("::ffff:127.0.0.2")));
        assert!(!a.allows(ip("::ffff:127.0.0.3")));
    }

    #[test]
    fn zero_prefix_and_edges() {
        let a = AllowList::parse(&["0.0.0.0/0"]).unwrap();
        assert!(a.allows(ip("1.2.3.4")));
        assert!(!a.allows(ip("::2")));
        let b = AllowList::parse(&["10.0.0.0/31"]).unwrap();
        assert!(b.allows(ip("10.0.0.1")));
        assert!(!b.allows(ip("10.0.0.2")));
    }

    #[test]
    fn rejects_garbage() {
        assert!(AllowList::parse(&["10.0.0.0/33"]).is_err());
        assert!(AllowList::parse(&["nope"]).is_err());
        assert!(AllowList::parse(&["10.0.0.1/x"]).is_err());
        assert!("::1/129".parse::<Cidr>().is_err());
        assert_eq!(
            "10.0.0.9/8".parse::<Cidr>().unwrap().to_string(),
            "10.0.0.9/8"
        );
    }
}
