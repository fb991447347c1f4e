//! The range allocator's configuration, checked at start as kube-controller-manager's
//! `startNodeIpamController` checks it: a configuration it refuses stops edgekcm with
//! upstream's message.

use super::cidrset::{CidrSet, Net};
use crate::config::Config;

/// Upstream's default node CIDR sizes.
pub const DEFAULT_MASK_IPV4: u8 = 24;
pub const DEFAULT_MASK_IPV6: u8 = 64;

/// What the allocator is built from.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    pub cluster_cidrs: Vec<Net>,
    /// One per cluster CIDR.
    pub node_mask_sizes: Vec<u8>,
    pub service_cidr: Option<Net>,
    pub secondary_service_cidr: Option<Net>,
}

/// Both families, at least one of each (`netutils.IsDualStackCIDRs`).
fn dual_stack(c: &[Net]) -> bool {
    c.iter().any(|n| n.v6) && c.iter().any(|n| !n.v6)
}

impl Params {
    /// None when node IPAM does not start (`--allocate-node-cidrs=false`); an error with
    /// upstream's text when it refuses the configuration.
    pub fn from_config(cfg: &Config) -> Result<Option<Params>, String> {
        if !cfg.kube_cloud_shared.allocate_node_cidrs {
            return Ok(None);
        }
        let kind = cfg
            .given
            .get("cidr-allocator-type")
            .map(String::as_str)
            .unwrap_or("RangeAllocator");
        match kind {
            "RangeAllocator" => {}
            "CloudAllocator" => {
                return Err("--cidr-allocator-type is set to 'CloudAllocator' but cloud provider is not configured".into())
            }
            "MultiCIDRRangeAllocator" => {
                return Err("invalid CIDR allocator type: MultiCIDRRangeAllocator, feature gate MultiCIDRRangeAllocator must be enabled".into())
            }
            "IPAMFromCluster" | "IPAMFromCloud" => {
                return Err("Error trying to Init(): legacy cloud provider support disabled at build time".into())
            }
            other => return Err(format!("invalid CIDR allocator type: {other}")),
        }
        let given = cfg
            .given
            .get("cluster-cidr")
            .map(String::as_str)
            .unwrap_or("");
        let cluster: Vec<Net> = cfg
            .kube_cloud_shared
            .cluster_cidrs
            .iter()
            .map(Net::from_cidr)
            .collect();
        if cluster.is_empty() {
            // What `netutils.ParseCIDRs` says of the one empty entry.
            return Err(format!(
                "invalid CIDR[0]: <nil> (invalid CIDR address: {})",
                given.trim()
            ));
        }
        if cluster.len() > 1 && !dual_stack(&cluster) {
            return Err(format!(
                "len of ClusterCIDRs=={} and they are not configured as dual stack (at least one from each IPFamily",
                cluster.len()
            ));
        }
        if cluster.len() > 2 {
            return Err(format!(
                "length of clusterCIDRs is:{} more than max allowed of 2",
                cluster.len()
            ));
        }
        let svc = &cfg.node_ipam.service_cluster_ip_ranges;
        let service_cidr = svc.first().map(Net::from_cidr);
        let secondary_service_cidr = svc.get(1).map(Net::from_cidr);
        if let (Some(a), Some(b)) = (service_cidr, secondary_service_cidr) {
            if a.v6 == b.v6 {
                return Err("serviceCIDR and secondaryServiceCIDR are not dualstack (from different IPfamiles)".into());
            }
        }
        let node_mask_sizes = mask_sizes(cfg, &cluster)?;
        for (c, m) in cluster.iter().zip(&node_mask_sizes) {
            if c.prefix > *m {
                return Err("Controller: Invalid --cluster-cidr, mask size of cluster CIDR must be less than or equal to --node-cidr-mask-size configured for CIDR family".into());
            }
        }
        let p = Params {
            cluster_cidrs: cluster,
            node_mask_sizes,
            service_cidr,
            secondary_service_cidr,
        };
        p.sets()?;
        Ok(Some(p))
    }

    /// One empty set per cluster CIDR.
    pub fn sets(&self) -> Result<Vec<CidrSet>, String> {
        self.cluster_cidrs
            .iter()
            .zip(&self.node_mask_sizes)
            .map(|(c, m)| CidrSet::new(*c, *m).map_err(|e| e.to_string()))
            .collect()
    }
}

/// Upstream's `setNodeCIDRMaskSizes`: the node CIDR size of each cluster CIDR.
fn mask_sizes(cfg: &Config, cluster: &[Net]) -> Result<Vec<u8>, String> {
    let o = &cfg.node_ipam;
    let sorted = |v4: u8, v6: u8| -> Vec<u8> {
        cluster.iter().map(|c| if c.v6 { v6 } else { v4 }).collect()
    };
    let (mut v4, mut v6) = (DEFAULT_MASK_IPV4, DEFAULT_MASK_IPV6);
    if cluster.len() > 1 {
        if o.node_cidr_mask_size.is_some() {
            return Err(
                "usage of --node-cidr-mask-size is not allowed with dual-stack clusters".into(),
            );
        }
        if let Some(m) = o.node_cidr_mask_size_ipv4 {
            v4 = m;
        }
        if let Some(m) = o.node_cidr_mask_size_ipv6 {
            v6 = m;
        }
        return Ok(sorted(v4, v6));
    }
    let single_v6 = cluster[0].v6;
    if let Some(m) = o.node_cidr_mask_size {
        if o.node_cidr_mask_size_ipv4.is_some() || o.node_cidr_mask_size_ipv6.is_some() {
            return Err("usage of --node-cidr-mask-size-ipv4 and --node-cidr-mask-size-ipv6 is not allowed if --node-cidr-mask-size is set. For dual-stack clusters please unset it and use IPFamily specific flags".into());
        }
        return Ok(sorted(m, m));
    }
    if let Some(m) = o.node_cidr_mask_size_ipv4 {
        if single_v6 {
            return Err("usage of --node-cidr-mask-size-ipv4 is not allowed for a single-stack IPv6 cluster".into());
        }
        v4 = m;
    }
    if let Some(m) = o.node_cidr_mask_size_ipv6 {
        if !single_v6 {
            return Err("usage of --node-cidr-mask-size-ipv6 is not allowed for a single-stack IPv4 cluster".into());
        }
        v6 = m;
    }
    Ok(sorted(v4, v6))
}
