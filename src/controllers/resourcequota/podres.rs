//! A pod's requests and limits as upstream's quota reads them in v1.37 (`PodRequests` /
//! `PodLimits` of `component-helpers/resource` with `UseStatusResources` and pod-level
//! resources on):
//! - per container, the spec's values, and since in-place resize (GA in v1.35) also what the
//!   kubelet allocated (`status.containerStatuses[].allocatedResources`) and what runs
//!   (`.resources`): a pod counts the largest of the three sums (spec, allocated, actuated),
//!   or of the last two while its resize is `Infeasible`;
//! - containers summed, the largest init container (restartable init containers count with
//!   the containers);
//! - pod-level `spec.resources` (PodLevelResources, beta in v1.34): its cpu, memory and
//!   hugepages replace the containers' sums;
//! - the pod overhead added (to limits only where a limit is set).

use super::usage::{add, read_list, ResourceList};
use serde_json::Value;

/// The spec's list, the allocated one, or the actuated one (upstream's
/// `containerSpecRequests`, `containerAllocatedRequests`, `containerActuatedRequests` and the
/// limits' pair).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Source {
    Spec,
    Allocated,
    Actuated,
}

fn max_into(into: &mut ResourceList, more: &ResourceList) {
    for (k, v) in more {
        match into.get(k) {
            Some(q) if v.cmp_value(q) != std::cmp::Ordering::Greater => {}
            _ => {
                into.insert(k.clone(), *v);
            }
        }
    }
}

/// The status of the container named `name` (upstream's `findContainerStatus`: the regular
/// containers' statuses first, then the init containers').
fn status_of<'a>(pod: &'a Value, name: &str) -> Option<&'a Value> {
    ["containerStatuses", "initContainerStatuses"]
        .iter()
        .filter_map(|l| pod["status"][l].as_array())
        .flatten()
        .find(|s| s["name"].as_str() == Some(name))
}

/// A status field present as an object (Go: a non-nil map).
fn present(v: &Value) -> Option<&Value> {
    v.is_object().then_some(v)
}

/// One container's list of `part` ("requests" or "limits") from `source`.
fn container_list(
    c: &Value,
    st: Option<&Value>,
    part: &str,
    source: Source,
    infeasible: bool,
) -> ResourceList {
    let spec = || {
        if infeasible {
            ResourceList::new()
        } else {
            read_list(&c["resources"][part])
        }
    };
    let allocated = st.and_then(|s| present(&s["allocatedResources"]));
    let actuated = st.and_then(|s| present(&s["resources"][part]));
    match (source, part) {
        (Source::Spec, _) => read_list(&c["resources"][part]),
        (Source::Allocated, _) => allocated.map_or_else(spec, read_list),
        (Source::Actuated, "requests") => actuated.or(allocated).map_or_else(spec, read_list),
        (Source::Actuated, _) => actuated.map_or_else(spec, read_list),
    }
}

/// Upstream's `aggregateContainerResourcesByFn`.
fn aggregate(pod: &Value, part: &str, source: Source, infeasible: bool) -> ResourceList {
    let spec = &pod["spec"];
    let one = |c: &Value| {
        let st = c["name"].as_str().and_then(|n| status_of(pod, n));
        container_list(c, st, part, source, infeasible)
    };
    let mut total = ResourceList::new();
    for c in spec["containers"].as_array().into_iter().flatten() {
        add(&mut total, &one(c));
    }
    let mut restartable = ResourceList::new();
    let mut init = ResourceList::new();
    for c in spec["initContainers"].as_array().into_iter().flatten() {
        let own = one(c);
        let this = if c["restartPolicy"] == "Always" {
            add(&mut total, &own);
            add(&mut restartable, &own);
            restartable.clone()
        } else {
            let mut t = own;
            add(&mut t, &restartable);
            t
        };
        max_into(&mut init, &this);
    }
    max_into(&mut total, &init);
    total
}

/// Upstream's `IsPodResizeInfeasible`: the first `PodResizePending` condition says
/// `Infeasible`.
fn resize_infeasible(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "PodResizePending")
        .is_some_and(|c| c["reason"] == "Infeasible")
}

/// Whether `name` is a resource pod-level `spec.resources` may set.
fn pod_level(name: &str) -> bool {
    name == "cpu" || name == "memory" || name.starts_with("hugepages-")
}

/// Whether the pod sets a pod-level resource in `parts`.
pub fn pod_level_set(pod: &Value, parts: &[&str]) -> bool {
    parts.iter().any(|p| {
        pod["spec"]["resources"][p]
            .as_object()
            .is_some_and(|m| m.keys().any(|k| pod_level(k)))
    })
}

/// Upstream's `PodRequests` (`part` "requests") or `PodLimits` ("limits") as the quota asks.
pub fn pod_totals(pod: &Value, part: &str) -> ResourceList {
    let infeasible = resize_infeasible(pod);
    let actuated = aggregate(pod, part, Source::Actuated, infeasible);
    let mut total = if infeasible {
        ResourceList::new()
    } else {
        aggregate(pod, part, Source::Spec, false)
    };
    max_into(&mut total, &actuated);
    if part == "requests" {
        max_into(
            &mut total,
            &aggregate(pod, part, Source::Allocated, infeasible),
        );
    }
    // Requests are replaced when pod-level requests are set; limits when any pod-level
    // resource is.
    let wanted: &[&str] = if part == "requests" {
        &["requests"]
    } else {
        &["requests", "limits"]
    };
    if pod_level_set(pod, wanted) {
        for (k, q) in read_list(&pod["spec"]["resources"][part]) {
            if pod_level(&k) {
                total.insert(k, q);
            }
        }
    }
    let overhead = read_list(&pod["spec"]["overhead"]);
    if part == "requests" {
        add(&mut total, &overhead);
    } else {
        for (k, v) in &overhead {
            if let Some(q) = total.get_mut(k) {
                if !q.is_zero() {
                    q.add(v);
                }
            }
        }
    }
    total
}
