//! What an autoscaling/v2 HorizontalPodAutoscaler asks for, read from its JSON with the
//! defaults the API server applies (`minReplicas` 1, a CPU utilization target of 80 % when no
//! metric is given, `behavior` rules filled in), and quantities as `resource.Quantity` reads
//! and writes them.

use crate::obj::At as _;
use serde_json::{json, Value};

/// A quantity in milli-units, rounded up as `Quantity.MilliValue` does (0 when unreadable).
pub fn milli(q: &Value) -> i64 {
    match q {
        Value::String(s) => crate::compat::quantity::milli_value(s),
        Value::Number(n) => n.as_f64().map_or(0, |f| {
            (f * 1000.0).ceil().clamp(i64::MIN as f64, i64::MAX as f64) as i64
        }),
        _ => 0,
    }
}

/// `resource.NewMilliQuantity(m, DecimalSI)` as it serialises: "1500m", "2", "3k", "0".
pub fn milli_quantity(m: i64) -> String {
    if m % 1000 != 0 {
        return format!("{m}m");
    }
    let mut v = m / 1000;
    if v == 0 {
        return "0".into();
    }
    let mut exp = 0;
    while v % 1000 == 0 && exp < 18 {
        v /= 1000;
        exp += 3;
    }
    let suffix = match exp {
        0 => "",
        3 => "k",
        6 => "M",
        9 => "G",
        12 => "T",
        15 => "P",
        _ => "E",
    };
    format!("{v}{suffix}")
}

/// One scaling policy (`type` Pods or Percent).
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub percent: bool,
    pub value: i32,
    pub period_seconds: i32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Select {
    Max,
    Min,
    Disabled,
}

/// `HPAScalingRules` with every default filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct Rules {
    pub stabilization_seconds: i32,
    pub select: Select,
    pub policies: Vec<Policy>,
}

/// `spec.behavior`, defaulted as the API server does; the scale-down window falls back to
/// `--horizontal-pod-autoscaler-downscale-stabilization` when not given.
#[derive(Debug, Clone, PartialEq)]
pub struct Behavior {
    pub up: Rules,
    pub down: Rules,
}

fn rules(v: Option<&Value>, default_window: i32, default_policies: Vec<Policy>) -> Rules {
    let v = v.filter(|v| v.is_object());
    let get = |k: &str| v.and_then(|v| v.get(k)).filter(|x| !x.is_null());
    let select = match get("selectPolicy").and_then(Value::as_str) {
        Some("Min") => Select::Min,
        Some("Disabled") => Select::Disabled,
        _ => Select::Max,
    };
    let policies = match get("policies").and_then(Value::as_array) {
        Some(ps) => ps
            .iter()
            .map(|p| Policy {
                percent: p.get("type").and_then(Value::as_str) == Some("Percent"),
                value: int(p.get("value")).unwrap_or(0),
                period_seconds: int(p.get("periodSeconds")).unwrap_or(0),
            })
            .collect(),
        None => default_policies,
    };
    Rules {
        stabilization_seconds: int(get("stabilizationWindowSeconds")).unwrap_or(default_window),
        select,
        policies,
    }
}

fn int(v: Option<&Value>) -> Option<i32> {
    v.and_then(Value::as_i64)
        .map(|n| n.clamp(i32::MIN as i64, i32::MAX as i64) as i32)
}

/// The behavior of an HPA that has one (`None`: the older rules without `behavior`).
pub fn behavior(hpa: &Value, downscale_window_seconds: i32) -> Option<Behavior> {
    let b = hpa.at("/spec/behavior").filter(|b| b.is_object())?;
    let up = rules(
        b.get("scaleUp"),
        0,
        vec![
            Policy {
                percent: false,
                value: 4,
                period_seconds: 15,
            },
            Policy {
                percent: true,
                value: 100,
                period_seconds: 15,
            },
        ],
    );
    let down = rules(
        b.get("scaleDown"),
        downscale_window_seconds,
        vec![Policy {
            percent: true,
            value: 100,
            period_seconds: 15,
        }],
    );
    Some(Behavior { up, down })
}

/// The calculator for this HPA: `behavior.scaleDown.tolerance` and `scaleUp.tolerance`
/// (quantities) over the flag's, while HPAConfigurableTolerance is on (upstream's
/// `tolerancesForHpa`).
pub fn with_tolerances(hpa: &Value, mut calc: super::calc::Calc) -> super::calc::Calc {
    if !crate::config::gates::enabled("HPAConfigurableTolerance") {
        return calc;
    }
    let q = |p: &str| {
        hpa.at(p)
            .and_then(|v| match v {
                Value::String(s) => crate::compat::quantity::Quantity::parse(s),
                Value::Number(n) => crate::compat::quantity::Quantity::parse(&n.to_string()),
                _ => None,
            })
            .map(|q| q.as_f64())
    };
    if let Some(t) = q("/spec/behavior/scaleDown/tolerance") {
        calc.tolerance.down = t;
    }
    if let Some(t) = q("/spec/behavior/scaleUp/tolerance") {
        calc.tolerance.up = t;
    }
    calc
}

/// Whether a metric is of type Object or External (upstream's `hasObjectOrExternalMetrics`:
/// only those can bring a target back from zero).
pub fn has_object_or_external_metrics(hpa: &Value) -> bool {
    hpa.at("/spec/metrics")
        .and_then(Value::as_array)
        .is_some_and(|m| {
            m.iter()
                .any(|m| matches!(m["type"].as_str(), Some("Object" | "External")))
        })
}

pub fn min_replicas(hpa: &Value) -> i32 {
    int(hpa.at("/spec/minReplicas")).unwrap_or(1)
}

pub fn max_replicas(hpa: &Value) -> i32 {
    int(hpa.at("/spec/maxReplicas")).unwrap_or(0)
}

/// `spec.metrics`, or the API server's default (CPU at 80 % of requests) when empty.
pub fn metrics(hpa: &Value) -> Vec<Value> {
    match hpa.at("/spec/metrics").and_then(Value::as_array) {
        Some(m) if !m.is_empty() => m.clone(),
        _ => vec![json!({"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": 80}}})],
    }
}

/// `spec.scaleTargetRef`: (apiVersion, kind, name).
pub fn target(hpa: &Value) -> (String, String, String) {
    let s = |p: &str| hpa.at(p).and_then(Value::as_str).unwrap_or("").to_string();
    (
        s("/spec/scaleTargetRef/apiVersion"),
        s("/spec/scaleTargetRef/kind"),
        s("/spec/scaleTargetRef/name"),
    )
}

/// Go's `%+v` of a `*metav1.LabelSelector`, as upstream's external metric names print it:
/// `nil`, or `&LabelSelector{MatchLabels:map[string]string{a: b,},MatchExpressions:[]...,}`.
pub fn selector_debug(sel: Option<&Value>) -> String {
    let Some(sel) = sel.filter(|s| s.is_object()) else {
        return "nil".into();
    };
    let mut labels = String::new();
    if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
        let mut keys: Vec<&String> = m.keys().collect();
        crate::sort::sort(&mut keys[..]);
        for k in keys {
            labels.push_str(&format!("{k}: {},", m[k].as_str().unwrap_or("")));
        }
    }
    let mut exprs = String::new();
    if let Some(es) = sel.get("matchExpressions").and_then(Value::as_array) {
        let items: Vec<String> = es
            .iter()
            .map(|e| {
                let vals: Vec<&str> = e
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                format!(
                    "LabelSelectorRequirement{{Key:{},Operator:{},Values:[]string{{{}}},}}",
                    e.get("key").and_then(Value::as_str).unwrap_or(""),
                    e.get("operator").and_then(Value::as_str).unwrap_or(""),
                    vals.join(",")
                )
            })
            .collect();
        exprs = items.join(",");
    }
    format!(
        "&LabelSelector{{MatchLabels:map[string]string{{{labels}}},MatchExpressions:[]LabelSelectorRequirement{{{exprs}}},}}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        assert_eq!(milli_quantity(1500), "1500m");
        assert_eq!(milli_quantity(2000), "2");
        assert_eq!(milli_quantity(0), "0");
        assert_eq!(milli_quantity(3_000_000), "3k");
        assert_eq!(milli_quantity(134_217_728_000), "134217728");
        assert_eq!(milli(&json!("100m")), 100);
        assert_eq!(milli(&json!("1")), 1000);
        assert_eq!(milli(&json!("1Ki")), 1_024_000);
        assert_eq!(milli(&json!(2)), 2000);
    }

    #[test]
    fn behavior_defaults() {
        let h = json!({"spec": {"behavior": {"scaleDown": {"selectPolicy": "Min"}}}});
        let b = behavior(&h, 300).unwrap();
        assert_eq!(b.up.stabilization_seconds, 0);
        assert_eq!(b.up.policies.len(), 2);
        assert_eq!(b.down.stabilization_seconds, 300);
        assert_eq!(b.down.select, Select::Min);
        assert!(behavior(&json!({"spec": {}}), 300).is_none());
        assert_eq!(min_replicas(&json!({"spec": {}})), 1);
        assert_eq!(metrics(&json!({"spec": {}}))[0]["resource"]["name"], "cpu");
    }
}
