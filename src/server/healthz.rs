//! /healthz, /readyz and /livez: named checks rendered as the apiserver library renders them.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use super::http::{Check, Request, Response};
use super::lock;

// ---------------------------------------------------------------------------------------------
// Health checks

/// The registry of named health checks behind /healthz, and the readiness check for /readyz.
#[derive(Default)]
pub struct Health {
    checks: Mutex<Vec<(String, Check)>>,
    ready: Mutex<Option<Check>>,
}

impl Health {
    pub fn new() -> Arc<Self> {
        Arc::new(Health::default())
    }

    /// Add a named check (shown as `[+]name ok`); a check with the same name is replaced.
    pub fn add_check(&self, name: &str, check: Check) {
        let mut checks = lock(&self.checks);
        match checks.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = check,
            None => checks.push((name.to_string(), check)),
        }
    }

    pub fn set_ready_check(&self, check: Check) {
        *lock(&self.ready) = Some(check);
    }

    pub fn check_names(&self) -> Vec<String> {
        lock(&self.checks).iter().map(|(n, _)| n.clone()).collect()
    }

    /// The /healthz answer for this request.
    pub fn healthz(&self, req: &Request) -> Response {
        let checks = lock(&self.checks).clone();
        render_checks("healthz", &checks, req)
    }

    /// The /readyz answer: the ready check (named `ready`), or `ping` if none is set.
    pub fn readyz(&self, req: &Request) -> Response {
        let checks: Vec<(String, Check)> = lock(&self.ready)
            .clone()
            .map(|c| vec![("ready".to_string(), c)])
            .unwrap_or_default();
        render_checks("readyz", &checks, req)
    }

    /// The /livez answer: `ping` only (we are alive if we answer).
    pub fn livez(&self, req: &Request) -> Response {
        render_checks("livez", &[], req)
    }
}

/// The apiserver healthz handler's output format.
fn render_checks(name: &str, checks: &[(String, Check)], req: &Request) -> Response {
    let ping: Check = Arc::new(|| Ok(()));
    let default = [("ping".to_string(), ping)];
    let checks = if checks.is_empty() {
        &default[..]
    } else {
        checks
    };
    let mut excluded: BTreeSet<String> = req.query_values("exclude").into_iter().collect();
    let mut out = String::new();
    let mut failed: Vec<&str> = Vec::new();
    for (check_name, check) in checks {
        if excluded.remove(check_name) {
            let _ = writeln!(out, "[+]{check_name} excluded: ok");
            continue;
        }
        match check() {
            Ok(()) => {
                let _ = writeln!(out, "[+]{check_name} ok");
            }
            Err(reason) => {
                let _ = writeln!(out, "[-]{check_name} failed: reason withheld");
                log::debug!("{name} check {check_name} failed: {reason}");
                failed.push(check_name);
            }
        }
    }
    if !excluded.is_empty() {
        let quoted: Vec<String> = excluded.iter().map(|n| format!("{n:?}")).collect();
        let _ = writeln!(
            out,
            "warn: some health checks cannot be excluded: no matches for {}",
            quoted.join(",")
        );
    }
    if !failed.is_empty() {
        log::info!("{} check failed: {name}", failed.join(","));
        return Response::error(500, &format!("{out}{name} check failed"));
    }
    if !req.has_query("verbose") {
        return Response::text(200, "ok");
    }
    Response::text(200, format!("{out}{name} check passed\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::TEXT_PLAIN;

    fn req(path_and_query: &str) -> Request {
        Request::get(path_and_query)
    }

    fn body(r: &Response) -> &str {
        std::str::from_utf8(&r.body).unwrap()
    }

    fn health_with_failing() -> Arc<Health> {
        let h = Health::new();
        h.add_check("leaderElection", Arc::new(|| Ok(())));
        h.add_check("deployment-controller", Arc::new(|| Err("boom".into())));
        h.add_check("replicaset-controller", Arc::new(|| Ok(())));
        h
    }

    #[test]
    fn healthz_ping_when_empty() {
        let h = Health::new();
        let r = h.healthz(&req("/healthz"));
        assert_eq!((r.status, body(&r)), (200, "ok"));
        assert_eq!(r.content_type, TEXT_PLAIN);
        let r = h.healthz(&req("/healthz?verbose"));
        assert_eq!(body(&r), "[+]ping ok\nhealthz check passed\n");
    }

    #[test]
    fn healthz_failure_is_always_verbose() {
        let h = health_with_failing();
        for q in ["/healthz", "/healthz?verbose"] {
            let r = h.healthz(&req(q));
            assert_eq!(r.status, 500);
            assert_eq!(
                body(&r),
                "[+]leaderElection ok\n[-]deployment-controller failed: reason withheld\n\
                 [+]replicaset-controller ok\nhealthz check failed\n"
            );
        }
    }

    #[test]
    fn healthz_exclude() {
        let h = health_with_failing();
        let r = h.healthz(&req("/healthz?exclude=deployment-controller"));
        assert_eq!((r.status, body(&r)), (200, "ok"));
        let r = h.healthz(&req(
            "/healthz?verbose=false&exclude=deployment-controller&exclude=nope&exclude=also%2Dnope",
        ));
        assert_eq!(r.status, 200);
        assert_eq!(
            body(&r),
            "[+]leaderElection ok\n[+]deployment-controller excluded: ok\n\
             [+]replicaset-controller ok\n\
             warn: some health checks cannot be excluded: no matches for \"also-nope\",\"nope\"\n\
             healthz check passed\n"
        );
    }

    #[test]
    fn add_check_replaces_same_name() {
        let h = health_with_failing();
        h.add_check("deployment-controller", Arc::new(|| Ok(())));
        assert_eq!(h.healthz(&req("/healthz")).status, 200);
        assert_eq!(h.check_names().len(), 3);
    }

    #[test]
    fn readyz_and_livez() {
        let h = Health::new();
        assert_eq!(body(&h.readyz(&req("/readyz"))), "ok");
        h.set_ready_check(Arc::new(|| Err("caches not synced".into())));
        let r = h.readyz(&req("/readyz"));
        assert_eq!(r.status, 500);
        assert_eq!(
            body(&r),
            "[-]ready failed: reason withheld\nreadyz check failed\n"
        );
        let r = h.livez(&req("/livez?verbose"));
        assert_eq!(
            (r.status, body(&r)),
            (200, "[+]ping ok\nlivez check passed\n")
        );
    }
}
