//! Tests of the owner graph: observed changes in, the graph and the UIDs to look at out.

use super::*;

pub fn oref(kind: &str, name: &str, uid: &str, block: bool) -> OwnerRef {
    OwnerRef {
        api_version: "v1".into(),
        kind: kind.into(),
        name: name.into(),
        uid: uid.into(),
        controller: false,
        block_owner_deletion: block,
    }
}

fn id(kind: &str, ns: &str, name: &str, uid: &str) -> Identity {
    Identity {
        api_version: "v1".into(),
        kind: kind.into(),
        name: name.into(),
        uid: uid.into(),
        namespace: ns.into(),
    }
}

fn seen(i: Identity, owners: Vec<OwnerRef>) -> Seen {
    Seen {
        identity: i,
        owners,
        ..Default::default()
    }
}

fn up(g: &mut Graph, s: Seen) -> Effects {
    let mut fx = Effects::default();
    g.process(Change::Upsert { old: None, new: s }, &mut fx);
    fx
}

#[test]
fn virtual_owner_then_observed() {
    let mut g = Graph::new();
    let fx = up(
        &mut g,
        seen(
            id("ConfigMap", "ns", "child", "c1"),
            vec![oref("ConfigMap", "owner", "o1", false)],
        ),
    );
    // The unknown owner becomes a virtual node, queued for a check.
    assert_eq!(fx.attempt_to_delete, vec!["o1"]);
    let o = g.get("o1").expect("virtual owner");
    assert!(o.virtual_);
    assert_eq!(o.identity.namespace, "ns");
    assert!(o.dependents.contains("c1"));
    // Observing it keeps the dependents and nothing is queued.
    let fx = up(&mut g, seen(id("ConfigMap", "ns", "owner", "o1"), vec![]));
    assert_eq!(fx, Effects::default());
    assert!(g.get("o1").is_some_and(Node::observed));
    assert!(g.get("o1").is_some_and(|n| n.dependents.contains("c1")));
}

#[test]
fn owner_deleted_queues_dependents_and_marks_absent() {
    let mut g = Graph::new();
    up(&mut g, seen(id("ConfigMap", "ns", "owner", "o1"), vec![]));
    up(
        &mut g,
        seen(
            id("ConfigMap", "ns", "a", "a1"),
            vec![oref("ConfigMap", "owner", "o1", false)],
        ),
    );
    up(
        &mut g,
        seen(
            id("ConfigMap", "ns", "b", "b1"),
            vec![oref("ConfigMap", "owner", "o1", true)],
        ),
    );
    let mut fx = Effects::default();
    g.process(
        Change::Deleted(seen(id("ConfigMap", "ns", "owner", "o1"), vec![])),
        &mut fx,
    );
    assert_eq!(fx.attempt_to_delete, vec!["a1", "b1"]);
    assert_eq!(fx.absent, vec![id("ConfigMap", "ns", "owner", "o1")]);
    assert!(g.get("o1").is_none());
    // Dependents keep their references; their removal cleans up the index.
    let mut fx = Effects::default();
    g.process(
        Change::Deleted(seen(
            id("ConfigMap", "ns", "a", "a1"),
            vec![oref("ConfigMap", "owner", "o1", false)],
        )),
        &mut fx,
    );
    assert!(fx.absent.is_empty());
    assert_eq!(g.len(), 1);
}

#[test]
fn foreground_deletion_queues_dependents_and_blocking_is_tracked() {
    let mut g = Graph::new();
    up(&mut g, seen(id("ConfigMap", "ns", "owner", "o1"), vec![]));
    up(
        &mut g,
        seen(
            id("ConfigMap", "ns", "a", "a1"),
            vec![oref("ConfigMap", "owner", "o1", true)],
        ),
    );
    up(
        &mut g,
        seen(
            id("ConfigMap", "ns", "b", "b1"),
            vec![oref("ConfigMap", "owner", "o1", false)],
        ),
    );
    let old = seen(id("ConfigMap", "ns", "owner", "o1"), vec![]);
    let mut new = old.clone();
    new.deleting = true;
    new.finalizers = vec![FINALIZER_FOREGROUND.into()];
    let mut fx = Effects::default();
    g.process(
        Change::Upsert {
            old: Some(old),
            new: new.clone(),
        },
        &mut fx,
    );
    assert_eq!(fx.attempt_to_delete, vec!["a1", "b1", "o1"]);
    let o = g.get("o1").expect("owner");
    assert!(o.deleting_dependents && o.being_deleted);
    let blocking: Vec<&str> = g
        .blocking_dependents("o1")
        .iter()
        .map(|n| n.identity.uid.as_str())
        .collect();
    assert_eq!(blocking, vec!["a1"]);
    // The same update again starts nothing new.
    let mut fx = Effects::default();
    g.process(
        Change::Upsert {
            old: Some(new.clone()),
            new: new.clone(),
        },
        &mut fx,
    );
    assert_eq!(fx, Effects::default());
    // A blocking dependent going away wakes the owner.
    let mut fx = Effects::default();
    g.process(
        Change::Deleted(seen(
            id("ConfigMap", "ns", "a", "a1"),
            vec![oref("ConfigMap", "owner", "o1", true)],
        )),
        &mut fx,
    );
    assert_eq!(fx.attempt_to_delete, vec!["o1"]);
    assert!(g.blocking_dependents("o1").is_empty());
}

#[test]
fn orphan_finalizer_queues_orphaning() {
    let mut g = Graph::new();
    let mut s = seen(id("ConfigMap", "ns", "owner", "o1"), vec![]);
    s.deleting = true;
    s.finalizers = vec![FINALIZER_ORPHAN.into()];
    let fx = up(&mut g, s);
    assert_eq!(fx.attempt_to_orphan, vec!["o1"]);
    assert!(fx.attempt_to_delete.is_empty());
}

#[test]
fn unblocking_a_reference_wakes_its_owner() {
    let mut g = Graph::new();
    up(&mut g, seen(id("ConfigMap", "ns", "owner", "o1"), vec![]));
    let blocked = seen(
        id("ConfigMap", "ns", "a", "a1"),
        vec![oref("ConfigMap", "owner", "o1", true)],
    );
    up(&mut g, blocked.clone());
    let unblocked = seen(
        id("ConfigMap", "ns", "a", "a1"),
        vec![oref("ConfigMap", "owner", "o1", false)],
    );
    let mut fx = Effects::default();
    g.process(
        Change::Upsert {
            old: Some(blocked),
            new: unblocked,
        },
        &mut fx,
    );
    assert_eq!(fx.attempt_to_delete, vec!["o1"]);
    // References removed: the dependent leaves the owner's set.
    let mut fx = Effects::default();
    g.process(
        Change::Upsert {
            old: None,
            new: seen(id("ConfigMap", "ns", "a", "a1"), vec![]),
        },
        &mut fx,
    );
    assert!(g.get("o1").is_some_and(|n| n.dependents.is_empty()));
    assert!(fx.attempt_to_delete.is_empty());
}

#[test]
fn namespace_mismatch_is_reported() {
    let mut g = Graph::new();
    up(&mut g, seen(id("ConfigMap", "ns1", "owner", "o1"), vec![]));
    let fx = up(
        &mut g,
        seen(
            id("ConfigMap", "ns2", "child", "c1"),
            vec![oref("ConfigMap", "owner", "o1", false)],
        ),
    );
    assert_eq!(fx.attempt_to_delete, vec!["c1"]);
    assert_eq!(fx.invalid_refs.len(), 1);
    assert_eq!(
        fx.invalid_refs[0].message(),
        "ownerRef [v1/ConfigMap, namespace: ns2, name: owner, uid: o1] does not exist in namespace \"ns2\""
    );
    assert_eq!(fx.invalid_refs[0].dependent.name, "child");
}

#[test]
fn child_seen_before_owner_in_other_namespace_is_reported_on_observation() {
    let mut g = Graph::new();
    up(
        &mut g,
        seen(
            id("ConfigMap", "ns2", "child", "c1"),
            vec![oref("ConfigMap", "owner", "o1", false)],
        ),
    );
    let fx = up(&mut g, seen(id("ConfigMap", "ns1", "owner", "o1"), vec![]));
    assert_eq!(fx.attempt_to_delete, vec!["c1"]);
    assert_eq!(fx.invalid_refs.len(), 1);
    assert_eq!(
        g.get("o1").map(|n| n.identity.namespace.as_str()),
        Some("ns1")
    );
}

#[test]
fn cluster_scoped_owners_are_fine_from_any_namespace() {
    let mut g = Graph::new();
    up(&mut g, seen(id("Node", "", "n1", "n1"), vec![]));
    let fx = up(
        &mut g,
        seen(
            id("Pod", "ns", "p", "p1"),
            vec![oref("Node", "n1", "n1", false)],
        ),
    );
    assert_eq!(fx, Effects::default());
}

#[test]
fn virtual_delete_of_virtual_owner() {
    let mut g = Graph::new();
    up(
        &mut g,
        seen(
            id("ConfigMap", "ns", "a", "a1"),
            vec![oref("ConfigMap", "gone", "o1", false)],
        ),
    );
    let mut fx = Effects::default();
    g.process(
        Change::VirtualDelete(id("ConfigMap", "ns", "gone", "o1")),
        &mut fx,
    );
    assert!(g.get("o1").is_none());
    assert_eq!(fx.attempt_to_delete, vec!["a1"]);
    assert_eq!(fx.absent, vec![id("ConfigMap", "ns", "gone", "o1")]);
}

#[test]
fn virtual_delete_with_disagreeing_dependents_tries_the_other_identity() {
    let mut g = Graph::new();
    up(
        &mut g,
        seen(
            id("ConfigMap", "ns", "a", "a1"),
            vec![oref("ConfigMap", "x", "o1", false)],
        ),
    );
    up(
        &mut g,
        seen(
            id("ConfigMap", "ns", "b", "b1"),
            vec![oref("Secret", "x", "o1", false)],
        ),
    );
    let mut fx = Effects::default();
    g.process(
        Change::VirtualDelete(id("ConfigMap", "ns", "x", "o1")),
        &mut fx,
    );
    assert_eq!(fx.attempt_to_delete, vec!["a1"]);
    assert_eq!(fx.attempt_to_delete_later, vec!["o1"]);
    assert_eq!(
        g.get("o1").map(|n| n.identity.kind.as_str()),
        Some("Secret")
    );
}

#[test]
fn virtual_delete_does_not_remove_an_observed_node_with_other_coordinates() {
    let mut g = Graph::new();
    up(&mut g, seen(id("ConfigMap", "ns", "x", "o1"), vec![]));
    let mut fx = Effects::default();
    g.process(
        Change::VirtualDelete(id("Secret", "ns", "x", "o1")),
        &mut fx,
    );
    assert!(g.get("o1").is_some());
}

#[test]
fn diffs() {
    let a = oref("K", "a", "1", false);
    let b = oref("K", "b", "2", true);
    let b2 = oref("K", "b", "2", false);
    let c = oref("K", "c", "3", false);
    let (added, removed, changed) =
        references_diffs(&[a.clone(), b.clone()], &[b2.clone(), c.clone()]);
    assert_eq!(added, vec![c]);
    assert_eq!(removed, vec![a]);
    assert_eq!(changed, vec![(b, b2)]);
}
