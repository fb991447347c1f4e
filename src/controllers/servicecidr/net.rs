//! IP prefixes and addresses as Go's `net/netip` compares them for ServiceCIDRs: an IPv4
//! prefix never holds an IPv6 address (an IPv4-mapped one included), and prefixes of
//! different families never overlap.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// An address: its family and its bits (IPv4 in the low 32).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Addr {
    pub v6: bool,
    pub bits: u128,
}

impl FromStr for Addr {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        // netip.ParseAddr accepts an IPv6 zone; IPAddress names never carry one.
        match s.parse::<IpAddr>().map_err(|_| ())? {
            IpAddr::V4(a) => Ok(Addr {
                v6: false,
                bits: u128::from(u32::from(a)),
            }),
            IpAddr::V6(a) => Ok(Addr {
                v6: true,
                bits: u128::from(a),
            }),
        }
    }
}

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.v6 {
            write!(f, "{}", std::net::Ipv6Addr::from(self.bits))
        } else {
            write!(f, "{}", std::net::Ipv4Addr::from(self.bits as u32))
        }
    }
}

/// A prefix as `netip.ParsePrefix` reads it (host bits may be set; they are masked where
/// compared).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    pub addr: Addr,
    pub bits: u8,
}

impl FromStr for Prefix {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        let (a, b) = s.split_once('/').ok_or(())?;
        let addr: Addr = a.parse()?;
        // netip.ParsePrefix: decimal digits only, no sign, no leading zeros.
        if b.is_empty()
            || !b.bytes().all(|c| c.is_ascii_digit())
            || (b.len() > 1 && b.starts_with('0'))
        {
            return Err(());
        }
        let bits: u8 = b.parse().map_err(|_| ())?;
        if bits > addr.width() {
            return Err(());
        }
        Ok(Prefix { addr, bits })
    }
}

impl Addr {
    fn width(&self) -> u8 {
        if self.v6 {
            128
        } else {
            32
        }
    }
}

impl Prefix {
    fn mask(&self, bits: u8) -> u128 {
        let w = u32::from(self.addr.width());
        let full = if w == 128 {
            u128::MAX
        } else {
            (1u128 << w) - 1
        };
        let host = w - u32::from(bits);
        if host >= 128 {
            0
        } else {
            full & !((1u128 << host).wrapping_sub(1))
        }
    }

    /// The network address's bits.
    fn network(&self) -> u128 {
        self.addr.bits & self.mask(self.bits)
    }

    /// `Prefix.Overlaps`.
    pub fn overlaps(&self, o: &Prefix) -> bool {
        if self.addr.v6 != o.addr.v6 {
            return false;
        }
        let m = self.mask(self.bits.min(o.bits));
        self.addr.bits & m == o.addr.bits & m
    }

    /// `Prefix.Contains`.
    pub fn contains(&self, a: &Addr) -> bool {
        self.addr.v6 == a.v6 && a.bits & self.mask(self.bits) == self.network()
    }

    /// `PrefixContainsIP`: contains `a`, which is neither the network address nor (IPv4) the
    /// broadcast address.
    pub fn holds_host(&self, a: &Addr) -> bool {
        if self.addr.v6 == a.v6 && a.bits == self.network() {
            return false;
        }
        if !a.v6 {
            let broadcast = self.network() | (!self.mask(self.bits) & u128::from(u32::MAX));
            if !self.addr.v6 && a.bits == broadcast {
                return false;
            }
        }
        self.contains(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Prefix {
        s.parse().unwrap()
    }
    fn a(s: &str) -> Addr {
        s.parse().unwrap()
    }

    #[test]
    fn parse_as_netip() {
        assert!("10.0.0.0/24".parse::<Prefix>().is_ok());
        assert!("10.0.0.1/24".parse::<Prefix>().is_ok());
        assert!("10.0.0.0/33".parse::<Prefix>().is_err());
        assert!("10.0.0.0/024".parse::<Prefix>().is_err());
        assert!("10.0.0.0".parse::<Prefix>().is_err());
        assert!("fd00::/108".parse::<Prefix>().is_ok());
        assert!("fd00::/129".parse::<Prefix>().is_err());
    }

    #[test]
    fn overlaps_and_contains() {
        assert!(p("10.0.0.0/16").overlaps(&p("10.0.1.0/24")));
        assert!(p("10.0.1.0/24").overlaps(&p("10.0.0.0/16")));
        assert!(!p("10.0.0.0/24").overlaps(&p("10.0.1.0/24")));
        assert!(!p("10.0.0.0/8").overlaps(&p("::/0")));
        assert!(p("0.0.0.0/0").overlaps(&p("192.168.0.0/16")));
        assert!(p("fd00::/64").overlaps(&p("fd00::1:0/112")));
        assert!(p("10.0.0.0/24").contains(&a("10.0.0.255")));
        assert!(!p("10.0.0.0/24").contains(&a("::ffff:10.0.0.5")));
    }

    #[test]
    fn hosts_exclude_network_and_ipv4_broadcast() {
        let v4 = p("10.0.0.0/24");
        assert!(!v4.holds_host(&a("10.0.0.0")));
        assert!(!v4.holds_host(&a("10.0.0.255")));
        assert!(v4.holds_host(&a("10.0.0.1")));
        assert!(v4.holds_host(&a("10.0.0.254")));
        assert!(!v4.holds_host(&a("10.0.1.1")));
        let v6 = p("fd00::/120");
        assert!(!v6.holds_host(&a("fd00::")));
        assert!(v6.holds_host(&a("fd00::ff")));
        assert!(p("10.0.0.5/32").contains(&a("10.0.0.5")));
        assert!(!p("10.0.0.5/32").holds_host(&a("10.0.0.5")));
        assert_eq!(a("fd00::1").to_string(), "fd00::1");
        assert_eq!(a("10.1.2.3").to_string(), "10.1.2.3");
    }
}
