//! Authorizers: always-allowed paths and a SubjectAccessReview on the non-resource URL
//! (answers cached).

use super::*;

// ---------------------------------------------------------------------------------------------
// Authorizers

pub(super) struct PathAllow {
    pub(super) exact: HashSet<String>,
    pub(super) prefixes: Vec<String>,
}

impl PathAllow {
    pub(super) fn new(paths: &[String]) -> Result<Self> {
        let mut exact = HashSet::new();
        let mut prefixes = Vec::new();
        for p in paths {
            let p = p.strip_prefix('/').unwrap_or(p);
            if p.is_empty() {
                exact.insert(String::new());
                continue;
            }
            if p[..p.len() - 1].contains('*') {
                return Err(Error::config(format!("only trailing * allowed in {p:?}")));
            }
            match p.strip_suffix('*') {
                Some(prefix) => prefixes.push(prefix.to_string()),
                None => {
                    exact.insert(p.to_string());
                }
            }
        }
        Ok(PathAllow { exact, prefixes })
    }

    pub(super) fn allows(&self, path: &str) -> bool {
        let p = path.strip_prefix('/').unwrap_or(path);
        self.exact.contains(p) || self.prefixes.iter().any(|pre| p.starts_with(pre.as_str()))
    }
}

pub(super) struct AccessReviewAuth {
    pub(super) reviewer: Arc<dyn Reviewer>,
    pub(super) allow_ttl: Duration,
    pub(super) deny_ttl: Duration,
    pub(super) cache: Mutex<HashMap<String, (Instant, Value)>>,
}

/// A decision with its reason and error, as Kubernetes' authorizers answer.
pub type Verdict = (Decision, String, Option<String>);

impl AccessReviewAuth {
    pub(super) fn authorize(&self, user: &UserInfo, verb: &str, path: &str) -> Verdict {
        let mut spec = serde_json::Map::new();
        spec.insert(
            "nonResourceAttributes".into(),
            json!({"path": path, "verb": verb}),
        );
        if !user.name.is_empty() {
            spec.insert("user".into(), json!(user.name));
        }
        if !user.groups.is_empty() {
            spec.insert("groups".into(), json!(user.groups));
        }
        if !user.extra.is_empty() {
            spec.insert("extra".into(), json!(user.extra));
        }
        if !user.uid.is_empty() {
            spec.insert("uid".into(), json!(user.uid));
        }
        let spec = Value::Object(spec);
        let key = spec.to_string();
        let cached = lock(&self.cache)
            .get(&key)
            .filter(|(t, _)| Instant::now() < *t)
            .map(|(_, s)| s.clone());
        let status = match cached {
            Some(s) => s,
            None => {
                let body = json!({
                    "apiVersion": "authorization.k8s.io/v1",
                    "kind": "SubjectAccessReview",
                    "spec": spec,
                });
                let answer = match self.reviewer.create_review(&SUBJECTACCESSREVIEWS, &body) {
                    Ok(a) => a,
                    Err(e) => {
                        log::error!("Failed to make webhook authorizer request: {e}");
                        return (Decision::NoOpinion, String::new(), Some(e.to_string()));
                    }
                };
                let status = answer.get("status").cloned().unwrap_or(json!({}));
                let allowed = status.get("allowed").and_then(Value::as_bool) == Some(true);
                let ttl = if allowed {
                    self.allow_ttl
                } else {
                    self.deny_ttl
                };
                if !ttl.is_zero() {
                    insert_bounded(
                        &mut lock(&self.cache),
                        key,
                        Instant::now() + ttl,
                        status.clone(),
                    );
                }
                status
            }
        };
        let flag = |k: &str| status.get(k).and_then(Value::as_bool) == Some(true);
        let reason = status
            .get("reason")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        match (flag("allowed"), flag("denied")) {
            (true, true) => (
                Decision::Deny,
                reason,
                Some("webhook subject access review returned both allow and deny response".into()),
            ),
            (_, true) => (Decision::Deny, reason, None),
            (true, _) => (Decision::Allow, reason, None),
            _ => (Decision::NoOpinion, reason, None),
        }
    }
}
