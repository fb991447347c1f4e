//! `resource.Quantity` in milli-units, as controllers read requests and metrics.

/// A Kubernetes quantity as a number (`1Gi`, `500M`, `250m`, `1.5e3`); None when unreadable.
pub fn value(q: &str) -> Option<f64> {
    let q = q.trim();
    let split = q
        .find(|c: char| c.is_ascii_alphabetic() && c != 'e' && c != 'E')
        .unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    let factor = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        _ => return None,
    };
    match num.parse::<f64>() {
        Ok(v) if v.is_finite() => Some(v * factor),
        _ => None,
    }
}

/// Kubernetes quantity to milli-units, rounded up as `MilliValue` does (0 when unreadable).
pub fn milli_value(q: &str) -> i64 {
    value(q).map_or(0, |v| (v * 1000.0).ceil() as i64)
}
