//! One cluster CIDR cut into node CIDRs of one size, and which of them are taken (upstream's
//! `cidrset.CidrSet`): a bitmap indexed from the start of the cluster CIDR, and the next
//! candidate after the last allocation, so that the same sequence of allocations, occupations
//! and releases hands out the same CIDRs as kube-controller-manager.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Upstream's limit on how many bits a node CIDR of an IPv6 cluster may add to the cluster
/// mask (its bitmap is not compressed).
const CLUSTER_SUBNET_MAX_DIFF: u8 = 16;

/// An IP network with its address masked (Go's `net.IPNet` from `ParseCIDR`); IPv4 addresses
/// in the low 32 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Net {
    pub addr: u128,
    pub prefix: u8,
    pub v6: bool,
}

impl Net {
    pub fn bits(&self) -> u8 {
        if self.v6 {
            128
        } else {
            32
        }
    }

    /// The mask of `prefix` bits in a `bits`-bit address.
    fn mask(prefix: u8, bits: u8) -> u128 {
        let all = if bits == 128 {
            u128::MAX
        } else {
            (1u128 << bits) - 1
        };
        match all.checked_shr(u32::from(prefix)) {
            _ if prefix == 0 => 0,
            Some(host) if prefix < bits => all & !host,
            _ => all,
        }
    }

    pub fn new(addr: IpAddr, prefix: u8) -> Net {
        let (a, v6) = match addr {
            IpAddr::V4(a) => (u128::from(u32::from(a)), false),
            IpAddr::V6(a) => (u128::from(a), true),
        };
        let bits = if v6 { 128 } else { 32 };
        Net {
            addr: a & Net::mask(prefix, bits),
            prefix,
            v6,
        }
    }

    /// Go's `ParseCIDR`: the address is masked (`10.244.1.5/24` is `10.244.1.0/24`).
    pub fn parse(s: &str) -> Result<Net, String> {
        let c: crate::compat::cidr::Cidr = s.parse()?;
        Ok(Net::new(c.addr, c.prefix))
    }

    pub fn from_cidr(c: &crate::compat::cidr::Cidr) -> Net {
        Net::new(c.addr, c.prefix)
    }

    fn own_mask(&self) -> u128 {
        Net::mask(self.prefix, self.bits())
    }

    /// Go's `IPNet.Contains` (false for the other family).
    pub fn contains(&self, v6: bool, ip: u128) -> bool {
        v6 == self.v6 && ip & self.own_mask() == self.addr
    }

    /// Whether the two networks share an address (one contains the other).
    pub fn overlaps(&self, o: &Net) -> bool {
        self.contains(o.v6, o.addr & self.own_mask())
            || o.contains(self.v6, self.addr & o.own_mask())
    }
}

impl fmt::Display for Net {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.v6 {
            write!(f, "{}/{}", Ipv6Addr::from(self.addr), self.prefix)
        } else {
            write!(f, "{}/{}", Ipv4Addr::from(self.addr as u32), self.prefix)
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetError {
    /// Upstream's `ErrCIDRRangeNoCIDRsRemaining`.
    NoneRemaining,
    /// Upstream's `ErrCIDRSetSubNetTooBig`.
    SubNetTooBig,
    /// A CIDR outside the cluster CIDR, or of the other family.
    OutOfRange(String),
}

impl fmt::Display for SetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SetError::NoneRemaining => f.write_str(
                "CIDR allocation failed; there are no remaining CIDRs left to allocate in the accepted range",
            ),
            SetError::SubNetTooBig => {
                f.write_str("New CIDR set failed; the node CIDR size is too big")
            }
            SetError::OutOfRange(m) => f.write_str(m),
        }
    }
}

/// The node CIDRs of one cluster CIDR.
#[derive(Debug, Clone)]
pub struct CidrSet {
    cluster: Net,
    node_prefix: u8,
    max: u64,
    allocated: u64,
    next_candidate: u64,
    /// Bit `i` set: node CIDR `i` is taken. Grown on demand (as Go's `big.Int`).
    used: Vec<u64>,
    /// For `/metrics`: CIDRs taken and freed, the tries of each allocation, and whether
    /// anything changed yet (upstream's usage gauge appears with the first change).
    pub stats: SetStats,
}

/// The counters behind the `node_ipam_controller_cidrset_*` families of one set.
#[derive(Debug, Clone)]
pub struct SetStats {
    pub allocations: u64,
    pub releases: u64,
    pub tries: crate::metrics::Histogram,
    pub changed: bool,
}

/// `cidrset_allocation_tries_per_request`'s buckets: 1, 5, 25, 125, 625.
pub const TRIES_BUCKETS: [f64; 5] = [1.0, 5.0, 25.0, 125.0, 625.0];

impl CidrSet {
    pub fn new(cluster: Net, node_prefix: u8) -> Result<CidrSet, SetError> {
        if cluster.v6 && node_prefix.saturating_sub(cluster.prefix) > CLUSTER_SUBNET_MAX_DIFF {
            return Err(SetError::SubNetTooBig);
        }
        if node_prefix < cluster.prefix || node_prefix > cluster.bits() {
            return Err(SetError::SubNetTooBig);
        }
        Ok(CidrSet {
            cluster,
            node_prefix,
            max: 1u64 << (node_prefix - cluster.prefix),
            allocated: 0,
            next_candidate: 0,
            used: Vec::new(),
            stats: SetStats {
                allocations: 0,
                releases: 0,
                tries: crate::metrics::Histogram::new(&TRIES_BUCKETS),
                changed: false,
            },
        })
    }

    pub fn cluster(&self) -> Net {
        self.cluster
    }
    pub fn max_cidrs(&self) -> u64 {
        self.max
    }
    pub fn allocated(&self) -> u64 {
        self.allocated
    }

    fn bit(&self, i: u64) -> bool {
        self.used
            .get((i / 64) as usize)
            .is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    fn set_bit(&mut self, i: u64, on: bool) {
        let w = (i / 64) as usize;
        if w >= self.used.len() {
            if !on {
                return;
            }
            self.used.resize(w + 1, 0);
        }
        if on {
            self.used[w] |= 1 << (i % 64);
        } else {
            self.used[w] &= !(1 << (i % 64));
        }
    }

    /// Node CIDR number `index`.
    pub fn block(&self, index: u64) -> Net {
        let shift = self.cluster.bits() - self.node_prefix;
        Net {
            addr: self.cluster.addr | (u128::from(index) << shift),
            prefix: self.node_prefix,
            v6: self.cluster.v6,
        }
    }

    /// The first free node CIDR at or after the one after the last allocated, wrapping.
    pub fn allocate_next(&mut self) -> Result<Net, SetError> {
        if self.allocated == self.max {
            return Err(SetError::NoneRemaining);
        }
        let mut candidate = self.next_candidate;
        let mut tries = 0;
        while tries < self.max {
            if !self.bit(candidate) {
                break;
            }
            candidate = (candidate + 1) % self.max;
            tries += 1;
        }
        self.next_candidate = (candidate + 1) % self.max;
        self.set_bit(candidate, true);
        self.allocated += 1;
        self.stats.allocations += 1;
        self.stats.tries.observe(tries as f64);
        self.stats.changed = true;
        Ok(self.block(candidate))
    }

    fn index_for(&self, addr: u128) -> Result<u64, SetError> {
        let shift = self.cluster.bits() - self.node_prefix;
        let index = (self.cluster.addr ^ addr) >> shift;
        if index >= u128::from(self.max) {
            let ip = Net {
                addr,
                prefix: 0,
                v6: self.cluster.v6,
            }
            .to_string();
            let ip = ip.trim_end_matches("/0");
            return Err(SetError::OutOfRange(format!(
                "CIDR: {ip}/{} is out of the range of CIDR allocator",
                self.node_prefix
            )));
        }
        Ok(index as u64)
    }

    /// The node CIDR indices `cidr` covers.
    fn range_of(&self, cidr: &Net) -> Result<(u64, u64), SetError> {
        if !self.cluster.overlaps(cidr) {
            return Err(SetError::OutOfRange(format!(
                "cidr {cidr} is out the range of cluster cidr {}",
                self.cluster
            )));
        }
        if self.cluster.prefix >= cidr.prefix {
            return Ok((0, self.max - 1));
        }
        let node_mask = Net::mask(self.node_prefix, self.cluster.bits());
        let begin = self.index_for(cidr.addr & node_mask)?;
        let last =
            cidr.addr | (Net::mask(cidr.prefix, cidr.bits()) ^ Net::mask(cidr.bits(), cidr.bits()));
        let end = self.index_for(last & node_mask)?;
        Ok((begin, end))
    }

    /// Mark every node CIDR within `cidr` taken (also those taken already).
    pub fn occupy(&mut self, cidr: &Net) -> Result<(), SetError> {
        let (begin, end) = self.range_of(cidr)?;
        for i in begin..=end {
            if !self.bit(i) {
                self.set_bit(i, true);
                self.allocated += 1;
                self.stats.allocations += 1;
            }
        }
        self.stats.changed = true;
        Ok(())
    }

    /// Mark every node CIDR within `cidr` free.
    pub fn release(&mut self, cidr: &Net) -> Result<(), SetError> {
        let (begin, end) = self.range_of(cidr)?;
        for i in begin..=end {
            if self.bit(i) {
                self.set_bit(i, false);
                self.allocated -= 1;
                self.stats.releases += 1;
            }
        }
        self.stats.changed = true;
        Ok(())
    }

    /// Whether node CIDR `cidr` (of this set's size) is taken.
    pub fn is_used(&self, cidr: &Net) -> bool {
        match self.range_of(cidr) {
            Ok((b, e)) => (b..=e).all(|i| self.bit(i)),
            Err(_) => false,
        }
    }
}
