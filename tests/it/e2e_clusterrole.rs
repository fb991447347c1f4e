//! clusterrole-aggregation-controller scenarios, against the sandbox always and a real
//! kube-apiserver with `KCM_E2E_KUBECONFIG` (`real_*`; with
//! `--use-service-account-credentials=true` in `KCM_E2E_KCM_ARGS` edgekcm writes as
//! `clusterrole-aggregation-controller` under the bootstrap RBAC).

use crate::common::*;
use edgekcm::api::client::Client;
use edgekcm::api::resources::CLUSTERROLES;
use serde_json::{json, Value};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(30);
const CONTROLLERS: &str = "--controllers=clusterrole-aggregation";

fn rule(verbs: &[&str], resources: &[&str]) -> Value {
    json!({"verbs": verbs, "apiGroups": ["e2e.edgekcm.io"], "resources": resources})
}

/// Deletes the scenario's ClusterRoles, even when it fails.
struct Roles {
    admin: Client,
    names: Vec<String>,
}
impl Roles {
    fn create(&mut self, body: Value) {
        self.admin
            .create(&CLUSTERROLES, None, &body)
            .expect("create ClusterRole");
        self.names
            .push(body["metadata"]["name"].as_str().unwrap().to_string());
    }
}
impl Drop for Roles {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = self
                .admin
                .delete(&CLUSTERROLES, None, n, &Default::default());
        }
    }
}

fn role(name: &str, labels: Value, rules: Value) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
           "metadata": {"name": name, "labels": labels}, "rules": rules})
}

fn rules(admin: &Client, name: &str) -> Value {
    let r = admin.get(&CLUSTERROLES, None, name).expect("get");
    match &r["rules"] {
        Value::Null => json!([]),
        v => v.clone(),
    }
}

fn wait_rules(admin: &Client, name: &str, want: Value) {
    eventually(LIMIT, &format!("{name} rules {want}"), || {
        (rules(admin, name) == want).then_some(())
    });
}

fn aggregates_labelled_roles(t: &Target) {
    let admin = t.admin();
    let mut roles = Roles {
        admin: admin.clone(),
        names: vec![],
    };
    let u = unique("e2e");
    let (agg, b, a) = (format!("{u}-agg"), format!("{u}-b"), format!("{u}-a"));
    let key = format!("e2e.edgekcm.io/{u}");
    let mut agg_role = role(&agg, json!({}), json!([]));
    agg_role["aggregationRule"] =
        json!({"clusterRoleSelectors": [{"matchLabels": {key.clone(): "true"}}]});
    roles.create(agg_role);
    roles.create(role(
        &b,
        json!({key.clone(): "true"}),
        json!([rule(&["get"], &["things"]), rule(&["list"], &["things"])]),
    ));
    roles.create(role(
        &a,
        json!({key.clone(): "true"}),
        json!([rule(&["watch"], &["things"]), rule(&["get"], &["things"])]),
    ));
    let _kcm = start_with(t, "agg", CONTROLLERS);
    // By name (a before b), each rule once.
    wait_rules(
        &admin,
        &agg,
        json!([
            rule(&["watch"], &["things"]),
            rule(&["get"], &["things"]),
            rule(&["list"], &["things"])
        ]),
    );
    if t.is_real() {
        // Written by server-side apply, under the controller's field manager.
        let raw = admin
            .get_raw(&CLUSTERROLES.object_path(None, &agg))
            .expect("raw");
        let o: Value = serde_json::from_str(&raw).expect("json");
        let managers: Vec<(&str, &str)> = o["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["manager"].as_str().unwrap_or(""),
                    m["operation"].as_str().unwrap_or(""),
                )
            })
            .collect();
        assert!(
            managers.contains(&("clusterrole-aggregation-controller", "Apply")),
            "{managers:?}"
        );
    }
    // A piece changes; then goes; then the last goes: the rules follow.
    let mut piece = admin.get(&CLUSTERROLES, None, &a).unwrap();
    piece["rules"] = json!([rule(&["delete"], &["things"])]);
    admin.update(&CLUSTERROLES, &piece).expect("update");
    wait_rules(
        &admin,
        &agg,
        json!([
            rule(&["delete"], &["things"]),
            rule(&["get"], &["things"]),
            rule(&["list"], &["things"])
        ]),
    );
    admin
        .delete(&CLUSTERROLES, None, &b, &Default::default())
        .unwrap();
    wait_rules(&admin, &agg, json!([rule(&["delete"], &["things"])]));
    admin
        .delete(&CLUSTERROLES, None, &a, &Default::default())
        .unwrap();
    wait_rules(&admin, &agg, json!([]));
}

/// The built-in admin, edit and view roles are filled (on the sandbox, stand-ins with
/// upstream's labels); admin holds edit's rules and edit view's.
fn fills_admin_edit_view(t: &Target) {
    let admin = t.admin();
    let mut roles = Roles {
        admin: admin.clone(),
        names: vec![],
    };
    if !t.is_real() {
        for (name, to) in [
            ("admin", None),
            ("edit", Some("admin")),
            ("view", Some("edit")),
        ] {
            let labels = match to {
                Some(to) => json!({format!("rbac.authorization.k8s.io/aggregate-to-{to}"): "true"}),
                None => json!({}),
            };
            let mut r = role(name, labels, json!([]));
            r["aggregationRule"] = json!({"clusterRoleSelectors": [{"matchLabels":
                {format!("rbac.authorization.k8s.io/aggregate-to-{name}"): "true"}}]});
            roles.create(r);
            roles.create(role(
                &format!("system:aggregate-to-{name}"),
                json!({format!("rbac.authorization.k8s.io/aggregate-to-{name}"): "true"}),
                json!([rule(&[name], &["things"])]),
            ));
        }
    }
    let _kcm = start_with(t, "builtin", CONTROLLERS);
    let covers = |big: &Value, small: &Value| {
        let big = big.as_array().unwrap();
        small.as_array().unwrap().iter().all(|r| big.contains(r))
    };
    eventually(LIMIT, "admin, edit and view filled", || {
        let (a, e, v) = (
            rules(&admin, "admin"),
            rules(&admin, "edit"),
            rules(&admin, "view"),
        );
        let filled = !v.as_array().unwrap().is_empty() && covers(&e, &v) && covers(&a, &e);
        filled.then_some(())
    });
}

scenarios! {
    aggregates_labelled_roles => aggregates_labelled_roles,
    fills_admin_edit_view => fills_admin_edit_view,
}
