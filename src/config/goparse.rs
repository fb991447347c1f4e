//! Values in Go's spelling: `strconv.ParseBool`, `time.ParseDuration` and how Go prints a
//! `time.Duration`, with Go's error wording.

use std::time::Duration;

/// Go's `strconv.ParseBool`.
pub fn parse_go_bool(s: &str) -> std::result::Result<bool, String> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(format!("strconv.ParseBool: parsing {s:?}: invalid syntax")),
    }
}

/// Go's `time.ParseDuration` for non-negative values: `15s`, `1m30s`, `1.5h`, `500ms`,
/// `8760h`, `0`. Units: ns, us (µs, μs), ms, s, m, h. Errors are worded like Go's.
pub fn parse_go_duration(input: &str) -> std::result::Result<Duration, String> {
    let invalid = || format!("time: invalid duration {input:?}");
    let mut s = input;
    let mut negative = false;
    if let Some(rest) = s.strip_prefix('-') {
        negative = true;
        s = rest;
    } else if let Some(rest) = s.strip_prefix('+') {
        s = rest;
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    let mut total: u128 = 0; // nanoseconds
    while !s.is_empty() {
        // Integer part.
        let int_len = s.bytes().take_while(u8::is_ascii_digit).count();
        let int_part = &s[..int_len];
        s = &s[int_len..];
        // Fraction.
        let mut frac_part = "";
        let mut has_dot = false;
        if let Some(rest) = s.strip_prefix('.') {
            has_dot = true;
            let frac_len = rest.bytes().take_while(u8::is_ascii_digit).count();
            frac_part = &rest[..frac_len];
            s = &rest[frac_len..];
        }
        if int_part.is_empty() && frac_part.is_empty() {
            // No digits at all (e.g. ".s" or "s").
            return Err(invalid());
        }
        let _ = has_dot;
        // Unit.
        let unit_len = s
            .char_indices()
            .find(|&(_, c)| c == '.' || c.is_ascii_digit())
            .map(|(i, _)| i)
            .unwrap_or(s.len());
        if unit_len == 0 {
            return Err(format!("time: missing unit in duration {input:?}"));
        }
        let unit = &s[..unit_len];
        s = &s[unit_len..];
        let scale: u128 = match unit {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60 * 1_000_000_000,
            "h" => 3600 * 1_000_000_000,
            _ => return Err(format!("time: unknown unit {unit:?} in duration {input:?}")),
        };
        let int_val: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse::<u128>().map_err(|_| invalid())?
        };
        let mut v = int_val.checked_mul(scale).ok_or_else(invalid)?;
        if !frac_part.is_empty() {
            // Truncate to nanosecond precision like Go, which also reads at most about 18
            // digits of a fraction; more would overflow `num * scale` (10^30 * 3.6 * 10^12).
            let mut num: u128 = 0;
            let mut den: u128 = 1;
            for b in frac_part.bytes().take(18) {
                num = num * 10 + u128::from(b - b'0');
                den *= 10;
            }
            v = v.checked_add(num * scale / den).ok_or_else(invalid)?;
        }
        total = total.checked_add(v).ok_or_else(invalid)?;
        // Go limits durations to int64 nanoseconds.
        if total > i64::MAX as u128 {
            return Err(invalid());
        }
    }
    if negative && total != 0 {
        return Err(format!("negative duration {input:?} is not allowed here"));
    }
    let secs = (total / 1_000_000_000) as u64;
    let nanos = (total % 1_000_000_000) as u32;
    Ok(Duration::new(secs, nanos))
}

/// Format a duration the way Go prints `time.Duration` (`1m0s`, `8760h0m0s`, `500ms`).
pub fn format_go_duration(d: Duration) -> String {
    let total = d.as_nanos();
    if total == 0 {
        return "0s".to_string();
    }
    if total < 1_000_000_000 {
        return if total < 1_000 {
            format!("{total}ns")
        } else if total < 1_000_000 {
            trim_frac(total as f64 / 1e3, "µs")
        } else {
            trim_frac(total as f64 / 1e6, "ms")
        };
    }
    let h = total / 3_600_000_000_000;
    let rem = total % 3_600_000_000_000;
    let m = rem / 60_000_000_000;
    let s_ns = rem % 60_000_000_000;
    let secs = if s_ns.is_multiple_of(1_000_000_000) {
        format!("{}s", s_ns / 1_000_000_000)
    } else {
        trim_frac(s_ns as f64 / 1e9, "s")
    };
    if h > 0 {
        format!("{h}h{m}m{secs}")
    } else if m > 0 {
        format!("{m}m{secs}")
    } else {
        secs
    }
}

fn trim_frac(v: f64, unit: &str) -> String {
    let s = format!("{v:.9}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s}{unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        let ok = |s: &str| parse_go_duration(s).unwrap();
        assert_eq!(ok("15s"), Duration::from_secs(15));
        assert_eq!(ok("1m30s"), Duration::from_secs(90));
        assert_eq!(ok("8760h"), Duration::from_secs(8760 * 3600));
        assert_eq!(ok("87600h"), Duration::from_secs(87600 * 3600));
        assert_eq!(ok("500ms"), Duration::from_millis(500));
        assert_eq!(ok("1.5h"), Duration::from_secs(5400));
        assert_eq!(ok("0"), Duration::ZERO);
        assert_eq!(ok("+5s"), Duration::from_secs(5));
        assert_eq!(ok("-0s"), Duration::ZERO);
        assert_eq!(ok("1h2m3s4ms5us6ns"), Duration::new(3723, 4_005_006));
        assert_eq!(ok("2µs"), Duration::from_micros(2));
        assert_eq!(ok("2μs"), Duration::from_micros(2));
        assert_eq!(ok(".5s"), Duration::from_millis(500));
        assert_eq!(ok("1.s"), Duration::from_secs(1));
        assert_eq!(ok("8760h0m0s"), Duration::from_secs(8760 * 3600));
        assert_eq!(ok("0.000000001s"), Duration::from_nanos(1));
        // A long fraction is cut, not multiplied past u128 (a panic, or a wrapped value).
        assert_eq!(
            ok("0.999999999999999999999999999999h"),
            Duration::from_nanos(3_599_999_999_999)
        );
        assert_eq!(
            ok("1.9999999999999999999999999999999999999s"),
            ok("1.999999999s")
        );
    }

    #[test]
    fn go_duration_errors() {
        let err = |s: &str| parse_go_duration(s).unwrap_err();
        assert_eq!(err("abc"), "time: invalid duration \"abc\"");
        assert_eq!(err(""), "time: invalid duration \"\"");
        assert_eq!(err("10"), "time: missing unit in duration \"10\"");
        assert_eq!(err("5x"), "time: unknown unit \"x\" in duration \"5x\"");
        assert_eq!(err("."), "time: invalid duration \".\"");
        assert_eq!(err("s"), "time: invalid duration \"s\"");
        assert_eq!(err("1s2"), "time: missing unit in duration \"1s2\"");
        assert!(err("-5s").contains("negative"));
        assert!(parse_go_duration("9999999999h").is_err());
    }

    #[test]
    fn go_duration_format() {
        assert_eq!(format_go_duration(Duration::from_secs(60)), "1m0s");
        assert_eq!(
            format_go_duration(Duration::from_secs(8760 * 3600)),
            "8760h0m0s"
        );
        assert_eq!(format_go_duration(Duration::from_secs(15)), "15s");
        assert_eq!(format_go_duration(Duration::from_millis(500)), "500ms");
        assert_eq!(format_go_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format_go_duration(Duration::ZERO), "0s");
    }

    #[test]
    fn go_bools() {
        for t in ["1", "t", "T", "true", "TRUE", "True"] {
            assert_eq!(parse_go_bool(t), Ok(true));
        }
        for f in ["0", "f", "F", "false", "FALSE", "False"] {
            assert_eq!(parse_go_bool(f), Ok(false));
        }
        assert!(parse_go_bool("yes").is_err());
    }
}
