//! What controllers share, as upstream keeps it in `controller_utils.go` and `podutil`: pod
//! predicates and the pod a template makes ([`pod`]), the scale-down ranking ([`ranking`]),
//! label selectors ([`selector`]), the owners to sync after a child changed ([`owners`]), status conditions ([`conditions`]), own writes not yet confirmed by the watch ([`inflight`]), the pods of Services and their endpoints' predicates ([`servicepods`]), the endpoints' trigger time ([`trigger`]), volume names and classes ([`volume`]), periodic passes ([`periodic`]), whether the API server serves a resource ([`served`]), the claims a pod uses ([`podclaims`]), the stale-sync-skips counters ([`staleskips`]), the pod deletion metrics of the eviction controllers ([`deletions`]), syncs counted by HTTP code ([`syncsbycode`]). Owner references and adoption are in
//! [`super::refmanager`]. A new controller takes these instead of writing its own.

pub mod conditions;
pub mod deletions;
pub mod history;
pub mod inflight;
pub mod nodefit;
pub mod owners;
pub mod periodic;
pub mod pod;
pub mod podclaims;
pub mod ranking;
pub mod selector;
pub mod served;
pub mod servicepods;
pub mod slicetracker;
pub mod staleskips;
pub mod syncsbycode;
pub mod taints;
pub mod trigger;
pub mod volume;
