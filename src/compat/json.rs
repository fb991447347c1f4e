//! JSON as Go's `encoding/json` writes a struct: fields in declaration order, no spaces,
//! `<`, `>` and `&` escaped as `\u003c`, `\u003e`, `\u0026`, floats in the shortest form
//! that reads back as the same float32 or float64 (exponent form below 1e-6 and from 1e21),
//! and NaN or an infinity refused with Go's error.

use std::fmt::Write as _;

/// A JSON value whose objects keep their order.
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Int(i64),
    F32(f32),
    F64(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(&'static str, Json)>),
}

impl Json {
    pub fn str(s: impl Into<String>) -> Json {
        Json::Str(s.into())
    }

    /// The JSON text, or Go's `json: unsupported value: NaN` for a float JSON cannot hold.
    pub fn encode(&self) -> Result<String, String> {
        let mut out = String::new();
        self.write(&mut out)?;
        Ok(out)
    }

    fn write(&self, out: &mut String) -> Result<(), String> {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Int(n) => {
                let _ = write!(out, "{n}");
            }
            Json::F32(f) => write_float(out, f64::from(*f), 32)?,
            Json::F64(f) => write_float(out, *f, 64)?,
            Json::Str(s) => write_str(out, s),
            Json::Arr(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    v.write(out)?;
                }
                out.push(']');
            }
            Json::Obj(fields) => {
                out.push('{');
                for (i, (k, v)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_str(out, k);
                    out.push(':');
                    v.write(out)?;
                }
                out.push('}');
            }
        }
        Ok(())
    }
}

/// A float as Go's encoder writes it; `bits` is 32 for a float32 (held exactly in `f`).
fn write_float(out: &mut String, f: f64, bits: u32) -> Result<(), String> {
    if !f.is_finite() {
        let name = if f.is_nan() {
            "NaN"
        } else if f > 0.0 {
            "+Inf"
        } else {
            "-Inf"
        };
        return Err(format!("json: unsupported value: {name}"));
    }
    let abs = f.abs();
    let exponent_form = abs != 0.0
        && if bits == 32 {
            let a = abs as f32;
            !(1e-6..1e21).contains(&a)
        } else {
            !(1e-6..1e21).contains(&abs)
        };
    // Rust's `{}` and `{:e}` give the shortest digits that read back as the same value of the
    // type, as Go's `strconv.AppendFloat(f, fmt, -1, bits)` does; Go's exponent has a sign
    // and, after its clean-up, no leading zero (`1e-7`, `1e+21`).
    let text = match (exponent_form, bits) {
        (false, 32) => format!("{}", f as f32),
        (false, _) => format!("{f}"),
        (true, 32) => format!("{:e}", f as f32),
        (true, _) => format!("{f:e}"),
    };
    match text.split_once('e') {
        Some((mantissa, exp)) if !exp.starts_with('-') => {
            let _ = write!(out, "{mantissa}e+{exp}");
        }
        _ => out.push_str(&text),
    }
    Ok(())
}

/// A string as Go's encoder writes it, HTML characters escaped.
pub fn write_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c < ' ' || matches!(c, '<' | '>' | '&' | '\u{2028}' | '\u{2029}') => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(v: Json) -> String {
        v.encode().unwrap()
    }

    #[test]
    fn floats_as_go_writes_them() {
        // Compared with encoding/json of Go 1.21 (float32 and float64 fields).
        for (f, want) in [
            (20.0f32, "20"),
            (0.1, "0.1"),
            (0.55, "0.55"),
            (12.5, "12.5"),
            (123456789.0, "123456790"),
            (1e20, "100000000000000000000"),
            (1e-5, "0.00001"),
            (-0.000001, "-0.000001"),
            (1e-7, "1e-7"),
            (3.4e38, "3.4e+38"),
            (1e21, "1e+21"),
            (0.0, "0"),
        ] {
            assert_eq!(enc(Json::F32(f)), want, "{f}");
        }
        for (f, want) in [
            (0.1f64, "0.1"),
            (1e21, "1e+21"),
            (1e-7, "1e-7"),
            (1.5e-10, "1.5e-10"),
            (123456789.0, "123456789"),
            (-0.000001, "-0.000001"),
            (5e-324, "5e-324"),
        ] {
            assert_eq!(enc(Json::F64(f)), want, "{f}");
        }
        assert_eq!(
            Json::F32(f32::NAN).encode(),
            Err("json: unsupported value: NaN".into())
        );
        assert_eq!(
            Json::F64(f64::NEG_INFINITY).encode(),
            Err("json: unsupported value: -Inf".into())
        );
        assert_eq!(
            Json::Arr(vec![Json::F64(f64::INFINITY)]).encode(),
            Err("json: unsupported value: +Inf".into())
        );
    }

    #[test]
    fn strings_as_go_writes_them() {
        assert_eq!(enc(Json::str("/x<y>&z")), "\"/x\\u003cy\\u003e\\u0026z\"");
        assert_eq!(
            enc(Json::str("a\"b\\c\td\n\r\u{1}\u{7f}é\u{2028}")),
            "\"a\\\"b\\\\c\\td\\n\\r\\u0001\u{7f}é\\u2028\""
        );
    }

    #[test]
    fn order_is_kept() {
        let v = Json::Obj(vec![
            ("Z", Json::Int(-3)),
            ("A", Json::Arr(vec![Json::Bool(true), Json::Null])),
            ("M", Json::Obj(vec![])),
        ]);
        assert_eq!(enc(v), "{\"Z\":-3,\"A\":[true,null],\"M\":{}}");
    }
}
