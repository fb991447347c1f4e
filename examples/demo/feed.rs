//! What the controllers did, printed as it happens, and the summary at the end.
//!
//! Two sources, each naming the controller: edgekcm's own debug line for every object a
//! controller creates (`<controller>: created <resource> <namespace/name>`, the only place the
//! name of a generated object shows), and the sandbox's request log for every other write (the
//! path names the object; the user agent ends in the controller's name, then
//! `/system:serviceaccount:...` with `--use-service-account-credentials`). Events are counted
//! for the summary but not shown: they tell again what the writes show.

use edgekcm::api::resources::{Kind, ALL};
use edgekcm_sandbox::{RequestRecord, Sandbox};
use std::collections::{BTreeMap, HashSet};
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
        if let Some(ns) = self.key.strip_suffix("/") {
            return format!("{} every {} in {ns}", self.verb, self.kind);
        }
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
        // Other creations come from edgekcm's log, with their names.
        "POST" if r.path.contains("/events") => "recorded",
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
    /// verb -> what ("Pod", "every Pod", "Deployment status") -> how many.
    counts: BTreeMap<&'static str, BTreeMap<String, usize>>,
}

impl Tally {
    fn add(&mut self, a: &Action) {
        // Events (recorded, or patched when repeated) are one count.
        let (verb, what) = match (&a.sub, a.key.ends_with('/')) {
            _ if a.kind == "Event" && a.verb != "deleted" => ("recorded", "Events".to_string()),
            (Some(s), _) => (verb(&a.verb), format!("{} {s}", a.kind)),
            (None, true) => (verb(&a.verb), format!("every {}", a.kind)),
            (None, false) => (verb(&a.verb), a.kind.clone()),
        };
        *self
            .counts
            .entry(verb)
            .or_default()
            .entry(what)
            .or_default() += 1;
    }

    /// `created Pod x2, ReplicaSet`, `updated Deployment status x3`, ... in that order.
    fn lines(&self) -> Vec<String> {
        let order = ["created", "updated", "patched", "deleted", "recorded"];
        let mut out = Vec::new();
        for verb in order {
            let Some(whats) = self.counts.get(verb) else {
                continue;
            };
            for (i, (what, n)) in whats.iter().enumerate() {
                let times = if *n > 1 {
                    format!(" x{n}")
                } else {
                    String::new()
                };
                let head = if i == 0 {
                    format!("{verb} ")
                } else {
                    String::new()
                };
                out.push(format!("{head}{what}{times}"));
            }
        }
        out
    }
}

fn verb(v: &str) -> &'static str {
    match v {
        "created" => "created",
        "updated" => "updated",
        "patched" => "patched",
        "deleted" => "deleted",
        _ => "recorded",
    }
}

pub struct Feed {
    t0: Instant,
    names: Vec<&'static str>,
    /// The longest name.
    width: usize,
    /// Warnings printed, and how many repeats were not.
    warned: HashSet<String>,
    repeats: usize,
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
            width: names.iter().map(|n| n.len()).max().unwrap_or(0),
            names,
            warned: HashSet::new(),
            repeats: 0,
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
                    if self.warned.insert(text.clone()) {
                        println!("{:6.2}s  edgekcm: {text}", self.since(at));
                    } else {
                        self.repeats += 1;
                    }
                }
            }
        }
    }

    /// Print and count one action.
    pub fn did(&mut self, a: Action) {
        let t = a.at.saturating_duration_since(self.t0);
        // Events are counted, not shown: they tell again what the writes show.
        if a.kind != "Event" {
            let w = self.width;
            println!("{:6.2}s  {:<w$} {}", t.as_secs_f64(), a.by, a.what());
        }
        let tally = self.tally.entry(a.by.clone()).or_default();
        tally.first.get_or_insert(t);
        tally.add(&a);
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
        println!("\nwhat each controller did (the time is its first write since edgekcm started):");
        let mut idle = Vec::new();
        let w = self.width;
        for name in &self.names {
            let Some(t) = self.tally.get(*name) else {
                idle.push(*name);
                continue;
            };
            let first = t.first.unwrap_or_default().as_secs_f64();
            let head = format!("  {name:<w$} {first:6.2}s  ");
            println!("{}", wrap(&head, &t.lines(), 110));
        }
        if !idle.is_empty() {
            let head = format!("  nothing to do in this workload ({}): ", idle.len());
            let idle: Vec<String> = idle.iter().map(|n| n.to_string()).collect();
            println!("{}", wrap(&head, &idle, 110));
        }
        if self.repeats > 0 {
            println!(
                "  ({} repeats of edgekcm warnings above not shown)",
                self.repeats
            );
        }
    }
}

/// `items` after `head`, joined by ", ", wrapped at `width` under the end of `head`.
fn wrap(head: &str, items: &[String], width: usize) -> String {
    let indent = " ".repeat(head.len());
    let mut out = head.to_string();
    let mut line = head.len();
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
            line += 1;
            if line + 1 + item.len() > width {
                out.push('\n');
                out.push_str(&indent);
                line = indent.len();
            } else {
                out.push(' ');
                line += 1;
            }
        }
        out.push_str(item);
        line += item.len();
    }
    out
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
