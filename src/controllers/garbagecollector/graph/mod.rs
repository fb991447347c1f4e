//! The owner graph: one node per object UID with its owners and dependents, and "virtual"
//! nodes for owners named in ownerReferences but not (yet) observed. Built from informer
//! events (upstream's GraphBuilder.processGraphChanges); processing an event only changes the
//! graph and says which UIDs need a look (`Effects`), so it is pure and tested as such.

use crate::obj::OwnerRef;
use std::collections::{HashMap, HashSet};
use std::fmt;

pub const FINALIZER_ORPHAN: &str = "orphan";
pub const FINALIZER_FOREGROUND: &str = "foregroundDeletion";

/// Where an object is: apiVersion, kind, name, UID and namespace (upstream's objectReference).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Identity {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
    pub namespace: String,
}

impl Identity {
    /// A reference's coordinates, placed in `namespace`.
    pub fn of_ref(r: &OwnerRef, namespace: &str) -> Identity {
        Identity {
            api_version: r.api_version.clone(),
            kind: r.kind.clone(),
            name: r.name.clone(),
            uid: r.uid.clone(),
            namespace: namespace.to_string(),
        }
    }

    /// uid, name, kind and apiVersion all agree.
    pub fn matches_coordinates(&self, r: &OwnerRef) -> bool {
        self.uid == r.uid
            && self.name == r.name
            && self.kind == r.kind
            && self.api_version == r.api_version
    }

    /// Upstream's `referenceLessThan` order: kind, apiVersion, namespace, name, uid.
    fn order_key(&self) -> (&str, &str, &str, &str, &str) {
        (
            &self.kind,
            &self.api_version,
            &self.namespace,
            &self.name,
            &self.uid,
        )
    }
}

impl fmt::Display for Identity {
    /// `[apps/v1/Deployment, namespace: ns, name: web, uid: 1234]`, as upstream prints it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{}/{}, namespace: {}, name: {}, uid: {}]",
            self.api_version, self.kind, self.namespace, self.name, self.uid
        )
    }
}

#[derive(Debug, Clone, Default)]
pub struct Node {
    pub identity: Identity,
    pub owners: Vec<OwnerRef>,
    /// UIDs of the nodes naming this one in their ownerReferences.
    pub dependents: HashSet<String>,
    /// Deleting, with the `foregroundDeletion` finalizer.
    pub deleting_dependents: bool,
    /// Has a deletionTimestamp.
    pub being_deleted: bool,
    /// Known only from other objects' ownerReferences, never observed.
    pub virtual_: bool,
}

impl Node {
    pub fn observed(&self) -> bool {
        !self.virtual_
    }
}

/// What an informer says about one object.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Seen {
    pub identity: Identity,
    pub owners: Vec<OwnerRef>,
    pub deleting: bool,
    pub finalizers: Vec<String>,
}

impl Seen {
    fn has_finalizer(&self, f: &str) -> bool {
        self.finalizers.iter().any(|x| x == f)
    }
}

/// One change to the graph.
#[derive(Debug, Clone)]
pub enum Change {
    /// Added or updated (`old` is the previous copy when the informer had one).
    Upsert { old: Option<Seen>, new: Seen },
    /// Deleted, as observed by an informer.
    Deleted(Seen),
    /// A worker found the object absent (upstream's virtual delete event).
    VirtualDelete(Identity),
}

/// An ownerReference naming an owner in another namespace than its dependent.
#[derive(Debug, Clone, PartialEq)]
pub struct InvalidNamespaceRef {
    pub dependent: Identity,
    /// The owner as referenced, placed in the dependent's namespace.
    pub owner: Identity,
}

impl InvalidNamespaceRef {
    pub const REASON: &'static str = "OwnerRefInvalidNamespace";
    pub fn message(&self) -> String {
        format!(
            "ownerRef {} does not exist in namespace {:?}",
            self.owner, self.dependent.namespace
        )
    }
}

/// What processing a change asks for.
#[derive(Debug, Default, PartialEq)]
pub struct Effects {
    pub attempt_to_delete: Vec<String>,
    pub attempt_to_delete_later: Vec<String>,
    pub attempt_to_orphan: Vec<String>,
    /// Identities now known to be absent.
    pub absent: Vec<Identity>,
    pub invalid_refs: Vec<InvalidNamespaceRef>,
}

impl Effects {
    fn delete(&mut self, uid: &str) {
        self.attempt_to_delete.push(uid.to_string());
    }
}

#[derive(Debug, Default)]
pub struct Graph {
    pub nodes: HashMap<String, Node>,
}

fn deletion_starts_with(old: Option<&Seen>, new: &Seen, fin: &str) -> bool {
    if !new.deleting || !new.has_finalizer(fin) {
        return false;
    }
    match old {
        None => true,
        Some(o) => !o.deleting || !o.has_finalizer(fin),
    }
}

/// Owner references added, removed and changed (by UID) between two lists.
pub fn references_diffs(
    old: &[OwnerRef],
    new: &[OwnerRef],
) -> (Vec<OwnerRef>, Vec<OwnerRef>, Vec<(OwnerRef, OwnerRef)>) {
    let mut old_by_uid: HashMap<&str, &OwnerRef> =
        old.iter().map(|r| (r.uid.as_str(), r)).collect();
    let (mut added, mut changed) = (Vec::new(), Vec::new());
    for r in new {
        match old_by_uid.remove(r.uid.as_str()) {
            Some(o) if o != r => changed.push((o.clone(), r.clone())),
            Some(_) => {}
            None => added.push(r.clone()),
        }
    }
    let mut removed: Vec<OwnerRef> = old_by_uid.into_values().cloned().collect();
    crate::sort::sort_by(&mut removed[..], |a, b| a.uid.cmp(&b.uid));
    (added, removed, changed)
}

impl Graph {
    pub fn new() -> Self {
        Graph::default()
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn get(&self, uid: &str) -> Option<&Node> {
        self.nodes.get(uid)
    }

    /// Dependents of `uid` whose reference to it blocks its deletion.
    pub fn blocking_dependents(&self, uid: &str) -> Vec<&Node> {
        let Some(n) = self.nodes.get(uid) else {
            return Vec::new();
        };
        let mut out: Vec<&Node> = n
            .dependents
            .iter()
            .filter_map(|d| self.nodes.get(d))
            .filter(|d| {
                d.owners
                    .iter()
                    .any(|o| o.uid == uid && o.block_owner_deletion)
            })
            .collect();
        crate::sort::sort_by(&mut out[..], |a, b| a.identity.uid.cmp(&b.identity.uid));
        out
    }

    /// Apply one change.
    pub fn process(&mut self, change: Change, fx: &mut Effects) {
        match change {
            Change::Upsert { old, new } => self.upsert(old.as_ref(), new, fx),
            Change::Deleted(seen) => self.delete(seen.identity, false, fx),
            Change::VirtualDelete(id) => self.delete(id, true, fx),
        }
    }

    fn upsert(&mut self, old: Option<&Seen>, new: Seen, fx: &mut Effects) {
        let uid = new.identity.uid.clone();
        if uid.is_empty() {
            log::debug!("garbage collector: skipping an object without a uid");
            return;
        }
        let found = self.nodes.contains_key(&uid);
        if found && self.nodes.get(&uid).is_some_and(|n| n.virtual_) {
            // First observation of a node known only from references.
            let current = self.nodes.get(&uid).map(|n| n.identity.clone());
            if current.as_ref() != Some(&new.identity) {
                let deps: Vec<String> = self
                    .nodes
                    .get(&uid)
                    .map(|n| n.dependents.iter().cloned().collect())
                    .unwrap_or_default();
                let (_, invalid) = self.partition_dependents(&deps, &new.identity);
                for dep in invalid {
                    let dep_ns = self
                        .nodes
                        .get(&dep)
                        .map(|d| d.identity.namespace.clone())
                        .unwrap_or_default();
                    if !new.identity.namespace.is_empty() && dep_ns != new.identity.namespace {
                        self.report_invalid_namespace(&dep, &uid, fx);
                    }
                    fx.delete(&dep);
                }
                if let Some(n) = self.nodes.get_mut(&uid) {
                    n.identity = new.identity.clone();
                }
            }
            if let Some(n) = self.nodes.get_mut(&uid) {
                n.virtual_ = false;
            }
        }
        if !found {
            let node = Node {
                identity: new.identity.clone(),
                owners: new.owners.clone(),
                dependents: HashSet::new(),
                deleting_dependents: new.deleting && new.has_finalizer(FINALIZER_FOREGROUND),
                being_deleted: new.deleting,
                virtual_: false,
            };
            self.nodes.insert(uid.clone(), node);
            self.add_dependent_to_owners(&uid, &new.owners, fx);
            self.process_transitions(old, &new, &uid, fx);
            return;
        }
        let existing_owners = self
            .nodes
            .get(&uid)
            .map(|n| n.owners.clone())
            .unwrap_or_default();
        let (added, removed, changed) = references_diffs(&existing_owners, &new.owners);
        if !added.is_empty() || !removed.is_empty() || !changed.is_empty() {
            self.add_unblocked_owners_to_delete_queue(&removed, &changed, fx);
            if let Some(n) = self.nodes.get_mut(&uid) {
                n.owners = new.owners.clone();
            }
            self.add_dependent_to_owners(&uid, &added, fx);
            self.remove_dependent_from_owners(&uid, &removed);
        }
        if new.deleting {
            if let Some(n) = self.nodes.get_mut(&uid) {
                n.being_deleted = true;
            }
        }
        self.process_transitions(old, &new, &uid, fx);
    }

    fn process_transitions(&mut self, old: Option<&Seen>, new: &Seen, uid: &str, fx: &mut Effects) {
        if deletion_starts_with(old, new, FINALIZER_ORPHAN) {
            fx.attempt_to_orphan.push(uid.to_string());
            return;
        }
        if deletion_starts_with(old, new, FINALIZER_FOREGROUND) {
            if let Some(n) = self.nodes.get_mut(uid) {
                n.deleting_dependents = true;
                let mut deps: Vec<&String> = n.dependents.iter().collect();
                crate::sort::sort(&mut deps[..]);
                for d in deps {
                    fx.delete(d);
                }
            }
            fx.delete(uid);
        }
    }

    /// Link `uid` under each owner, creating virtual owners (queued to check they exist), and
    /// queue `uid` itself when a reference looks wrong against an owner already known.
    fn add_dependent_to_owners(&mut self, uid: &str, owners: &[OwnerRef], fx: &mut Effects) {
        let Some(ns) = self.nodes.get(uid).map(|n| n.identity.namespace.clone()) else {
            return;
        };
        let mut potentially_invalid = false;
        for owner in owners {
            match self.nodes.get_mut(&owner.uid) {
                None => {
                    let mut v = Node {
                        identity: Identity::of_ref(owner, &ns),
                        virtual_: true,
                        ..Default::default()
                    };
                    v.dependents.insert(uid.to_string());
                    self.nodes.insert(owner.uid.clone(), v);
                    fx.delete(&owner.uid);
                }
                Some(on) => {
                    on.dependents.insert(uid.to_string());
                    if potentially_invalid {
                        continue;
                    }
                    let owner_ns = on.identity.namespace.clone();
                    let observed = !on.virtual_;
                    let namespaced = !owner_ns.is_empty();
                    if namespaced && owner_ns != ns {
                        if observed {
                            self.report_invalid_namespace(uid, &owner.uid, fx);
                        }
                        potentially_invalid = true;
                    } else if !on.identity.matches_coordinates(owner)
                        || (!namespaced && owner_ns != ns && !observed)
                    {
                        potentially_invalid = true;
                    }
                }
            }
        }
        if potentially_invalid {
            fx.delete(uid);
        }
    }

    fn remove_dependent_from_owners(&mut self, uid: &str, owners: &[OwnerRef]) {
        for o in owners {
            if let Some(on) = self.nodes.get_mut(&o.uid) {
                on.dependents.remove(uid);
            }
        }
    }

    /// A blocking reference went away or stopped blocking: its owner may be waiting on it.
    fn add_unblocked_owners_to_delete_queue(
        &self,
        removed: &[OwnerRef],
        changed: &[(OwnerRef, OwnerRef)],
        fx: &mut Effects,
    ) {
        for r in removed {
            if r.block_owner_deletion && self.nodes.contains_key(&r.uid) {
                fx.delete(&r.uid);
            }
        }
        for (o, n) in changed {
            if o.block_owner_deletion && !n.block_owner_deletion && self.nodes.contains_key(&n.uid)
            {
                fx.delete(&n.uid);
            }
        }
    }

    fn report_invalid_namespace(&self, dependent_uid: &str, owner_uid: &str, fx: &mut Effects) {
        let Some(dep) = self.nodes.get(dependent_uid) else {
            return;
        };
        let Some(r) = dep.owners.iter().find(|o| o.uid == owner_uid) else {
            return;
        };
        fx.invalid_refs.push(InvalidNamespaceRef {
            dependent: dep.identity.clone(),
            owner: Identity::of_ref(r, &dep.identity.namespace),
        });
    }

    /// Dependents (by UID) whose reference to `owner.uid` matches `owner` and those whose
    /// reference does not (a dependent with two references can be in both).
    fn partition_dependents(
        &self,
        deps: &[String],
        owner: &Identity,
    ) -> (Vec<String>, Vec<String>) {
        let namespaced = !owner.namespace.is_empty();
        let (mut matching, mut mismatching) = (Vec::new(), Vec::new());
        let mut deps: Vec<&String> = deps.iter().collect();
        crate::sort::sort(&mut deps[..]);
        for d in deps {
            let Some(dep) = self.nodes.get(d) else {
                continue;
            };
            let (mut found_match, mut found_mismatch) = (false, false);
            if namespaced && owner.namespace != dep.identity.namespace {
                found_mismatch = true;
            } else {
                for r in dep.owners.iter().filter(|r| r.uid == owner.uid) {
                    if owner.matches_coordinates(r) {
                        found_match = true;
                    } else {
                        found_mismatch = true;
                    }
                }
            }
            if found_match {
                matching.push(d.clone());
            }
            if found_mismatch {
                mismatching.push(d.clone());
            }
        }
        (matching, mismatching)
    }

    /// Another identity the dependents give the absent owner `absent.uid` (upstream's
    /// `getAlternateOwnerIdentity`): the first following `absent` in reference order, else the
    /// first overall.
    fn alternate_identity(&self, deps: &[String], absent: &Identity) -> Option<Identity> {
        let cluster_scoped = absent.namespace.is_empty();
        let mut seen: HashSet<Identity> = HashSet::from([absent.clone()]);
        let mut first: Option<Identity> = None;
        let mut first_following: Option<Identity> = None;
        for d in deps {
            let Some(dep) = self.nodes.get(d) else {
                continue;
            };
            for r in dep.owners.iter().filter(|r| r.uid == absent.uid) {
                if absent.matches_coordinates(r)
                    && (cluster_scoped || absent.namespace == dep.identity.namespace)
                {
                    continue;
                }
                let mut id = Identity::of_ref(r, &dep.identity.namespace);
                if cluster_scoped && id.api_version == absent.api_version && id.kind == absent.kind
                {
                    id.namespace.clear();
                }
                if !seen.insert(id.clone()) {
                    continue;
                }
                if first
                    .as_ref()
                    .is_none_or(|f| id.order_key() < f.order_key())
                {
                    first = Some(id.clone());
                }
                if absent.order_key() < id.order_key()
                    && first_following
                        .as_ref()
                        .is_none_or(|f| id.order_key() < f.order_key())
                {
                    first_following = Some(id);
                }
            }
        }
        first_following.or(first)
    }

    fn delete(&mut self, deleted: Identity, virtual_event: bool, fx: &mut Effects) {
        let uid = deleted.uid.clone();
        let Some(existing) = self.nodes.get(&uid) else {
            return;
        };
        let mut remove = true;
        if virtual_event {
            let deps: Vec<String> = existing.dependents.iter().cloned().collect();
            if existing.virtual_ {
                let (matching, mismatching) = self.partition_dependents(&deps, &deleted);
                if !mismatching.is_empty() {
                    // Dependents disagree on who this owner is: keep the node.
                    remove = false;
                    if !matching.is_empty() {
                        fx.absent.push(deleted.clone());
                        for d in &matching {
                            fx.delete(d);
                        }
                    }
                    let same = self.nodes.get(&uid).map(|n| &n.identity) == Some(&deleted);
                    if same {
                        if let Some(alt) = self.alternate_identity(&mismatching, &deleted) {
                            if let Some(n) = self.nodes.get_mut(&uid) {
                                n.identity = alt;
                            }
                            fx.attempt_to_delete_later.push(uid.clone());
                        }
                    }
                }
            } else if existing.identity != deleted {
                // The observed object is not the one found absent.
                remove = false;
                let (matching, _) = self.partition_dependents(&deps, &deleted);
                if !matching.is_empty() {
                    fx.absent.push(deleted.clone());
                    for d in &matching {
                        fx.delete(d);
                    }
                }
            }
        }
        if !remove {
            return;
        }
        let Some(node) = self.nodes.remove(&uid) else {
            return;
        };
        self.remove_dependent_from_owners(&uid, &node.owners);
        if !node.dependents.is_empty() {
            fx.absent.push(deleted);
        }
        let mut deps: Vec<&String> = node.dependents.iter().collect();
        crate::sort::sort(&mut deps[..]);
        for d in deps {
            fx.delete(d);
        }
        for o in &node.owners {
            if self
                .nodes
                .get(&o.uid)
                .is_some_and(|on| on.deleting_dependents)
            {
                fx.delete(&o.uid);
            }
        }
    }
}

#[cfg(test)]
mod tests;
