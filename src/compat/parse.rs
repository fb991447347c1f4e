//! Values in Go's spelling: `strconv.ParseBool`, `ParseInt`, `ParseUint`, `ParseFloat` and
//! `Quote`, `time.ParseDuration` and how Go prints a `time.Duration`, with Go's error wording.

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
    match parse_go_duration_signed(input)? {
        (true, d) if !d.is_zero() => {
            Err(format!("negative duration {input:?} is not allowed here"))
        }
        (_, d) => Ok(d),
    }
}

/// Go's `time.ParseDuration`, negative values included: whether the value is negative, and
/// its size.
pub fn parse_go_duration_signed(input: &str) -> std::result::Result<(bool, Duration), String> {
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
        return Ok((negative, Duration::ZERO));
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
    let secs = (total / 1_000_000_000) as u64;
    let nanos = (total % 1_000_000_000) as u32;
    Ok((negative, Duration::new(secs, nanos)))
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

/// How a Go number failed to parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NumErr {
    Syntax,
    Range,
}

/// `strconv.<func>: parsing "<s>": <why>`, Go's `NumError` text.
fn num_error(func: &str, s: &str, e: NumErr) -> String {
    let why = match e {
        NumErr::Syntax => "invalid syntax",
        NumErr::Range => "value out of range",
    };
    format!("strconv.{func}: parsing {}: {why}", go_quote(s.as_bytes()))
}

/// Go's rule for `_` in numbers: only between digits, or after a base prefix.
fn underscores_ok(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let b = s.as_bytes();
    let mut last = b'^'; // '^' start, '0' digit or prefix, '_' underscore, '!' other
    let mut i = 0;
    let mut hex = false;
    if b.len() >= 2 && b[0] == b'0' && matches!(b[1] | 0x20, b'b' | b'o' | b'x') {
        i = 2;
        last = b'0';
        hex = (b[1] | 0x20) == b'x';
    }
    for &c in &b[i..] {
        if c.is_ascii_digit() || (hex && (c | 0x20).is_ascii_hexdigit()) {
            last = b'0';
        } else if c == b'_' {
            if last != b'0' {
                return false;
            }
            last = b'_';
        } else {
            if last == b'_' {
                return false;
            }
            last = b'!';
        }
    }
    last != b'_'
}

/// Go's `strconv.ParseUint(s, base, bits)` for base 10 or 0 (0: `0x`, `0o`, `0b` and a
/// leading `0` choose the base, and `_` may separate digits).
fn parse_uint(s: &str, base0: bool, bits: u32) -> Result<u64, NumErr> {
    if s.is_empty() {
        return Err(NumErr::Syntax);
    }
    let b = s.as_bytes();
    let (base, digits): (u64, &[u8]) = if !base0 {
        (10, b)
    } else if b[0] == b'0' && b.len() >= 3 && (b[1] | 0x20) == b'x' {
        (16, &b[2..])
    } else if b[0] == b'0' && b.len() >= 3 && (b[1] | 0x20) == b'o' {
        (8, &b[2..])
    } else if b[0] == b'0' && b.len() >= 3 && (b[1] | 0x20) == b'b' {
        (2, &b[2..])
    } else if b[0] == b'0' {
        (8, &b[1..])
    } else {
        (10, b)
    };
    let max = if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let mut n: u64 = 0;
    let mut underscores = false;
    for &c in digits {
        let d = match c {
            b'_' if base0 => {
                underscores = true;
                continue;
            }
            b'0'..=b'9' => u64::from(c - b'0'),
            c if c.is_ascii_alphabetic() => u64::from((c | 0x20) - b'a' + 10),
            _ => return Err(NumErr::Syntax),
        };
        if d >= base {
            return Err(NumErr::Syntax);
        }
        n = n
            .checked_mul(base)
            .and_then(|n| n.checked_add(d))
            .filter(|n| *n <= max)
            .ok_or(NumErr::Range)?;
    }
    if underscores && !underscores_ok(s) {
        return Err(NumErr::Syntax);
    }
    Ok(n)
}

/// Go's `strconv.ParseInt(s, 0, bits)`, as pflag reads its integer flags: an optional sign,
/// then a number in the base its prefix names (`0x1f`, `0o17`, `0b11`, `017`), digits
/// optionally separated by `_`. Errors are Go's (`strconv.ParseInt: parsing "x": invalid
/// syntax`).
pub fn parse_go_int(s: &str, bits: u32) -> Result<i64, String> {
    parse_signed(s, bits, true)
}

/// A sign, then digits in base 10 or (with `any_base`) the base a prefix names.
fn parse_signed(s: &str, bits: u32, any_base: bool) -> Result<i64, String> {
    let (negative, body) = match s.as_bytes().first() {
        Some(b'+') => (false, &s[1..]),
        Some(b'-') => (true, &s[1..]),
        _ => (false, s),
    };
    let n = parse_uint(body, any_base, 64).map_err(|e| num_error("ParseInt", s, e))?;
    let limit = 1u64 << (bits.clamp(1, 64) - 1);
    if (!negative && n >= limit) || (negative && n > limit) {
        return Err(num_error("ParseInt", s, NumErr::Range));
    }
    Ok(if negative {
        (n as i64).wrapping_neg()
    } else {
        n as i64
    })
}

/// Go's `strconv.ParseUint(s, 10, bits)`: decimal digits only, no sign.
pub fn parse_go_uint10(s: &str, bits: u32) -> Result<u64, String> {
    parse_uint(s, false, bits).map_err(|e| num_error("ParseUint", s, e))
}

/// Go's `strconv.ParseInt(s, 10, bits)`.
pub fn parse_go_int10(s: &str, bits: u32) -> Result<i64, String> {
    parse_signed(s, bits, false)
}

/// Go's `strconv.ParseFloat(s, bits)` for decimal numbers (`0.1`, `.5`, `1e-7`, `1_000.5`),
/// `inf`/`infinity` with an optional sign and `nan`, any case; a float32 is rounded to the
/// nearest float32 directly. A finite number too large for the type is out of range.
/// Go's hexadecimal floats (`0x1p-2`) are not read.
pub fn parse_go_float(s: &str, bits: u32) -> Result<f64, String> {
    let syntax = || num_error("ParseFloat", s, NumErr::Syntax);
    let unsigned = s.strip_prefix(['+', '-']).unwrap_or(s);
    let negative = s.starts_with('-');
    if unsigned.eq_ignore_ascii_case("inf") || unsigned.eq_ignore_ascii_case("infinity") {
        return Ok(if negative {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        });
    }
    if s.eq_ignore_ascii_case("nan") {
        return Ok(f64::NAN);
    }
    // Mantissa: digits with at most one dot, at least one digit; then an optional exponent.
    let b = unsigned.as_bytes();
    let mut i = 0;
    let (mut digits, mut dot) = (false, false);
    while i < b.len() {
        match b[i] {
            b'0'..=b'9' => digits = true,
            b'_' => {}
            b'.' if !dot => dot = true,
            _ => break,
        }
        i += 1;
    }
    if !digits {
        return Err(syntax());
    }
    if i < b.len() {
        if (b[i] | 0x20) != b'e' {
            return Err(syntax());
        }
        i += 1;
        if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
            i += 1;
        }
        if i >= b.len() || !b[i].is_ascii_digit() {
            return Err(syntax());
        }
        if !b[i..].iter().all(|c| c.is_ascii_digit() || *c == b'_') {
            return Err(syntax());
        }
    }
    if s.contains('_') && !underscores_ok(s) {
        return Err(syntax());
    }
    let clean: String = s.chars().filter(|c| *c != '_').collect();
    let v = if bits == 32 {
        clean.parse::<f32>().map(f64::from).map_err(|_| syntax())?
    } else {
        clean.parse::<f64>().map_err(|_| syntax())?
    };
    if v.is_infinite() {
        return Err(num_error("ParseFloat", s, NumErr::Range));
    }
    Ok(v)
}

/// Go's `strconv.Quote` of a flag value (bytes that are not UTF-8 as `\\xff`).
pub use crate::compat::quote::go_quote_bytes as go_quote;

/// A pflag string-slice value as Go's `encoding/csv` reads one record: fields split on
/// commas, a field in double quotes may hold commas and `""` for a quote; nothing is trimmed.
/// An empty value is an empty list.
pub fn split_csv(v: &str) -> Vec<String> {
    let mut out = Vec::new();
    if v.is_empty() {
        return out;
    }
    let mut field = String::new();
    let mut chars = v.chars().peekable();
    let mut quoted = false;
    let mut at_start = true;
    while let Some(c) = chars.next() {
        match c {
            '"' if at_start && !quoted => quoted = true,
            '"' if quoted => {
                if chars.peek() == Some(&'"') {
                    chars.next();
                    field.push('"');
                } else {
                    quoted = false;
                }
            }
            ',' if !quoted => {
                out.push(std::mem::take(&mut field));
                at_start = true;
                continue;
            }
            c => field.push(c),
        }
        at_start = false;
    }
    out.push(field);
    out
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
    #[test]
    fn go_ints() {
        let ok = |s: &str| parse_go_int(s, 32).unwrap();
        assert_eq!(ok("5"), 5);
        assert_eq!(ok("-3"), -3);
        assert_eq!(ok("+7"), 7);
        assert_eq!(ok("0x20"), 32);
        assert_eq!(ok("0X1f"), 31);
        assert_eq!(ok("010"), 8);
        assert_eq!(ok("0o17"), 15);
        assert_eq!(ok("0b101"), 5);
        assert_eq!(ok("1_000"), 1000);
        assert_eq!(ok("0"), 0);
        assert_eq!(ok("2147483647"), i64::from(i32::MAX));
        assert_eq!(ok("-2147483648"), i64::from(i32::MIN));
        let err = |s: &str| parse_go_int(s, 32).unwrap_err();
        assert_eq!(
            err("abc"),
            "strconv.ParseInt: parsing \"abc\": invalid syntax"
        );
        assert_eq!(
            err("99999999999"),
            "strconv.ParseInt: parsing \"99999999999\": value out of range"
        );
        assert!(err("2147483648").ends_with("value out of range"));
        assert!(err("-2147483649").ends_with("value out of range"));
        for bad in [
            "", "08", "0x", "1_", "_1", "1__0", " 1", "1.5", "--1", "0x_",
        ] {
            assert!(
                err(bad).ends_with("invalid syntax"),
                "{bad:?}: {}",
                err(bad)
            );
        }
        assert_eq!(parse_go_int("0x_1f", 64), Ok(31));
        assert_eq!(parse_go_int("9223372036854775807", 64), Ok(i64::MAX));
    }

    #[test]
    fn go_uints_base_10() {
        assert_eq!(parse_go_uint10("3", 32), Ok(3));
        assert_eq!(parse_go_uint10("03", 32), Ok(3));
        assert_eq!(parse_go_uint10("4294967295", 32), Ok(u64::from(u32::MAX)));
        for (bad, why) in [
            ("", "invalid syntax"),
            ("-1", "invalid syntax"),
            ("+3", "invalid syntax"),
            ("0x10", "invalid syntax"),
            ("1_0", "invalid syntax"),
            ("3\n", "invalid syntax"),
            ("4294967296", "value out of range"),
            // Go stops at the first digit that overflows.
            ("99999999999x", "value out of range"),
        ] {
            assert_eq!(
                parse_go_uint10(bad, 32),
                Err(format!(
                    "strconv.ParseUint: parsing {}: {why}",
                    go_quote(bad.as_bytes())
                ))
            );
        }
        assert_eq!(parse_go_int10("2147483647", 32), Ok(i64::from(i32::MAX)));
        assert_eq!(
            parse_go_int10("2147483648", 32),
            Err("strconv.ParseInt: parsing \"2147483648\": value out of range".into())
        );
    }

    #[test]
    fn go_floats() {
        let ok = |s: &str, bits| parse_go_float(s, bits).unwrap();
        assert_eq!(ok("0.1", 32), f64::from(0.1f32));
        assert_eq!(ok("0.1", 64), 0.1);
        assert_eq!(ok(".5", 64), 0.5);
        assert_eq!(ok("1.", 64), 1.0);
        assert_eq!(ok("1e-7", 64), 1e-7);
        assert_eq!(ok("1E+3", 64), 1000.0);
        assert_eq!(ok("1_000.5", 64), 1000.5);
        assert_eq!(ok("-2", 32), -2.0);
        assert_eq!(ok("Inf", 32), f64::INFINITY);
        assert_eq!(ok("-infinity", 64), f64::NEG_INFINITY);
        assert!(ok("NaN", 32).is_nan());
        assert_eq!(ok("3.4e38", 32), f64::from(3.4e38f32));
        let err = |s: &str, bits| parse_go_float(s, bits).unwrap_err();
        assert_eq!(
            err("1e50", 32),
            "strconv.ParseFloat: parsing \"1e50\": value out of range"
        );
        assert!(err("1e400", 64).ends_with("value out of range"));
        for bad in [
            "", "abc", "+nan", "1e", "1e+", ".", "1..2", "1_", "_1", "0x1p-2", " 1", "1,5",
        ] {
            assert_eq!(
                err(bad, 64),
                format!(
                    "strconv.ParseFloat: parsing {}: invalid syntax",
                    go_quote(bad.as_bytes())
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn go_quoting() {
        assert_eq!(go_quote(b"abc"), "\"abc\"");
        assert_eq!(go_quote(b"3\n"), "\"3\\n\"");
        assert_eq!(go_quote(b"a\"b\\c\t"), "\"a\\\"b\\\\c\\t\"");
        assert_eq!(go_quote(b"\x00\x07\x7f"), "\"\\x00\\a\\x7f\"");
        assert_eq!(go_quote(b"\xff1"), "\"\\xff1\"");
        assert_eq!(go_quote("µs é".as_bytes()), "\"µs é\"");
        assert_eq!(go_quote("a\u{a0}b".as_bytes()), "\"a\\u00a0b\"");
    }

    #[test]
    fn csv_values() {
        assert_eq!(split_csv(""), Vec::<String>::new());
        assert_eq!(split_csv("a,b"), vec!["a", "b"]);
        assert_eq!(split_csv(" a, b"), vec![" a", " b"]);
        assert_eq!(split_csv("a,"), vec!["a", ""]);
        assert_eq!(split_csv("\"a,b\",c"), vec!["a,b", "c"]);
        assert_eq!(split_csv("\"say \"\"hi\"\"\""), vec!["say \"hi\""]);
    }

    #[test]
    fn go_signed_durations() {
        assert_eq!(
            parse_go_duration_signed("-1m30s"),
            Ok((true, Duration::from_secs(90)))
        );
        assert_eq!(parse_go_duration_signed("0"), Ok((false, Duration::ZERO)));
        assert_eq!(
            parse_go_duration_signed("x"),
            Err("time: invalid duration \"x\"".to_string())
        );
    }
}
