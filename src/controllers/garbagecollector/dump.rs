//! The owner graph in Graphviz DOT, as upstream's garbage collector serves it at
//! `/debug/controllers/garbage-collector-controller/graph` (`?uid=` once or more: only what is
//! reachable from those UIDs, following owners and dependents).
//!
//! The output matches upstream's byte for byte:
//! - `strict digraph full {`, then `  // Node definitions.` and one block per vertex, then
//!   `  // Edge definitions.` and one `"dependent" -> "owner";` line per owner reference; a
//!   section without entries is left out.
//! - Vertices sorted by UID, edges by (from, to); strings quoted as Go's `%q` does.
//! - Objects without owners and without dependents are left out.
//! - Each vertex carries a label (`uid=`, `namespace=`, `Kind.version[.group]/name`, then its
//!   conditions `beingDeleted,deletingDependents,virtual,missingFromGraph`) and the attributes
//!   group, version, kind, namespace, name, uid, missing, beingDeleted, deletingDependents and
//!   virtual. Virtual nodes (owners known only from references) have `virtual="true"` and the
//!   namespace of the dependent that named them.
//! - An owner reference to a UID that is not in the (selected) graph gets a "missing" vertex
//!   made from the reference (no namespace), one per such reference, as upstream writes it.
//!   Upstream's map of vertices also stops pointing at that dependent afterwards, so one of
//!   the dependent's own dependents may, depending on Go's map order, get its edge drawn to
//!   the missing owner instead; here edges always go to the owner the reference names.

use super::graph::{Graph, Node};
use crate::compat::quote::go_quote;
use crate::obj::OwnerRef;
use std::collections::HashSet;
use std::fmt::Write as _;

/// Where kube-controller-manager mounts the collector's debugging handler
/// (`/debug/controllers/<controller name>` and everything under it).
pub const BASE_PATH: &str = "/debug/controllers/garbage-collector-controller";
/// The one path that handler answers: the dump.
pub const GRAPH_PATH: &str = "/debug/controllers/garbage-collector-controller/graph";
/// The content type of the answer.
pub const CONTENT_TYPE: &str = "text/vnd.graphviz";

/// One vertex of the dump.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vertex {
    pub uid: String,
    pub group: String,
    pub version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub missing: bool,
    pub being_deleted: bool,
    pub deleting_dependents: bool,
    pub virtual_: bool,
}

/// An edge from a dependent to its owner.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Edge {
    pub from: String,
    pub to: String,
}

/// Group and version of an apiVersion as Go's `schema.ParseGroupVersion` splits it: `v1` is
/// the core group, `apps/v1` is group `apps`; more than one `/` is invalid and gives empty
/// parts (upstream logs the error and goes on with them).
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    if api_version.is_empty() || api_version == "/" {
        return ("", "");
    }
    match api_version.matches('/').count() {
        0 => ("", api_version),
        1 => api_version.split_once('/').unwrap_or(("", "")),
        _ => {
            log::debug!("garbage collector graph: unexpected GroupVersion string: {api_version}");
            ("", "")
        }
    }
}

impl Vertex {
    pub fn of_node(n: &Node) -> Vertex {
        let (group, version) = split_api_version(&n.identity.api_version);
        Vertex {
            uid: n.identity.uid.clone(),
            group: group.to_string(),
            version: version.to_string(),
            kind: n.identity.kind.clone(),
            namespace: n.identity.namespace.clone(),
            name: n.identity.name.clone(),
            missing: false,
            being_deleted: n.being_deleted,
            deleting_dependents: n.deleting_dependents,
            virtual_: n.virtual_,
        }
    }

    /// An owner named by a reference but absent from the graph.
    pub fn missing(r: &OwnerRef) -> Vertex {
        let (group, version) = split_api_version(&r.api_version);
        Vertex {
            uid: r.uid.clone(),
            group: group.to_string(),
            version: version.to_string(),
            kind: r.kind.clone(),
            namespace: String::new(),
            name: r.name.clone(),
            missing: true,
            being_deleted: false,
            deleting_dependents: false,
            virtual_: false,
        }
    }

    /// `uid=...\nnamespace=...\nKind.version[.group]/name\n[conditions\n]`.
    pub fn label(&self) -> String {
        let mut kind = format!("{}.{}", self.kind, self.version);
        if !self.group.is_empty() {
            kind.push('.');
            kind.push_str(&self.group);
        }
        let mut label = format!(
            "uid={}\nnamespace={}\n{kind}/{}\n",
            self.uid, self.namespace, self.name
        );
        let conditions: Vec<&str> = [
            (self.being_deleted, "beingDeleted"),
            (self.deleting_dependents, "deletingDependents"),
            (self.virtual_, "virtual"),
            (self.missing, "missingFromGraph"),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, c)| *c)
        .collect();
        if !conditions.is_empty() {
            label.push_str(&conditions.join(","));
            label.push('\n');
        }
        label
    }

    fn attributes(&self) -> [(&'static str, String); 11] {
        [
            ("label", self.label()),
            ("group", self.group.clone()),
            ("version", self.version.clone()),
            ("kind", self.kind.clone()),
            ("namespace", self.namespace.clone()),
            ("name", self.name.clone()),
            ("uid", self.uid.clone()),
            ("missing", self.missing.to_string()),
            ("beingDeleted", self.being_deleted.to_string()),
            ("deletingDependents", self.deleting_dependents.to_string()),
            ("virtual", self.virtual_.to_string()),
        ]
    }

    fn write_dot(&self, out: &mut String) {
        let _ = writeln!(out, "  {} [", go_quote(&self.uid));
        for (k, v) in self.attributes() {
            let _ = writeln!(out, "    {k}={}", go_quote(&v));
        }
        out.push_str("  ];\n");
    }
}

/// The UIDs reachable from `start` (owners and dependents, transitively) that are in the graph.
fn reachable(g: &Graph, start: &[String]) -> HashSet<String> {
    let mut seen: HashSet<String> = HashSet::new();
    let mut todo: Vec<&str> = start.iter().map(String::as_str).collect();
    while let Some(uid) = todo.pop() {
        if seen.contains(uid) {
            continue;
        }
        let Some(n) = g.get(uid) else {
            continue;
        };
        seen.insert(uid.to_string());
        for o in &n.owners {
            if !seen.contains(&o.uid) {
                todo.push(&o.uid);
            }
        }
        for d in &n.dependents {
            if !seen.contains(d) {
                todo.push(d);
            }
        }
    }
    seen
}

/// Vertices and edges of the whole graph (`uids` None) or of what is reachable from `uids`,
/// sorted as upstream sorts them.
pub fn vertices_and_edges(g: &Graph, uids: Option<&[String]>) -> (Vec<Vertex>, Vec<Edge>) {
    let selected: Option<HashSet<String>> = uids.map(|u| reachable(g, u));
    let in_selection = |uid: &str| selected.as_ref().is_none_or(|s| s.contains(uid));
    let mut nodes: Vec<&Node> = g
        .nodes
        .iter()
        .filter(|(uid, _)| in_selection(uid))
        .map(|(_, n)| n)
        // Objects outside any ownership are left out.
        .filter(|n| !n.owners.is_empty() || !n.dependents.is_empty())
        .collect();
    crate::sort::sort_by(&mut nodes[..], |a, b| a.identity.uid.cmp(&b.identity.uid));
    let shown: HashSet<&str> = nodes.iter().map(|n| n.identity.uid.as_str()).collect();
    let mut vertices: Vec<Vertex> = nodes.iter().map(|n| Vertex::of_node(n)).collect();
    let mut edges = Vec::new();
    for n in &nodes {
        for r in &n.owners {
            if !shown.contains(r.uid.as_str()) {
                vertices.push(Vertex::missing(r));
            }
            edges.push(Edge {
                from: n.identity.uid.clone(),
                to: r.uid.clone(),
            });
        }
    }
    // Stable: missing vertices sharing a UID keep the order of their dependents.
    crate::sort::sort_by(&mut vertices[..], |a, b| a.uid.cmp(&b.uid));
    crate::sort::sort(&mut edges[..]);
    (vertices, edges)
}

/// The DOT text of these vertices and edges.
pub fn render(vertices: &[Vertex], edges: &[Edge]) -> String {
    let mut out = String::from("strict digraph full {\n");
    if !vertices.is_empty() {
        out.push_str("  // Node definitions.\n");
        for v in vertices {
            v.write_dot(&mut out);
        }
    }
    if !edges.is_empty() {
        out.push_str("  // Edge definitions.\n");
        for e in edges {
            let _ = writeln!(out, "  {} -> {};", go_quote(&e.from), go_quote(&e.to));
        }
    }
    out.push_str("}\n");
    out
}

/// The whole dump of `g`, or of what is reachable from `uids`.
pub fn dot(g: &Graph, uids: Option<&[String]>) -> String {
    let (v, e) = vertices_and_edges(g, uids);
    render(&v, &e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::garbagecollector::graph::{Change, Effects, Identity, Seen};

    fn oref(api_version: &str, kind: &str, name: &str, uid: &str) -> OwnerRef {
        OwnerRef {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            uid: uid.into(),
            controller: false,
            block_owner_deletion: false,
        }
    }

    /// A node with only a UID, its owners (by UID) and its dependents (by UID).
    fn bare(g: &mut Graph, uid: &str, owners: &[&str], dependents: &[&str]) {
        let n = Node {
            identity: Identity {
                uid: uid.into(),
                ..Default::default()
            },
            owners: owners.iter().map(|o| oref("", "", "", o)).collect(),
            dependents: dependents.iter().map(|d| d.to_string()).collect(),
            ..Default::default()
        };
        g.nodes.insert(uid.into(), n);
    }

    /// The block upstream writes for a vertex that has nothing but a UID.
    fn bare_block(uid: &str) -> String {
        format!(
            "  \"{uid}\" [\n    label=\"uid={uid}\\nnamespace=\\n./\\n\"\n    group=\"\"\n    version=\"\"\n    kind=\"\"\n    namespace=\"\"\n    name=\"\"\n    uid=\"{uid}\"\n    missing=\"false\"\n    beingDeleted=\"false\"\n    deletingDependents=\"false\"\n    virtual=\"false\"\n  ];\n"
        )
    }

    /// pod-a owned by rs-1 and cm-2; pod-b owned by rs-3 owned by dep-4; lone alone.
    fn two_chains() -> Graph {
        let mut g = Graph::new();
        bare(&mut g, "pod-a", &["rs-1", "cm-2"], &[]);
        bare(&mut g, "rs-1", &[], &["pod-a"]);
        bare(&mut g, "cm-2", &[], &["pod-a"]);
        bare(&mut g, "pod-b", &["rs-3"], &[]);
        bare(&mut g, "lone", &[], &[]);
        bare(&mut g, "rs-3", &["dep-4"], &["pod-b"]);
        bare(&mut g, "dep-4", &[], &["rs-3"]);
        g
    }

    #[test]
    fn empty_graph() {
        assert_eq!(dot(&Graph::new(), None), "strict digraph full {\n}\n");
        // A lone object is not drawn either.
        let mut g = Graph::new();
        bare(&mut g, "lone", &[], &[]);
        assert_eq!(dot(&g, None), "strict digraph full {\n}\n");
        assert_eq!(
            dot(&g, Some(&["lone".to_string()])),
            "strict digraph full {\n}\n"
        );
    }

    #[test]
    fn whole_graph_sorted_with_edges_to_owners() {
        let mut want = String::from("strict digraph full {\n  // Node definitions.\n");
        for uid in ["cm-2", "dep-4", "pod-a", "pod-b", "rs-1", "rs-3"] {
            want.push_str(&bare_block(uid));
        }
        want.push_str(
            "  // Edge definitions.\n  \"pod-a\" -> \"cm-2\";\n  \"pod-a\" -> \"rs-1\";\n  \"pod-b\" -> \"rs-3\";\n  \"rs-3\" -> \"dep-4\";\n}\n",
        );
        assert_eq!(dot(&two_chains(), None), want);
    }

    #[test]
    fn selection_follows_owners_and_dependents() {
        let g = two_chains();
        let uids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (v, e) = vertices_and_edges(&g, Some(&uids(&["pod-a"])));
        let got: Vec<&str> = v.iter().map(|v| v.uid.as_str()).collect();
        assert_eq!(got, vec!["cm-2", "pod-a", "rs-1"]);
        assert_eq!(e.len(), 2);
        // From the middle of the other chain, both directions are followed.
        let (v, e) = vertices_and_edges(&g, Some(&uids(&["rs-3"])));
        let got: Vec<&str> = v.iter().map(|v| v.uid.as_str()).collect();
        assert_eq!(got, vec!["dep-4", "pod-b", "rs-3"]);
        assert_eq!(
            e,
            vec![
                Edge {
                    from: "pod-b".into(),
                    to: "rs-3".into()
                },
                Edge {
                    from: "rs-3".into(),
                    to: "dep-4".into()
                }
            ]
        );
        // Several UIDs, unknown ones skipped.
        let (v, _) = vertices_and_edges(&g, Some(&uids(&["dep-4", "nope", "rs-1"])));
        assert_eq!(v.len(), 6);
        let (v, e) = vertices_and_edges(&g, Some(&uids(&["nope"])));
        assert!(v.is_empty() && e.is_empty());
    }

    #[test]
    fn missing_owner_gets_a_vertex_per_reference() {
        let mut g = Graph::new();
        bare(&mut g, "pod-a", &["rs-1", "cm-2"], &[]);
        bare(&mut g, "cm-2", &[], &["pod-a"]);
        let (v, e) = vertices_and_edges(&g, None);
        assert_eq!(v.len(), 3);
        assert_eq!(v[2].uid, "rs-1");
        assert!(v[2].missing && !v[0].missing && !v[1].missing);
        assert_eq!(e.len(), 2);
        // Two dependents of one absent owner: upstream writes the owner once per reference.
        let mut g = Graph::new();
        bare(&mut g, "a", &["gone"], &[]);
        bare(&mut g, "b", &["gone"], &[]);
        let (v, _) = vertices_and_edges(&g, None);
        let got: Vec<(&str, bool)> = v.iter().map(|v| (v.uid.as_str(), v.missing)).collect();
        assert_eq!(
            got,
            vec![("a", false), ("b", false), ("gone", true), ("gone", true)]
        );
    }

    #[test]
    fn missing_vertex_block() {
        let r = oref("apps/v1", "Deployment", "web", "d-1");
        let mut out = String::new();
        Vertex::missing(&r).write_dot(&mut out);
        assert_eq!(
            out,
            "  \"d-1\" [\n    label=\"uid=d-1\\nnamespace=\\nDeployment.v1.apps/web\\nmissingFromGraph\\n\"\n    group=\"apps\"\n    version=\"v1\"\n    kind=\"Deployment\"\n    namespace=\"\"\n    name=\"web\"\n    uid=\"d-1\"\n    missing=\"true\"\n    beingDeleted=\"false\"\n    deletingDependents=\"false\"\n    virtual=\"false\"\n  ];\n"
        );
    }

    #[test]
    fn escaping_as_go_quotes() {
        // Quotes and backslashes escaped, non-ASCII letters and emoji kept as they are.
        let fancy = "Zürich-Ærø-ñ-🦀";
        let mut g = Graph::new();
        let child = Identity {
            api_version: "example.com/v2".into(),
            kind: format!("Widget{fancy}"),
            name: format!("w-{fancy}"),
            uid: format!("c\"q\\{fancy}"),
            namespace: "team-a".into(),
        };
        let owner = oref("example.com/v2", "Gadget", "g", "o-1");
        g.nodes.insert(
            child.uid.clone(),
            Node {
                identity: child.clone(),
                owners: vec![owner],
                ..Default::default()
            },
        );
        g.nodes.insert(
            "o-1".into(),
            Node {
                identity: Identity {
                    api_version: "example.com/v2".into(),
                    kind: "Gadget".into(),
                    name: "g".into(),
                    uid: "o-1".into(),
                    namespace: "team-a".into(),
                },
                dependents: [child.uid.clone()].into(),
                being_deleted: true,
                ..Default::default()
            },
        );
        let want = format!(
            r#"strict digraph full {{
  // Node definitions.
  "c\"q\\{fancy}" [
    label="uid=c\"q\\{fancy}\nnamespace=team-a\nWidget{fancy}.v2.example.com/w-{fancy}\n"
    group="example.com"
    version="v2"
    kind="Widget{fancy}"
    namespace="team-a"
    name="w-{fancy}"
    uid="c\"q\\{fancy}"
    missing="false"
    beingDeleted="false"
    deletingDependents="false"
    virtual="false"
  ];
  "o-1" [
    label="uid=o-1\nnamespace=team-a\nGadget.v2.example.com/g\nbeingDeleted\n"
    group="example.com"
    version="v2"
    kind="Gadget"
    namespace="team-a"
    name="g"
    uid="o-1"
    missing="false"
    beingDeleted="true"
    deletingDependents="false"
    virtual="false"
  ];
  // Edge definitions.
  "c\"q\\{fancy}" -> "o-1";
}}
"#
        );
        assert_eq!(dot(&g, None), want);
    }

    #[test]
    fn api_versions_split_as_go_does() {
        assert_eq!(split_api_version("v1"), ("", "v1"));
        assert_eq!(split_api_version("apps/v1"), ("apps", "v1"));
        assert_eq!(split_api_version(""), ("", ""));
        assert_eq!(split_api_version("/"), ("", ""));
        assert_eq!(split_api_version("a/b/c"), ("", ""));
        assert_eq!(split_api_version("/v1"), ("", "v1"));
    }

    #[test]
    fn built_graph_renders_states() {
        // A graph built from informer changes: a virtual owner, a ReplicaSet being deleted
        // in the foreground and its pod.
        let mut g = Graph::new();
        let mut fx = Effects::default();
        let seen = |api: &str, kind: &str, name: &str, uid: &str, owners: Vec<OwnerRef>| Seen {
            identity: Identity {
                api_version: api.into(),
                kind: kind.into(),
                name: name.into(),
                uid: uid.into(),
                namespace: "ns".into(),
            },
            owners,
            ..Default::default()
        };
        let mut rs = seen(
            "apps/v1",
            "ReplicaSet",
            "web-1",
            "u2",
            vec![oref("apps/v1", "Deployment", "web", "u1")],
        );
        rs.deleting = true;
        rs.finalizers = vec!["foregroundDeletion".into()];
        g.process(Change::Upsert { old: None, new: rs }, &mut fx);
        let pod = seen(
            "v1",
            "Pod",
            "web-1-x",
            "u3",
            vec![oref("apps/v1", "ReplicaSet", "web-1", "u2")],
        );
        g.process(
            Change::Upsert {
                old: None,
                new: pod,
            },
            &mut fx,
        );
        let (v, e) = vertices_and_edges(&g, Some(&["u3".to_string()]));
        let labels: Vec<String> = v.iter().map(Vertex::label).collect();
        assert_eq!(
            labels,
            vec![
                "uid=u1\nnamespace=ns\nDeployment.v1.apps/web\nvirtual\n",
                "uid=u2\nnamespace=ns\nReplicaSet.v1.apps/web-1\nbeingDeleted,deletingDependents\n",
                "uid=u3\nnamespace=ns\nPod.v1/web-1-x\n",
            ]
        );
        assert!(v[0].virtual_ && !v[0].missing);
        assert!(v[1].being_deleted && v[1].deleting_dependents);
        let pairs: Vec<(&str, &str)> = e.iter().map(|e| (e.from.as_str(), e.to.as_str())).collect();
        assert_eq!(pairs, vec![("u2", "u1"), ("u3", "u2")]);
    }
}
