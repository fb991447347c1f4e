//! One sync of one HPA, as upstream's `reconcileAutoscaler`: read the target's scale, compute
//! a proposal per metric, normalise it, write the scale when it changes, then the status
//! (only when it changed) and the Events. The scale is read and written live through
//! [`Source`]; the status write and the Events are returned as actions.

use super::calc::Calc;
use super::metrics::{self, Proposal};
use super::normalize::{self, History};
use super::source::Source;
use super::spec;
use crate::api::labels::LabelSelector;
use crate::api::resources::HPAS;
use crate::controller::{Action, EventSpec, EventType, ObjectRef, Report};
use crate::controllers::kit::conditions::{self, Condition};
use crate::obj::{At as _, Obj};
use serde_json::{json, Map, Value};
use std::time::{Duration, SystemTime};

/// The condition saying this controller scaled the target to zero (v1.37, HPAScaleToZero).
pub const SCALED_TO_ZERO: &str = "ScaledToZero";

/// What a sync reads besides the HPA and its source.
pub struct Input<'a> {
    pub hpa: &'a Value,
    pub now: SystemTime,
    pub calc: Calc,
    pub downscale_window: Duration,
    /// The pods of the HPA's namespace a selector picks (from the cache).
    pub pods: &'a dyn Fn(&LabelSelector) -> Vec<Obj>,
    /// The keys of the HPAs whose last known selector picks one of these pods, this one
    /// included (upstream's `hpaSelectors`); records this HPA's selector first.
    pub selecting: &'a dyn Fn(&LabelSelector, &[Obj]) -> Vec<String>,
    pub source: &'a dyn Source,
}

/// The working copy of the status and what the sync has to write.
pub struct Run<'a> {
    pub input: &'a Input<'a>,
    pub conditions: Vec<Value>,
    pub events: Vec<Action>,
    now: String,
}

impl<'a> Run<'a> {
    pub fn set(&mut self, type_: &str, status: &str, reason: &str, message: &str) {
        conditions::set_in_place(
            &mut self.conditions,
            &Condition {
                type_,
                status,
                reason,
                message,
            },
            &self.now,
        );
    }

    /// Upstream's `removeCondition`.
    pub fn remove(&mut self, type_: &str) {
        self.conditions.retain(|c| c["type"] != type_);
    }

    fn has_true(&self, type_: &str) -> bool {
        self.conditions
            .iter()
            .find(|c| c["type"] == type_)
            .is_some_and(|c| c["status"] == "True")
    }

    pub fn event(&mut self, warning: bool, reason: &str, message: String) {
        self.events.push(Action::Event(EventSpec {
            involved: ObjectRef::of(&HPAS, self.input.hpa),
            event_type: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.to_string(),
            message,
        }));
    }
}

/// The new status, as upstream's `setStatus` builds it (`observed`: `observedGeneration`,
/// the HPA's generation there while HPAGeneration is on; as it was on the paths that keep
/// the old status).
fn status(
    run: &Run,
    current: i32,
    desired: i32,
    last_scale: Option<Value>,
    metrics: Option<Vec<Value>>,
    observed: Option<Value>,
) -> Value {
    let mut s = Map::new();
    if let Some(g) = observed {
        s.insert("observedGeneration".into(), g);
    }
    if current != 0 {
        s.insert("currentReplicas".into(), json!(current));
    }
    s.insert("desiredReplicas".into(), json!(desired));
    if let Some(t) = last_scale {
        s.insert("lastScaleTime".into(), t);
    }
    if let Some(m) = metrics.filter(|m| !m.is_empty()) {
        s.insert("currentMetrics".into(), Value::Array(m));
    }
    if !run.conditions.is_empty() {
        s.insert("conditions".into(), Value::Array(run.conditions.clone()));
    }
    Value::Object(s)
}

/// The status as stored, without nulls and empty lists (what Go's `omitempty` leaves out).
fn stored_status(hpa: &Value) -> Value {
    let mut s = hpa.get("status").cloned().unwrap_or_else(|| json!({}));
    if let Some(m) = s.as_object_mut() {
        m.retain(|k, v| {
            let omitted = v.is_null()
                || v.as_array().is_some_and(Vec::is_empty)
                || (k == "currentReplicas" && v.as_i64() == Some(0));
            !omitted
        });
        m.entry("desiredReplicas").or_insert(json!(0));
    }
    s
}

/// The actions of a sync: the status update (when it changed) and Events, in upstream's
/// order; and the error upstream's sync returns (logged, the HPA is synced again a period
/// later either way).
pub struct Synced {
    pub actions: Vec<Action>,
    pub error: Option<String>,
    /// The reconciliation's `action` label: scale_up or scale_down after a rescale, else none.
    pub action: &'static str,
}

fn finish(run: Run, new_status: Value, events_first: bool, error: Option<String>) -> Synced {
    let hpa = run.input.hpa;
    let mut actions = Vec::new();
    let mut update = None;
    if stored_status(hpa) != new_status {
        let mut o = hpa.clone();
        o["status"] = new_status;
        // A failed write is a `FailedUpdateStatus` Event; the HPA is synced again a period
        // later ([`super::Hpa::on_error`]), as upstream.
        update = Some(Action::Reported {
            action: Box::new(Action::UpdateSubresource {
                kind: HPAS,
                object: o,
                subresource: "status",
            }),
            report: Report {
                about: ObjectRef::of(&HPAS, hpa),
                success_reason: "",
                success_prefix: "",
                failure_reason: "FailedUpdateStatus",
                failure_prefix: "".into(),
            },
        });
    }
    if events_first {
        actions.extend(run.events);
        actions.extend(update);
    } else {
        actions.extend(update);
        actions.extend(run.events);
    }
    Synced {
        actions,
        error,
        action: "none",
    }
}

/// `reconcileAutoscaler`.
pub fn sync(input: &Input, h: &mut History) -> Synced {
    let hpa = input.hpa;
    let mut run = Run {
        input,
        conditions: hpa
            .at("/status/conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
        events: Vec::new(),
        now: crate::compat::timefmt::rfc3339(input.now),
    };
    let old_current = hpa
        .at("/status/currentReplicas")
        .and_then(Value::as_i64)
        .unwrap_or(0) as i32;
    let old_desired = hpa
        .at("/status/desiredReplicas")
        .and_then(Value::as_i64)
        .unwrap_or(0) as i32;
    let old_last_scale = hpa
        .at("/status/lastScaleTime")
        .filter(|v| !v.is_null())
        .cloned();
    let old_metrics = hpa
        .at("/status/currentMetrics")
        .and_then(Value::as_array)
        .cloned();
    let old_observed = hpa
        .at("/status/observedGeneration")
        .filter(|v| !v.is_null())
        .cloned();
    let observed = crate::config::gates::enabled("HPAGeneration").then(|| {
        json!(hpa
            .at("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0))
    });
    let ns = crate::obj::namespace(hpa);
    let (api_version, kind, name) = spec::target(hpa);
    let reference = format!("{kind}/{ns}/{name}");

    let (mut scale, path) = match input.source.get_scale(ns, &api_version, &kind, &name) {
        Ok(s) => s,
        Err(e) => {
            run.event(true, "FailedGetScale", e.clone());
            run.set(
                "AbleToScale",
                "False",
                "FailedGetScale",
                &format!("the HPA controller was unable to get the target's current scale: {e}"),
            );
            let st = status(
                &run,
                old_current,
                old_desired,
                old_last_scale,
                old_metrics,
                old_observed,
            );
            // Upstream records the Event before the status write here.
            return finish(
                run,
                st,
                true,
                Some(format!(
                    "failed to query scale subresource for {reference}: {e}"
                )),
            );
        }
    };
    run.set(
        "AbleToScale",
        "True",
        "SucceededGetScale",
        "the HPA controller was able to get the target's current scale",
    );
    let current = scale
        .at("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(0) as i32;
    h.record_initial(current, input.now);
    let min = spec::min_replicas(hpa);
    let max = spec::max_replicas(hpa);
    let to_zero_gate = crate::config::gates::enabled("HPAScaleToZero");
    let object_or_external = spec::has_object_or_external_metrics(hpa);
    let d = match decide(&mut run, h, &scale, current, min, max) {
        Ok(d) => d,
        Err(e) => {
            let st = status(
                &run,
                current,
                old_desired,
                old_last_scale,
                old_metrics,
                old_observed,
            );
            run.event(true, "FailedComputeMetricsReplicas", e.clone());
            return finish(
                run,
                st,
                false,
                Some(format!(
                    "failed to compute desired number of replicas based on listed metrics for {reference}: {e}"
                )),
            );
        }
    };
    let (rescale, mut desired, reason, statuses, error) =
        (d.rescale, d.replicas, d.reason, d.statuses, d.error);

    let mut last_scale = old_last_scale.clone();
    if rescale {
        if let Err(e) = write_scale(&mut run, h, &mut scale, &path, current, desired, &reason) {
            let st = status(
                &run,
                current,
                old_desired,
                old_last_scale,
                old_metrics,
                old_observed,
            );
            return finish(
                run,
                st,
                true,
                Some(format!("failed to rescale {reference}: {e}")),
            );
        }
        last_scale = Some(json!(crate::compat::timefmt::rfc3339(input.now)));
        // Set on every rescale, so that it is never stale.
        let to_zero = current > 0 && desired == 0 && min == 0 && object_or_external;
        mark_scaled_to_zero(&mut run, to_zero_gate, to_zero);
    } else {
        desired = current;
    }
    let st = status(&run, current, desired, last_scale, statuses, observed);
    super::monitor::set_desired(ns, crate::obj::name(hpa), desired);
    // Events were recorded as they happened, before the status write.
    let mut done = finish(run, st, true, error);
    if rescale {
        done.action = super::monitor::action(desired, current);
    }
    done
}

/// What the sync decides before writing: the bounds, zero, or the metrics (Err: no metric
/// could be computed).
fn decide(
    run: &mut Run,
    h: &mut History,
    scale: &Value,
    current: i32,
    min: i32,
    max: i32,
) -> Result<Desired, String> {
    let hpa = run.input.hpa;
    let mut d = Desired {
        rescale: true,
        replicas: 0,
        reason: String::new(),
        statuses: None,
        error: None,
    };
    // Scale to zero (HPAScaleToZero): a target at zero is brought back by the metrics only
    // when this controller put it there (the ScaledToZero condition) and an Object or
    // External metric can see load without pods, or minReplicas was raised since.
    let to_zero_gate = crate::config::gates::enabled("HPAScaleToZero");
    let scaled_to_zero = to_zero_gate && run.has_true(SCALED_TO_ZERO);
    if current == 0 {
        let from_zero = scaled_to_zero && (min != 0 || spec::has_object_or_external_metrics(hpa));
        if !from_zero {
            d.rescale = false;
            run.set(
                "ScalingActive",
                "False",
                "ScalingDisabled",
                "scaling is disabled since the replica count of the target is zero",
            );
            if !to_zero_gate {
                run.remove(SCALED_TO_ZERO);
            }
            return Ok(d);
        }
    } else if current > max {
        d.reason = "Current number of replicas above Spec.MaxReplicas".into();
        d.replicas = max;
        return Ok(d);
    } else if current < min {
        d.reason = "Current number of replicas below Spec.MinReplicas".into();
        d.replicas = min;
        return Ok(d);
    }
    let mut d = from_metrics(run, h, scale, current, min, max)?;
    if current == 0 && min != 0 && scaled_to_zero && d.replicas < min {
        d.replicas = min;
        if d.reason.is_empty() {
            d.reason = "Current number of replicas below Spec.MinReplicas".into();
        }
    }
    d.rescale = d.replicas != current;
    Ok(d)
}

/// The `ScaledToZero` condition after a rescale (removed while its gate is off).
fn mark_scaled_to_zero(run: &mut Run, gate: bool, to_zero: bool) {
    if !gate {
        run.remove(SCALED_TO_ZERO);
    } else if to_zero {
        run.set(
            SCALED_TO_ZERO,
            "True",
            "ScaledToZero",
            "the HPA controller scaled the workload to zero",
        );
    } else {
        run.set(
            SCALED_TO_ZERO,
            "False",
            "NotScaledToZero",
            "the HPA controller did not scale the workload to zero",
        );
    }
}

/// The replicas the metrics ask for, normalised, and why.
struct Desired {
    rescale: bool,
    replicas: i32,
    reason: String,
    statuses: Option<Vec<Value>>,
    error: Option<String>,
}

/// Upstream's `computeReplicasForMetrics` then `normalizeDesiredReplicas` (or, with a
/// `behavior`, `normalizeDesiredReplicasWithBehaviors`). Err: no metric could be computed.
fn from_metrics(
    run: &mut Run,
    h: &mut History,
    scale: &Value,
    current: i32,
    min: i32,
    max: i32,
) -> Result<Desired, String> {
    let (hpa, input) = (run.input.hpa, run.input);
    let p: Proposal = metrics::compute(run, scale, current);
    if p.replicas == -1 {
        return Err(p.error.unwrap_or_default());
    }
    let mut desired = 0;
    let mut reason = String::new();
    let mut rescale_metric = "";
    if p.replicas > desired {
        desired = p.replicas;
        rescale_metric = &p.metric;
    }
    if desired > current {
        reason = format!("{rescale_metric} above target");
    }
    if desired < current {
        reason = "All metrics below target".into();
    }
    let n = match spec::behavior(hpa, input.downscale_window.as_secs() as i32) {
        None => normalize::normalize(
            h,
            input.downscale_window,
            current,
            desired,
            min,
            max,
            input.now,
        ),
        Some(b) => normalize::normalize_with(h, &b, current, desired, min, max, input.now),
    };
    run.set("AbleToScale", "True", n.able.0, n.able.1);
    run.set(
        "ScalingLimited",
        if n.limited { "True" } else { "False" },
        n.limit.0,
        n.limit.1,
    );
    Ok(Desired {
        rescale: true,
        replicas: n.replicas,
        reason,
        statuses: p.statuses,
        error: p.error,
    })
}

/// Write the target's scale with `desired` replicas, with its condition and Event (and,
/// with a `behavior`, the scale event recorded). Err: the write failed.
fn write_scale(
    run: &mut Run,
    h: &mut History,
    scale: &mut Value,
    path: &str,
    current: i32,
    desired: i32,
    reason: &str,
) -> Result<(), String> {
    let (hpa, input) = (run.input.hpa, run.input);
    scale["spec"]["replicas"] = json!(desired);
    if let Err(e) = input.source.update_scale(path, scale) {
        run.event(
            true,
            "FailedRescale",
            format!("New size: {desired}; reason: {reason}; error: {e}"),
        );
        run.set(
            "AbleToScale",
            "False",
            "FailedUpdateScale",
            &format!("the HPA controller was unable to update the target scale: {e}"),
        );
        return Err(e);
    }
    run.set(
        "AbleToScale",
        "True",
        "SucceededRescale",
        &format!("the HPA controller was able to update the target scale to {desired}"),
    );
    run.event(
        false,
        "SuccessfulRescale",
        format!("New size: {desired}; reason: {reason}"),
    );
    if let Some(b) = spec::behavior(hpa, input.downscale_window.as_secs() as i32) {
        h.store_scale_event(&b, current, desired, input.now);
    }
    log::info!(
        "horizontal-pod-autoscaler: successfully rescaled {}: {current} -> {desired} ({reason})",
        crate::obj::key(hpa)
    );
    Ok(())
}
