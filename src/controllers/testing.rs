//! The test harness of a reconciling controller: a cache built from objects, changes fed
//! through the controller's `keys_for` as the manager feeds them, a reconcile at a chosen
//! time, and its outcome flattened into the writes and Events it asks for.
//!
//! ```ignore
//! let mut h = Harness::new(ServiceAccountController);
//! h.add(NAMESPACES, json!({"metadata": {"name": "a"}, "status": {"phase": "Active"}}));
//! assert_eq!(h.take_queued(), ["a"]);
//! let w = h.sync("a");
//! assert_eq!(w.created_names(), ["default"]);
//! ```

use super::{Action, Controller, Cx, EventType, Outcome};
use crate::api::client::Client;
use crate::api::kubeconfig::RestConfig;
use crate::api::Kind;
use crate::cache::{Cache, DeltaKind};
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The configuration a command line gives (`edgekcm run` with `args`).
pub fn config(args: &[&str]) -> crate::config::Config {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    match crate::cli::parse(&args) {
        Ok(crate::cli::Command::Run(c)) => *c,
        other => panic!("{args:?}: {other:?}"),
    }
}

/// The settings the manager runs the controller `name` with (its row of the controller
/// table, under the default configuration).
pub fn row(name: &str) -> super::Settings {
    super::registry::info(name)
        .expect("a row of the controller table")
        .settings(&crate::config::Config::default())
}

/// A cache filled with `objects` (no handlers run) and a client that is never contacted.
pub fn cx_with(objects: &[(Kind, Value)]) -> (Arc<Cache>, Client) {
    let (cache, client) = empty();
    for (k, v) in objects {
        cache.store(*k).apply(DeltaKind::Added, v.clone());
    }
    (cache, client)
}

fn empty() -> (Arc<Cache>, Client) {
    let cfg = RestConfig {
        server: "http://127.0.0.1:9".into(),
        source: "test".into(),
        ..Default::default()
    };
    let client = Client::new(&cfg, 0.0, 1, "test").expect("client");
    (Cache::new(client.clone()), client)
}

/// A controller with its cache, as the manager runs it, without a server.
pub struct Harness<C: Controller> {
    pub ctrl: C,
    pub cache: Arc<Cache>,
    pub client: Client,
    pub now: SystemTime,
    queued: BTreeSet<String>,
}

impl<C: Controller> Harness<C> {
    pub fn new(ctrl: C) -> Self {
        let (cache, client) = empty();
        // The informers the manager would make, so objects are stored in the readers' shape.
        for w in ctrl.watches() {
            cache.informer_for(&w);
        }
        Harness {
            ctrl,
            cache,
            client,
            now: SystemTime::now(),
            queued: BTreeSet::new(),
        }
    }

    /// Reconcile at this time (RFC 3339).
    pub fn at(mut self, rfc3339: &str) -> Self {
        self.now = crate::compat::timefmt::parse_rfc3339(rfc3339).expect("an RFC 3339 time");
        self
    }

    fn change(&mut self, kind: Kind, delta: DeltaKind, o: Value) -> &mut Self {
        let mut fed = false;
        for w in self.ctrl.watches().into_iter().filter(|w| w.kind == kind) {
            fed = true;
            if let Some(d) = self.cache.store_for(&w).apply(delta, o.clone()) {
                self.queued.extend(
                    self.ctrl
                        .delayed_keys_for(&w, &d, &self.cache)
                        .into_iter()
                        .map(|(k, _)| k),
                );
            }
        }
        if !fed {
            // Read by the controller without a watch of its own (a lookup): stored only.
            self.cache.store(kind).apply(delta, o);
        }
        self
    }

    /// An object added (as a watch brings it); its keys are queued.
    pub fn add(&mut self, kind: Kind, o: Value) -> &mut Self {
        self.change(kind, DeltaKind::Added, o)
    }

    /// An object changed.
    pub fn update(&mut self, kind: Kind, o: Value) -> &mut Self {
        self.change(kind, DeltaKind::Updated, o)
    }

    /// An object deleted.
    pub fn delete(&mut self, kind: Kind, o: Value) -> &mut Self {
        self.change(kind, DeltaKind::Deleted, o)
    }

    /// The keys queued since the last call, sorted.
    pub fn take_queued(&mut self) -> Vec<String> {
        std::mem::take(&mut self.queued).into_iter().collect()
    }

    /// Reconcile `key` at `now`; the controller is then told the sync ended as if its writes
    /// went well (see [`Controller::synced`]).
    pub fn outcome(&self, key: &str) -> Outcome {
        let cx = Cx {
            cache: &self.cache,
            now: self.now,
            client: &self.client,
        };
        let began = std::time::Instant::now();
        let out = self.ctrl.reconcile(&cx, key).expect("reconcile");
        self.ctrl.synced(key, began, super::SyncEnd::of(None, &out));
        out
    }

    /// Reconcile `key` at `now`, flattened.
    pub fn sync(&self, key: &str) -> Writes {
        Writes::of(&self.outcome(key))
    }
}

fn name_or_prefix(o: &Value) -> String {
    match crate::obj::name(o) {
        "" => o["metadata"]["generateName"]
            .as_str()
            .unwrap_or("")
            .to_string(),
        n => n.to_string(),
    }
}

/// One server-side apply of [`Writes::applies`].
pub type Applied = (Kind, String, &'static str, Value, Option<Box<Writes>>);

/// What an outcome asks for, flattened: composite actions opened up, the Events of a
/// reported write listed as if it succeeded.
#[derive(Debug, Default)]
pub struct Writes {
    pub creates: Vec<(Kind, Value)>,
    /// PUTs of whole objects and of subresources (`status`, `finalize`, ...).
    pub updates: Vec<(Kind, Option<&'static str>, Value)>,
    /// (kind, namespace/name, patch).
    pub patches: Vec<(Kind, String, Value)>,
    /// (kind, namespace/name).
    pub deletes: Vec<(Kind, String)>,
    /// Server-side applies: (kind, namespace/name, field manager, object, fallback opened).
    pub applies: Vec<Applied>,
    /// (type, reason, message).
    pub events: Vec<(EventType, String, String)>,
    pub requeue_after: Option<Duration>,
}

impl Writes {
    pub fn of(o: &Outcome) -> Writes {
        let mut w = Writes {
            requeue_after: o.requeue_after,
            ..Writes::default()
        };
        for a in &o.actions {
            w.open(a);
        }
        w
    }

    fn open(&mut self, a: &Action) {
        match a {
            Action::Create { kind, object, .. } => self.creates.push((*kind, object.clone())),
            Action::Update { kind, object } => self.updates.push((*kind, None, object.clone())),
            Action::UpdateSubresource {
                kind,
                object,
                subresource,
            } => self
                .updates
                .push((*kind, Some(*subresource), object.clone())),
            Action::Patch {
                kind,
                namespace,
                name,
                patch,
                ..
            } => self
                .patches
                .push((*kind, crate::obj::make_key(namespace, name), patch.clone())),
            Action::Delete {
                kind,
                namespace,
                name,
                ..
            } => self
                .deletes
                .push((*kind, crate::obj::make_key(namespace, name))),
            Action::Apply {
                kind,
                namespace,
                name,
                field_manager,
                object,
                fallback,
                ..
            } => self.applies.push((
                *kind,
                crate::obj::make_key(namespace, name),
                field_manager,
                object.clone(),
                fallback.as_deref().map(|f| {
                    let mut w = Writes::default();
                    w.open(f);
                    Box::new(w)
                }),
            )),
            Action::Event(e) => {
                self.events
                    .push((e.event_type, e.reason.clone(), e.message.clone()))
            }
            Action::Reported { action, report } => {
                let name = match action.as_ref() {
                    Action::Create { object, .. } => name_or_prefix(object),
                    Action::Delete { name, .. } => name.clone(),
                    _ => String::new(),
                };
                self.open(action);
                if report.success_reason.is_empty() {
                    return;
                }
                self.events.push((
                    EventType::Normal,
                    report.success_reason.to_string(),
                    format!("{}{name}", report.success_prefix),
                ));
            }
            Action::SlowStart(v) | Action::Parallel(v) => {
                for a in v {
                    self.open(a);
                }
            }
        }
    }

    /// Names (or generateName prefixes) of the objects created.
    pub fn created_names(&self) -> Vec<String> {
        self.creates
            .iter()
            .map(|(_, o)| name_or_prefix(o))
            .collect()
    }

    /// Whether nothing is written (requeues aside).
    pub fn is_empty(&self) -> bool {
        self.creates.is_empty()
            && self.updates.is_empty()
            && self.patches.is_empty()
            && self.deletes.is_empty()
            && self.applies.is_empty()
            && self.events.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::resources::{CONFIGMAPS, PODS};
    use crate::cache::Delta;
    use crate::controller::{ObjectRef, Report, Watch};
    use serde_json::json;

    /// Keys pods by name; wants one pod per ConfigMap, created slow-start with a report, and
    /// looks again once the ConfigMap's `data.at` time has come.
    struct Fake;

    impl Controller for Fake {
        fn watches(&self) -> Vec<Watch> {
            vec![Watch::full(CONFIGMAPS)]
        }
        fn keys_for(&self, _: &Watch, d: &Delta, _: &Cache) -> Vec<String> {
            vec![crate::obj::key(d.object())]
        }
        fn reconcile(&self, cx: &Cx, key: &str) -> crate::Result<Outcome> {
            let Some(cm) = cx.cache.store(CONFIGMAPS).get(key) else {
                return Ok(Outcome::none());
            };
            let at = cm["data"]["at"].as_str().unwrap_or("");
            let at = crate::compat::timefmt::parse_rfc3339(at).unwrap_or(cx.now);
            let create = Action::Create {
                kind: PODS,
                namespace: "ns".into(),
                object: json!({"metadata": {"generateName": "p-"}}),
            };
            Ok(Outcome {
                actions: vec![Action::SlowStart(vec![Action::Reported {
                    action: Box::new(create),
                    report: Report {
                        about: ObjectRef::of(&CONFIGMAPS, &cm),
                        success_reason: "SuccessfulCreate",
                        success_prefix: "Created pod: ",
                        failure_reason: "FailedCreate",
                        failure_prefix: "Error creating: ".into(),
                    },
                }])],
                requeue_after: at.duration_since(cx.now).ok(),
                ..Outcome::default()
            })
        }
    }

    #[test]
    fn changes_are_keyed_and_outcomes_flattened_at_the_given_time() {
        let mut h = Harness::new(Fake).at("2024-01-01T00:00:00Z");
        let cm = |at: &str| {
            json!({"metadata": {"name": "c", "namespace": "ns", "resourceVersion": at.len().to_string()},
                "data": {"at": at}})
        };
        h.add(CONFIGMAPS, cm("2024-01-01T00:00:30Z"));
        assert_eq!(h.take_queued(), ["ns/c"]);
        let w = h.sync("ns/c");
        assert_eq!(w.created_names(), ["p-"]);
        assert_eq!(
            w.events,
            [(
                EventType::Normal,
                "SuccessfulCreate".to_string(),
                "Created pod: p-".to_string()
            )]
        );
        assert_eq!(w.requeue_after, Some(Duration::from_secs(30)));
        h.update(CONFIGMAPS, cm("2024-01-01T00:01:00.5Z"));
        assert_eq!(h.take_queued(), ["ns/c"]);
        assert_eq!(
            h.sync("ns/c").requeue_after,
            Some(Duration::from_millis(60_500))
        );
        // Pods are not watched: stored for lookups, nothing queued.
        h.add(PODS, json!({"metadata": {"name": "p", "namespace": "ns"}}));
        assert!(h.take_queued().is_empty());
        assert!(h.sync("ns/missing").is_empty());
    }
}
