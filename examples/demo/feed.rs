//! What the controllers did, printed as it happens, and the summary at the end.
//!
//! Two sources, each naming the controller: edgekcm's own debug line for every object a
//! controller creates (`<controller>: created <resource> <namespace/name>`, the only place the
//! name of a generated object shows), and the sandbox's request log for every other write (the
//! path names the object; the user agent ends in the controller's name, then
//! `/system:serviceaccount:...` with `--use-service-account-credentials`). Events are left out:
//! they tell again what the writes show.

use edgekcm::api::resources::{Kind, ALL};
use edgekcm::sandbox::{RequestRecord, Sandbox};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One thing a controller (or the demo) did.
#[derive(Debug, Clone)]
pub struct Action {
    pub at: Instant,
    pub by: String,
    /// created, updated, patched, deleted, applied.
    pub verb: String,
    pub kind: String,
    /// `namespace/name` or `name`.
    pub key: String,
    /// A subresource (`status`, `finalize`, ...).
    pub sub: Option<String>,
}

impl Action {
    fn what(&self) -> String {
        match &self.sub {
            Some(s) => format!("{} {} {} ({s})", self.verb, self.kind, self.key),
            None => format!("{} {} {}", self.verb, self.kind, self.key),
        }
    }
}

/// Lines edgekcm logged, waiting to be printed.
type Inbox = Arc<Mutex<Vec<Line>>>;

enum Line {
    Did(Action),
    Warning(Instant, String),
}

/// Takes edgekcm's log lines: creations and warnings go to the inbox, the rest is dropped.
struct Capture(Inbox);

impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Warn || m.target().starts_with("edgekcm::manager")
    }

    fn log(&self, rec: &log::Record<'_>) {
        let at = Instant::now();
        let line = if rec.level() <= log::Level::Warn {
            Line::Warning(at, format!("{} {}", rec.level(), rec.args()))
        } else if rec.level() == log::Level::Debug && rec.target().starts_with("edgekcm::manager") {
            match creation(at, &rec.args().to_string()) {
                Some(a) => Line::Did(a),
                None => return,
            }
        } else {
            return;
        };
        let mut inbox = self.0.lock().unwrap_or_else(|e| e.into_inner());
        inbox.push(line);
    }

    fn flush(&self) {}
}

/// `<controller>: created <resource> <key>` as an action.
fn creation(at: Instant, text: &str) -> Option<Action> {
    let (by, rest) = text.split_once(": created ")?;
    let mut words = rest.split(' ');
    let (resource, key) = (words.next()?, words.next()?);
    let kind = ALL.iter().find(|k| k.resource_name() == resource)?;
    Some(Action {
        at,
        by: by.to_string(),
        verb: "created".into(),
        kind: kind.kind.to_string(),
        key: key.to_string(),
        sub: None,
    })
}

/// A kind by its REST path, with the namespace, name and subresource the path names:
/// `/api/v1/namespaces/demo/pods/web-1/status`, `/apis/apps/v1/deployments`, ...
fn parse_path(path: &str) -> Option<(&'static Kind, String, Option<String>)> {
    let path = path.split('?').next()?;
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", _v, rest @ ..] => ("", rest),
        ["apis", g, _v, rest @ ..] => (*g, rest),
        _ => return None,
    };
    let (ns, rest) = match rest {
        ["namespaces", ns, plural, rest @ ..] => (Some(*ns), {
            let mut r = vec![*plural];
            r.extend_from_slice(rest);
            r
        }),
        rest => (None, rest.to_vec()),
    };
    let (plural, name, sub) = match rest.as_slice() {
        [plural] => match ns {
            // A namespace's own subresources: `/api/v1/namespaces/demo/finalize`.
            Some(n) if group.is_empty() && ["finalize", "status"].contains(plural) => {
                ("namespaces", n, Some(plural.to_string()))
            }
            _ => (*plural, "", None),
        },
        [plural, name] => (*plural, *name, None),
        [plural, name, sub] => (*plural, *name, Some(sub.to_string())),
        _ => return None,
    };
    let kind = ALL
        .iter()
        .find(|k| k.group == group && k.plural == plural)?;
    let key = match ns {
        Some(ns) if kind.namespaced => format!("{ns}/{name}"),
        _ => name.to_string(),
    };
    Some((kind, key, sub))
}

/// The controller a user agent names: `edgekcm/v0.1.0 (linux/amd64) <name>[/<user>]`.
fn agent(ua: &str) -> &str {
    let last = ua.rsplit(' ').next().unwrap_or("");
    last.split('/').next().unwrap_or("")
}

/// A write other than a create, by one of `names`, as an action.
fn request_action(r: &RequestRecord, names: &[&str]) -> Option<Action> {
    let verb = match r.method.as_str() {
        "PUT" => "updated",
        "PATCH" => "patched",
        "DELETE" => "deleted",
        _ => return None,
    };
    if r.status >= 400 {
        return None;
    }
    let by = agent(r.user_agent.as_deref()?);
    if !names.contains(&by) {
        return None;
    }
    let (kind, key, sub) = parse_path(&r.path)?;
    let key = if key.ends_with('/') || key.is_empty() {
        format!("{key}*")
    } else {
        key
    };
    Some(Action {
        at: r.at,
        by: by.to_string(),
        verb: verb.into(),
        kind: kind.kind.to_string(),
        key,
        sub,
    })
}

/// The per-controller tally for the summary.
#[derive(Default)]
struct Tally {
    first: Option<Duration>,
    /// "created Pod" -> how many.
    counts: BTreeMap<String, usize>,
}

pub struct Feed {
    t0: Instant,
    names: Vec<&'static str>,
    inbox: Inbox,
    /// Request log records looked at so far.
    seen: usize,
    tally: BTreeMap<String, Tally>,
}

impl Feed {
    /// Take edgekcm's log lines from now on; times count from `t0`. `names`: the controllers
    /// that run.
    pub fn install(t0: Instant, names: Vec<&'static str>) -> Feed {
        let inbox = Inbox::default();
        if log::set_boxed_logger(Box::new(Capture(inbox.clone()))).is_ok() {
            log::set_max_level(log::LevelFilter::Debug);
        }
        Feed {
            t0,
            names,
            inbox,
            seen: 0,
            tally: BTreeMap::new(),
        }
    }

    pub fn since(&self, at: Instant) -> f64 {
        at.saturating_duration_since(self.t0).as_secs_f64()
    }

    /// Print what happened since the last call, oldest first.
    pub fn tick(&mut self, sb: &Sandbox) {
        let mut news: Vec<Line> = std::mem::take(&mut *self.inbox.lock().unwrap());
        let log = sb.requests();
        let from = self.seen.min(log.len());
        news.extend(
            log[from..]
                .iter()
                .filter_map(|r| request_action(r, &self.names))
                .map(Line::Did),
        );
        self.seen = log.len();
        news.sort_by_key(|l| match l {
            Line::Did(a) => a.at,
            Line::Warning(at, _) => *at,
        });
        for l in news {
            match l {
                Line::Did(a) => self.did(a),
                Line::Warning(at, text) => {
                    println!("{:6.2}s  edgekcm: {text}", self.since(at));
                }
            }
        }
    }

    /// Print and count one action.
    pub fn did(&mut self, a: Action) {
        if a.kind == "Event" {
            return;
        }
        let t = a.at.saturating_duration_since(self.t0);
        println!("{:6.2}s  {:<36} {}", t.as_secs_f64(), a.by, a.what());
        let tally = self.tally.entry(a.by.clone()).or_default();
        tally.first.get_or_insert(t);
        let what = match &a.sub {
            Some(s) => format!("{} {} {s}", a.verb, a.kind),
            None => format!("{} {}", a.verb, a.kind),
        };
        *tally.counts.entry(what).or_default() += 1;
    }

    /// Tick until `done` holds or `timeout` passes; false on timeout.
    pub fn wait(
        &mut self,
        sb: &Sandbox,
        timeout: Duration,
        mut done: impl FnMut() -> bool,
    ) -> bool {
        let end = Instant::now() + timeout;
        loop {
            self.tick(sb);
            if done() {
                return true;
            }
            if Instant::now() >= end {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// One line per controller: when it first wrote, and what it wrote.
    pub fn summary(&self) {
        println!("\nwhat each controller did (first write after start; writes by kind):");
        let mut idle = Vec::new();
        for name in &self.names {
            let Some(t) = self.tally.get(*name) else {
                idle.push(*name);
                continue;
            };
            let first = t.first.unwrap_or_default().as_secs_f64();
            let counts: Vec<String> = t
                .counts
                .iter()
                .map(|(what, n)| format!("{what} x{n}"))
                .collect();
            println!("  {name:<46} {first:6.2}s  {}", counts.join(", "));
        }
        if !idle.is_empty() {
            println!(
                "  running, with nothing to do in this workload ({}): {}",
                idle.len(),
                idle.join(", ")
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        let p = |s| parse_path(s).map(|(k, key, sub)| (k.kind, key, sub));
        assert_eq!(
            p("/apis/apps/v1/namespaces/demo/replicasets/web-1/status?x=1"),
            Some(("ReplicaSet", "demo/web-1".into(), Some("status".into())))
        );
        assert_eq!(
            p("/api/v1/nodes/node-a"),
            Some(("Node", "node-a".into(), None))
        );
        assert_eq!(
            p("/api/v1/namespaces/demo/finalize"),
            Some(("Namespace", "demo".into(), Some("finalize".into())))
        );
        assert_eq!(
            p("/api/v1/namespaces/demo"),
            Some(("Namespace", "demo".into(), None))
        );
        assert_eq!(agent("edgekcm/v0.1.0 (linux/amd64) job-controller/system:serviceaccount:kube-system:job-controller"), "job-controller");
    }
}
