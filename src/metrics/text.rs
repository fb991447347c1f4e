//! The Prometheus text exposition format (0.0.4): families sorted by name, series by their
//! labels, numbers as Go formats them.

use std::fmt::Write as _;

use super::{Family, Sample, SampleValue};

/// The content type of the text format, as promhttp sends it.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Go's `strconv.FormatFloat(v, 'g', -1, 64)` with the text format's spellings of the
/// special values (`+Inf`, `-Inf`, `NaN`).
pub fn format_float(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if v == 0.0 {
        return "0".into();
    }
    // Shortest round-trip digits and the decimal exponent, e.g. "1.2345e6".
    let e = format!("{v:e}");
    let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let neg = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let mut out = String::with_capacity(24);
    if neg {
        out.push('-');
    }
    // Go: %e when exp < -4 || exp >= eprec, where eprec is 6 for the shortest form.
    if !(-4..6).contains(&exp) {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(
            out,
            "e{}{:02}",
            if exp < 0 { '-' } else { '+' },
            exp.unsigned_abs()
        );
        return out;
    }
    if exp < 0 {
        out.push_str("0.");
        for _ in 0..(-exp - 1) {
            out.push('0');
        }
        out.push_str(&digits);
        return out;
    }
    let int_len = exp as usize + 1;
    if digits.len() <= int_len {
        out.push_str(&digits);
        for _ in digits.len()..int_len {
            out.push('0');
        }
    } else {
        out.push_str(&digits[..int_len]);
        out.push('.');
        out.push_str(&digits[int_len..]);
    }
    out
}

fn escape_help(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

fn escape_label_value(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn write_labels(out: &mut String, labels: &[(String, String)], le: Option<&str>) {
    if labels.is_empty() && le.is_none() {
        return;
    }
    out.push('{');
    let mut first = true;
    let le_pair = le.map(|v| ("le".to_string(), v.to_string()));
    for (k, v) in labels.iter().chain(le_pair.iter()) {
        if !first {
            out.push(',');
        }
        first = false;
        let _ = write!(out, "{k}=\"{}\"", escape_label_value(v));
    }
    out.push('}');
}

fn write_line(out: &mut String, name: &str, labels: &[(String, String)], le: Option<&str>, v: f64) {
    out.push_str(name);
    write_labels(out, labels, le);
    out.push(' ');
    out.push_str(&format_float(v));
    out.push('\n');
}

/// Write families in the text format, sorting them by name and their series by labels.
pub fn encode(families: &[Family]) -> String {
    let mut fams: Vec<&Family> = families.iter().collect();
    crate::sort::sort_by(&mut fams[..], |a, b| a.name.cmp(&b.name));
    let mut out = String::new();
    for f in fams {
        if f.samples.is_empty() {
            // As the Prometheus client: a vector with no series is not written at all.
            continue;
        }
        let _ = writeln!(out, "# HELP {} {}", f.name, escape_help(&f.help));
        let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind.as_str());
        let mut samples: Vec<Sample> = f.samples.clone();
        for s in &mut samples {
            crate::sort::sort(&mut s.labels[..]);
        }
        crate::sort::sort_by(&mut samples[..], |a, b| a.labels.cmp(&b.labels));
        for s in &samples {
            match &s.value {
                SampleValue::Scalar(v) => write_line(&mut out, &f.name, &s.labels, None, *v),
                SampleValue::Histogram(h) => {
                    let bucket = format!("{}_bucket", f.name);
                    for (le, n) in &h.buckets {
                        write_line(
                            &mut out,
                            &bucket,
                            &s.labels,
                            Some(&format_float(*le)),
                            *n as f64,
                        );
                    }
                    write_line(&mut out, &bucket, &s.labels, Some("+Inf"), h.count as f64);
                    write_line(&mut out, &format!("{}_sum", f.name), &s.labels, None, h.sum);
                    write_line(
                        &mut out,
                        &format!("{}_count", f.name),
                        &s.labels,
                        None,
                        h.count as f64,
                    );
                }
            }
        }
    }
    out
}
