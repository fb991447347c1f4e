//! Controllers: each reads the cache, decides, and returns actions; the manager applies them.

pub mod attachdetach;
pub mod bootstrap;
pub mod certificates;
pub mod clusterroleaggregation;
pub mod cronjob;
pub mod daemonset;
pub mod deployment;
pub mod devicetainteviction;
pub mod disruption;
pub mod endpoints;
pub mod endpointslice;
pub mod endpointslicemirroring;
pub mod ephemeral;
pub mod garbagecollector;
pub mod job;
pub mod kit;
pub mod legacytokencleaner;
pub mod namespace;
pub mod nodeipam;
pub mod nodelifecycle;
pub mod podautoscaler;
pub mod podgc;
pub mod podgroupprotection;
pub mod pvbinder;
pub mod refmanager;
pub mod registry;
pub mod replicaset;
pub mod resourceclaim;
pub mod resourcepoolstatusrequest;
pub mod resourcequota;
pub mod rootca;
pub mod selinuxwarning;
pub mod serviceaccount;
pub mod servicecidr;
pub mod statefulset;
pub mod storageversiongc;
pub mod storageversionmigrator;
pub mod tainteviction;
pub mod tokens;
pub mod ttl;
pub mod ttlafterfinished;
pub mod vacprotection;
pub mod vapstatus;
pub mod volumeexpand;
pub mod volumeprotection;

use crate::cache::Delta;
pub use crate::controller::*;

/// For controllers keyed by namespace: the namespace to look at after a Namespace change
/// (none after its deletion).
pub fn namespace_key(d: &Delta) -> Vec<String> {
    if d.kind == crate::cache::DeltaKind::Deleted {
        return vec![];
    }
    vec![crate::obj::name(d.object()).to_string()]
}

#[cfg(test)]
pub(crate) mod testing;

#[cfg(test)]
mod tests {
    use crate::cache::Cache;
    use crate::events::Recorder;
    use crate::manager::Manager;
    use crate::sandbox::{Sandbox, SandboxOptions};
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn work_queues_carry_upstream_names_and_self_driven_controllers_add_none() {
        let sb = Sandbox::start(SandboxOptions::default()).expect("sandbox");
        let client = sb.client("test");
        let (cache, recorder) = (Cache::new(client.clone()), Recorder::start());
        let mut m = Manager::new(cache, Arc::new(recorder));
        m.add(
            crate::controller::Runnable::reconciles(
                crate::controllers::replicaset::ReplicaSetController::new(
                    crate::controllers::replicaset::Flavor::ReplicationController,
                ),
            ),
            super::testing::row("replicationcontroller"),
            client.clone(),
        );
        m.add(
            crate::controller::Runnable::drives(
                crate::controllers::namespace::NamespaceController::new(
                    1,
                    Duration::from_secs(300),
                ),
            ),
            super::testing::row("namespace"),
            client,
        );
        let text = crate::metrics::render();
        assert!(
            text.contains("workqueue_depth{name=\"replicationmanager\"} 0"),
            "{text}"
        );
        assert!(!text.contains("name=\"replicationcontroller-controller\""));
        assert!(!text.contains("name=\"namespace-controller\""));
    }
}
