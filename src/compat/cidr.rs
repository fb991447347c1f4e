//! IP networks in CIDR notation, as the `--cluster-cidr` and `--service-cluster-ip-range`
//! flags give them.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// An IP network in CIDR notation (`10.244.0.0/16`, `fd00::/108`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let bad = || format!("invalid CIDR address: {s}");
        let (a, p) = s.split_once('/').ok_or_else(bad)?;
        let addr: IpAddr = a.parse().map_err(|_| bad())?;
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let prefix: u8 = p.parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > max {
            return Err(bad());
        }
        Ok(Cidr { addr, prefix })
    }
}

impl Cidr {
    /// The first address after the network address (`10.96.0.0/12` -> `10.96.0.1`); None for a
    /// range with no room for it (/32, /31, /128, /127).
    pub fn first_host(&self) -> Option<IpAddr> {
        match self.addr {
            IpAddr::V4(a) => {
                if self.prefix >= 31 {
                    return None;
                }
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                Some(IpAddr::V4(std::net::Ipv4Addr::from(
                    (u32::from(a) & mask) + 1,
                )))
            }
            IpAddr::V6(a) => {
                if self.prefix >= 127 {
                    return None;
                }
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                Some(IpAddr::V6(std::net::Ipv6Addr::from(
                    (u128::from(a) & mask) + 1,
                )))
            }
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_parse() {
        let c: Cidr = "10.244.0.0/16".parse().unwrap();
        assert_eq!(c.prefix, 16);
        assert_eq!(c.to_string(), "10.244.0.0/16");
        assert!("fd00::/108".parse::<Cidr>().is_ok());
        assert!("10.0.0.0/33".parse::<Cidr>().is_err());
        assert!("10.0.0.0".parse::<Cidr>().is_err());
        let first = |s: &str| {
            s.parse::<Cidr>()
                .unwrap()
                .first_host()
                .map(|a| a.to_string())
        };
        assert_eq!(first("10.96.0.0/12").as_deref(), Some("10.96.0.1"));
        assert_eq!(first("10.96.3.7/12").as_deref(), Some("10.96.0.1"));
        assert_eq!(first("10.0.0.0/24").as_deref(), Some("10.0.0.1"));
        assert_eq!(first("0.0.0.0/0").as_deref(), Some("0.0.0.1"));
        assert_eq!(first("fd00:10:96::/112").as_deref(), Some("fd00:10:96::1"));
        assert_eq!(first("10.0.0.0/31"), None);
    }
}
