//! Applying the actions a reconcile returns: one write or Event at a time, slow-start
//! batches and parallel groups, with each outcome told to the controller.

use crate::api::client::Client;
use crate::cache::Cache;
use crate::controller::{
    Action, Applied, Controller, EventSpec, EventType, OnError, Report, Settings,
};
use crate::events::Recorder;
use crate::obj::At as _;
use serde_json::Value;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Requests one reconcile runs at the same time (slow-start batches and parallel deletes).
pub const MAX_PARALLEL: usize = 16;

/// Upstream's slow-start batch sizes for `count` actions: 1, 2, 4, ... and what remains.
pub fn slow_start_sizes(count: usize) -> Vec<usize> {
    let mut sizes = Vec::new();
    let (mut left, mut batch) = (count, 1usize);
    while left > 0 {
        let n = batch.min(left);
        sizes.push(n);
        left -= n;
        batch = batch.saturating_mul(2);
    }
    sizes
}

/// Apply one write or Event with `client`; keep the cache in step with our own writes. A
/// delete of something already gone is Ok. Composite actions (`Reported`, `SlowStart`,
/// `Parallel`) are run as the worker runs them, failing with the first failure.
pub fn apply(
    cache: &Cache,
    client: &Client,
    recorder: &Recorder,
    ctrl: &dyn Controller,
    settings: &Settings,
    action: &Action,
) -> crate::Result<()> {
    match action {
        Action::Reported { .. } | Action::SlowStart(_) | Action::Parallel(_) => {
            let run = Run {
                cache,
                client,
                recorder,
                ctrl,
                settings,
                key: "",
                failures: Mutex::new(Vec::new()),
            };
            run.one(action);
            match run
                .failures
                .into_inner()
                .unwrap_or_else(|p| p.into_inner())
                .into_iter()
                .next()
            {
                Some(e) => Err(e),
                None => Ok(()),
            }
        }
        _ => match apply_leaf(cache, client, recorder, settings, action) {
            Err(e) if e.is_not_found() && matches!(action, Action::Delete { .. }) => Ok(()),
            other => other.map(|_| ()),
        },
    }
}

/// Waits between the attempts of a create whose answer was lost (about 15 s in all: an
/// API server restart).
const CREATE_RETRIES: [u64; 6] = [250, 500, 1000, 2000, 4000, 8000];

/// Characters of a generated name's suffix, as the API server's name generator uses.
pub(super) const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// `generateName` plus five random characters, as the API server would make it (the prefix
/// cut to 58 characters so the name fits in 63).
pub fn generated_name(prefix: &str) -> String {
    let mut cut = prefix.len().min(58);
    while !prefix.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut name = prefix[..cut].to_string();
    for _ in 0..5 {
        name.push(NAME_ALPHABET[fastrand::usize(..NAME_ALPHABET.len())] as char);
    }
    name
}

/// Create `object` exactly once. An object with only a `generateName` is sent with a name
/// made here from it (the object keeps its `generateName`, as one named by the server
/// does), so that a create whose answer is lost (the connection reset after the request
/// went out) can be sent again without making a second object: the server's AlreadyExists
/// then says the first attempt was carried out, and the object is read back. Without this,
/// an owner whose create answer was lost would create a replacement that the watch later
/// shows beside the first.
fn create_once(
    client: &Client,
    kind: crate::api::Kind,
    ns: Option<&str>,
    object: &Value,
    shape: Option<&[&str]>,
) -> crate::Result<Value> {
    let prefix = object
        .at("/metadata/generateName")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty() && crate::obj::name(object).is_empty());
    let Some(prefix) = prefix else {
        return client.create_shaped(&kind, ns, object, shape);
    };
    let mut named = object.clone();
    named["metadata"]["name"] = Value::String(generated_name(prefix));
    let mut sent = false;
    let mut waits = CREATE_RETRIES.iter();
    loop {
        match client.create_shaped(&kind, ns, &named, shape) {
            Err(e) if e.is_already_exists() && sent => {
                // An earlier attempt was carried out: read it back.
                let name = crate::obj::name(&named).to_string();
                let v = client.get(&kind, ns, &name)?;
                let text =
                    serde_json::to_vec(&v).map_err(|e| crate::Error::Decode(e.to_string()))?;
                return crate::api::trim::from_slice(&text, shape)
                    .map_err(|e| crate::Error::Decode(e.to_string()));
            }
            Err(e) if e.is_already_exists() => {
                // The random name was taken: another one.
                named["metadata"]["name"] = Value::String(generated_name(prefix));
            }
            Err(crate::Error::Transport(m)) => {
                let Some(wait) = waits.next() else {
                    return Err(crate::Error::Transport(m));
                };
                log::debug!(
                    "create {kind} {}: {m}; sending it again",
                    crate::obj::name(&named)
                );
                sent = true;
                std::thread::sleep(std::time::Duration::from_millis(*wait));
            }
            r => return r,
        }
    }
}

/// A create; a namespace being deleted is refused here once the server said so.
fn create(
    cache: &Cache,
    client: &Client,
    settings: &Settings,
    kind: crate::api::resources::Kind,
    namespace: &str,
    object: &Value,
) -> crate::Result<Option<crate::obj::Obj>> {
    let ns = Some(namespace.to_string()).filter(|s| !s.is_empty());
    // Creating in a namespace being deleted is refused: once the apiserver said so,
    // the same answer is given here for a while without asking again (a replica
    // controller would otherwise send every missing pod, every sync, until the
    // namespace is gone).
    if cache.namespace_terminating(namespace) {
        return Err(crate::Error::api(
            403,
            "Forbidden",
            format!(
                "{kind} is forbidden: unable to create new content in namespace \
                     {namespace} because it is being terminated (recently refused; not sent)"
            ),
        ));
    }
    let shape = cache.write_shape(kind);
    let created = match create_once(client, kind, ns.as_deref(), object, shape.as_deref()) {
        Err(e) if e.is_namespace_terminating() => {
            cache.saw_namespace_terminating(namespace);
            return Err(e);
        }
        r => r?,
    };
    log::debug!(
        "{}: created {} {}",
        settings.name,
        kind,
        crate::obj::key(&created)
    );
    let created = std::sync::Arc::new(created);
    cache.observe_write_shared(kind, &created);
    Ok(Some(created))
}

/// A delete; the cache keeps what remains of the object (terminating) or forgets it.
fn delete(
    cache: &Cache,
    client: &Client,
    settings: &Settings,
    kind: crate::api::resources::Kind,
    namespace: &str,
    name: &str,
    options: &crate::api::client::DeleteOptions,
) -> crate::Result<Option<crate::obj::Obj>> {
    let ns = Some(namespace.to_string()).filter(|s| !s.is_empty());
    let shape = cache.write_shape(kind);
    let (remains, res) =
        match client.delete_shaped(&kind, ns.as_deref(), name, options, shape.as_deref()) {
            Ok(r) => (r, Ok(None)),
            Err(e) if e.is_not_found() => (None, Err(e)),
            Err(e) => return Err(e),
        };
    log::debug!(
        "{}: deleted {} {}",
        settings.name,
        kind,
        crate::obj::make_key(namespace, name)
    );
    match &remains {
        // Deleted gracefully or held by finalizers: it is still there, terminating
        // (removing it from the cache would have every other controller sync as if
        // it were gone until its next event put it back).
        Some(o) => cache.observe_write(kind, o),
        None => cache.observe_delete(kind, namespace, name),
    }
    res
}

/// One write; returns the server's answer where there is one. A delete that finds nothing is
/// the NotFound error (the cache forgets the object all the same).
fn apply_leaf(
    cache: &Cache,
    client: &Client,
    recorder: &Recorder,
    settings: &Settings,
    action: &Action,
) -> crate::Result<Option<crate::obj::Obj>> {
    let opt = |s: &str| Some(s.to_string()).filter(|s| !s.is_empty());
    match action {
        Action::Create {
            kind,
            namespace,
            object,
        } => create(cache, client, settings, *kind, namespace, object),
        Action::Update { kind, object } => {
            let shape = cache.write_shape(*kind);
            let v = client.update_shaped(kind, object, None, shape.as_deref())?;
            log::debug!(
                "{}: updated {} {}",
                settings.name,
                kind,
                crate::obj::key(&v)
            );
            let v = std::sync::Arc::new(v);
            cache.observe_write_shared(*kind, &v);
            Ok(Some(v))
        }
        Action::UpdateSubresource {
            kind,
            object,
            subresource,
        } => {
            let shape = cache.write_shape(*kind);
            let v = client.update_shaped(kind, object, Some(subresource), shape.as_deref())?;
            log::debug!(
                "{}: updated {} {} {}",
                settings.name,
                kind,
                crate::obj::key(&v),
                subresource
            );
            let v = std::sync::Arc::new(v);
            cache.observe_write_shared(*kind, &v);
            Ok(Some(v))
        }
        Action::Patch {
            kind,
            namespace,
            name,
            patch_type,
            patch,
            subresource,
        } => {
            let ns = opt(namespace);
            let shape = cache.write_shape(*kind);
            let v = client.patch_shaped(
                kind,
                ns.as_deref(),
                name,
                *patch_type,
                patch,
                *subresource,
                shape.as_deref(),
            )?;
            log::debug!(
                "{}: patched {} {}",
                settings.name,
                kind,
                crate::obj::make_key(namespace, name)
            );
            let v = std::sync::Arc::new(v);
            cache.observe_write_shared(*kind, &v);
            Ok(Some(v))
        }
        Action::Delete {
            kind,
            namespace,
            name,
            options,
        } => delete(cache, client, settings, *kind, namespace, name, options),
        Action::Apply {
            kind,
            namespace,
            name,
            field_manager,
            object,
            fallback,
            subresource,
        } => {
            let ns = opt(namespace);
            let shape = cache.write_shape(*kind);
            let v = match client.apply_shaped(
                kind,
                ns.as_deref(),
                name,
                *subresource,
                field_manager,
                object,
                shape.as_deref(),
            ) {
                Err(e) if e.code() == Some(415) && fallback.is_some() => {
                    let fallback = fallback.as_deref().expect("checked above");
                    log::debug!(
                        "{}: server-side apply of {kind} {} refused ({e}); falling back",
                        settings.name,
                        crate::obj::make_key(namespace, name)
                    );
                    return apply_leaf(cache, client, recorder, settings, fallback);
                }
                r => r?,
            };
            log::debug!(
                "{}: applied {} {}",
                settings.name,
                kind,
                crate::obj::make_key(namespace, name)
            );
            let v = std::sync::Arc::new(v);
            cache.observe_write_shared(*kind, &v);
            Ok(Some(v))
        }
        Action::Event(spec) => {
            recorder.record(client, settings.event_component, spec.clone());
            Ok(None)
        }
        Action::Reported { action, .. } => apply_leaf(cache, client, recorder, settings, action),
        Action::SlowStart(list) | Action::Parallel(list) => {
            for a in list {
                apply_leaf(cache, client, recorder, settings, a)?;
            }
            Ok(None)
        }
    }
}

/// The actions of one reconcile being applied: failures the controller wants retried are
/// gathered; every write is told to the controller.
pub(super) struct Run<'a> {
    pub(super) cache: &'a Cache,
    pub(super) client: &'a Client,
    pub(super) recorder: &'a Recorder,
    pub(super) ctrl: &'a dyn Controller,
    pub(super) settings: &'a Settings,
    pub(super) key: &'a str,
    pub(super) failures: Mutex<Vec<crate::Error>>,
}

impl Run<'_> {
    /// Apply one action (composites included). False when it failed and the failure counts.
    pub(super) fn one(&self, action: &Action) -> bool {
        match action {
            Action::SlowStart(list) => self.slow_start(list),
            Action::Parallel(list) => self.parallel(list) == 0,
            Action::Event(_) => {
                let _ = apply_leaf(
                    self.cache,
                    self.client,
                    self.recorder,
                    self.settings,
                    action,
                );
                true
            }
            Action::Reported {
                action: inner,
                report,
            } => {
                let res = apply_leaf(self.cache, self.client, self.recorder, self.settings, inner);
                let gone = matches!(&res, Err(e) if e.is_not_found())
                    && matches!(**inner, Action::Delete { .. });
                match &res {
                    _ if gone => {}
                    Ok(_) if report.success_reason.is_empty() => {}
                    Ok(answer) => {
                        let name = match (answer, &**inner) {
                            (_, Action::Delete { name, .. }) => name.as_str(),
                            (Some(v), _) => crate::obj::name(v),
                            (None, _) => "",
                        };
                        self.event(
                            report,
                            EventType::Normal,
                            report.success_reason,
                            format!("{}{name}", report.success_prefix),
                        );
                    }
                    Err(e) if e.is_namespace_terminating() => {}
                    Err(e) => self.event(
                        report,
                        EventType::Warning,
                        report.failure_reason,
                        format!("{}{}", report.failure_prefix, e.message()),
                    ),
                }
                self.settle(inner, if gone { Ok(None) } else { res })
            }
            _ => {
                let res = apply_leaf(
                    self.cache,
                    self.client,
                    self.recorder,
                    self.settings,
                    action,
                );
                let gone = matches!(&res, Err(e) if e.is_not_found())
                    && matches!(action, Action::Delete { .. });
                self.settle(action, if gone { Ok(None) } else { res })
            }
        }
    }

    fn event(&self, report: &Report, event_type: EventType, reason: &str, message: String) {
        self.recorder.record(
            self.client,
            self.settings.event_component,
            EventSpec {
                involved: report.about.clone(),
                event_type,
                reason: reason.to_string(),
                message,
            },
        );
    }

    /// Tell the controller, classify a failure. False when the failure counts.
    fn settle(&self, action: &Action, res: crate::Result<Option<crate::obj::Obj>>) -> bool {
        match res {
            Ok(v) => {
                self.ctrl
                    .applied(self.key, action, Applied::Done(v.as_deref()));
                true
            }
            Err(e) => {
                self.ctrl.applied(self.key, action, Applied::Failed(&e));
                match self.ctrl.on_error(action, &e) {
                    OnError::Ignore => {
                        log::debug!("{}: {}: ignoring: {e}", self.settings.name, self.key);
                        true
                    }
                    OnError::Retry => {
                        self.failures
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(e);
                        false
                    }
                }
            }
        }
    }

    /// Tell the controller about writes that were not tried.
    fn skip(&self, list: &[Action]) {
        for a in list {
            match a {
                Action::SlowStart(l) | Action::Parallel(l) => self.skip(l),
                Action::Reported { action, .. } => {
                    self.ctrl.applied(self.key, action, Applied::Skipped)
                }
                Action::Event(_) => {}
                _ => self.ctrl.applied(self.key, a, Applied::Skipped),
            }
        }
    }

    /// Batches of 1, 2, 4, ...; stop after the first batch with a failure. True if all went well.
    fn slow_start(&self, list: &[Action]) -> bool {
        let mut done = 0;
        for n in slow_start_sizes(list.len()) {
            let failed = self.parallel(&list[done..done + n]);
            done += n;
            if failed > 0 {
                if done < list.len() {
                    log::debug!(
                        "{}: {}: slow-start failure, skipping {} of {}",
                        self.settings.name,
                        self.key,
                        list.len() - done,
                        list.len()
                    );
                }
                self.skip(&list[done..]);
                return false;
            }
        }
        true
    }

    /// Apply every action, up to MAX_PARALLEL at a time; returns how many failed.
    fn parallel(&self, list: &[Action]) -> usize {
        if list.len() <= 1 {
            return list.iter().filter(|a| !self.one(a)).count();
        }
        let next = AtomicUsize::new(0);
        let failed = AtomicUsize::new(0);
        let work = || loop {
            let i = next.fetch_add(1, Ordering::SeqCst);
            let Some(a) = list.get(i) else { break };
            if !self.one(a) {
                failed.fetch_add(1, Ordering::SeqCst);
            }
        };
        // This thread takes its share too (and all of it if no helper could start).
        crate::runtime::pool::run_on_helpers(list.len().min(MAX_PARALLEL) - 1, &work);
        failed.into_inner()
    }
}
