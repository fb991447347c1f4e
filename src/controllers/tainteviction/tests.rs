use super::gate_given;
use super::manager::disruption_patch;
use crate::compat::timefmt::parse_rfc3339;
use serde_json::json;

#[test]
fn the_disruption_condition_patch() {
    let now = parse_rfc3339("2024-01-01T00:01:00Z").unwrap();
    let pod = json!({"metadata": {"uid": "p1"}, "status": {}});
    assert_eq!(
        disruption_patch(&pod, now).unwrap(),
        json!({"metadata": {"uid": "p1"}, "status": {"conditions": [{"type": "DisruptionTarget",
            "status": "True", "reason": "DeletionByTaintManager",
            "message": "Taint manager: deleting due to NoExecute taint",
            "lastProbeTime": null, "lastTransitionTime": "2024-01-01T00:01:00Z"}]}})
    );
    let pod = json!({"metadata": {"uid": "p1"}, "status": {"conditions": [
        {"type": "Ready", "status": "True"}]}});
    let p = disruption_patch(&pod, now).unwrap();
    assert_eq!(
        p["status"]["$setElementOrder/conditions"],
        json!([{"type": "Ready"}, {"type": "DisruptionTarget"}])
    );
    let done = json!({"metadata": {"uid": "p1"}, "status": {"conditions": [
        {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
         "message": "Taint manager: deleting due to NoExecute taint",
         "lastProbeTime": null, "lastTransitionTime": "2024-01-01T00:00:00Z"}]}});
    assert_eq!(disruption_patch(&done, now), None);
}

#[test]
fn the_condition_carries_the_pods_generation() {
    let now = parse_rfc3339("2024-01-01T00:01:00Z").unwrap();
    let pod = json!({"metadata": {"uid": "p1", "generation": 3}, "status": {}});
    let p = disruption_patch(&pod, now).unwrap();
    assert_eq!(p["status"]["conditions"][0]["observedGeneration"], 3);
    // A condition that changes carries the generation when it differs.
    let pod = json!({"metadata": {"uid": "p1", "generation": 2}, "status": {"conditions": [
        {"type": "DisruptionTarget", "status": "False", "observedGeneration": 1,
         "lastTransitionTime": "2024-01-01T00:00:00Z"}]}});
    let p = disruption_patch(&pod, now).unwrap();
    let c = &p["status"]["conditions"][0];
    assert_eq!(c["observedGeneration"], 2);
    assert_eq!(c["status"], "True");
    assert_eq!(c["lastTransitionTime"], "2024-01-01T00:01:00Z");
    // Already as wanted but for the generation: no write (not compared upstream).
    let pod = json!({"metadata": {"uid": "p1", "generation": 2}, "status": {"conditions": [
        {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
         "message": "Taint manager: deleting due to NoExecute taint", "observedGeneration": 1,
         "lastProbeTime": null, "lastTransitionTime": "2024-01-01T00:00:00Z"}]}});
    assert_eq!(disruption_patch(&pod, now), None);
}

#[test]
fn gates_read_from_the_flag_text() {
    let g = "TaintTolerationComparisonOperators";
    assert_eq!(gate_given(None, g), None);
    assert_eq!(gate_given(Some("A=true"), g), None);
    assert_eq!(
        gate_given(Some(&format!("A=false,{g}=true")), g),
        Some(true)
    );
    assert_eq!(
        gate_given(Some(&format!("{g}=true,{g}=false")), g),
        Some(false)
    );
    assert_eq!(gate_given(Some(&format!("{g}=maybe")), g), None);
}
