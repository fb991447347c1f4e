//! The Go types of the flags edgekcm accepts without acting on them, read as pflag reads
//! them: a value that does not parse is an error at start, worded as pflag words it, and the
//! text is kept for `/configz`.

use std::time::Duration;

use crate::compat::parse::{
    parse_go_bool, parse_go_duration_signed, parse_go_float, parse_go_int, split_csv,
};

/// A pflag value type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlagType {
    Bool,
    /// `Int32Var`, read in base 0 (`0x10`, `010`).
    Int32,
    /// `IntVar` (64 bits here).
    Int,
    Float32,
    Float64,
    /// `DurationVar`; negative values are allowed.
    Duration,
    /// Any text; also the types edgekcm does not check (maps, quantities, cipher names).
    Str,
    /// `StringSliceVar`: comma-separated, repeats append.
    StrSlice,
}

/// A value read as its type.
#[derive(Debug, Clone, PartialEq)]
pub enum FlagValue {
    Bool(bool),
    Int(i64),
    Float(f64),
    /// Negative, and the size.
    Duration(bool, Duration),
    Str(String),
    List(Vec<String>),
}

impl FlagType {
    /// Read `text` as pflag would; the error is the part after `invalid argument "x" for
    /// "--flag" flag: `.
    pub fn parse(self, text: &str) -> Result<FlagValue, String> {
        Ok(match self {
            FlagType::Bool => FlagValue::Bool(parse_go_bool(text)?),
            FlagType::Int32 => FlagValue::Int(parse_go_int(text, 32)?),
            FlagType::Int => FlagValue::Int(parse_go_int(text, 64)?),
            FlagType::Float32 => FlagValue::Float(parse_go_float(text, 32)?),
            FlagType::Float64 => FlagValue::Float(parse_go_float(text, 64)?),
            FlagType::Duration => {
                let (negative, d) = parse_go_duration_signed(text)?;
                FlagValue::Duration(negative, d)
            }
            FlagType::Str => FlagValue::Str(text.to_string()),
            FlagType::StrSlice => FlagValue::List(split_csv(text)),
        })
    }

    /// Whether repeating the flag appends to the list instead of replacing the value.
    pub fn appends(self) -> bool {
        self == FlagType::StrSlice
    }
}

/// Record one occurrence of a flag in `given`: a later value replaces an earlier one, except
/// for string slices, whose repeats append as pflag's do.
pub fn record(
    given: &mut std::collections::BTreeMap<&'static str, String>,
    name: &'static str,
    ty: FlagType,
    value: &str,
) {
    match given.get_mut(name) {
        Some(old) if ty.appends() => {
            if old.is_empty() {
                *old = value.to_string();
            } else if !value.is_empty() {
                old.push(',');
                old.push_str(value);
            }
        }
        _ => {
            given.insert(name, value.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_as_pflag_reads_them() {
        assert_eq!(FlagType::Bool.parse("t"), Ok(FlagValue::Bool(true)));
        assert_eq!(FlagType::Int32.parse("0x20"), Ok(FlagValue::Int(32)));
        assert_eq!(FlagType::Int.parse("-5"), Ok(FlagValue::Int(-5)));
        assert_eq!(
            FlagType::Float32.parse("0.2"),
            Ok(FlagValue::Float(f64::from(0.2f32)))
        );
        assert_eq!(
            FlagType::Duration.parse("-1s"),
            Ok(FlagValue::Duration(true, Duration::from_secs(1)))
        );
        assert_eq!(
            FlagType::StrSlice.parse("a,b"),
            Ok(FlagValue::List(vec!["a".into(), "b".into()]))
        );
        assert_eq!(
            FlagType::Int32.parse("abc"),
            Err("strconv.ParseInt: parsing \"abc\": invalid syntax".into())
        );
        assert_eq!(
            FlagType::Duration.parse("abc"),
            Err("time: invalid duration \"abc\"".into())
        );
    }

    #[test]
    fn repeats() {
        let mut given = std::collections::BTreeMap::new();
        record(&mut given, "x", FlagType::Str, "a");
        record(&mut given, "x", FlagType::Str, "b");
        assert_eq!(given["x"], "b");
        record(&mut given, "l", FlagType::StrSlice, "");
        assert_eq!(given["l"], "");
        record(&mut given, "l", FlagType::StrSlice, "a,b");
        record(&mut given, "l", FlagType::StrSlice, "");
        record(&mut given, "l", FlagType::StrSlice, "c");
        assert_eq!(given["l"], "a,b,c");
    }
}
