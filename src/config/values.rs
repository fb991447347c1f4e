//! Flag values as pflag reads them: paths, lists, durations, booleans, numbers, CIDRs, with
//! upstream's error wording.

use super::*;

pub(super) fn path(v: Option<String>) -> Option<PathBuf> {
    v.filter(|s| !s.is_empty()).map(PathBuf::from)
}

/// Split a pflag string-slice value (comma separated, surrounding quotes removed).
pub(crate) fn split_list(v: &str) -> Vec<String> {
    if v.is_empty() {
        return Vec::new();
    }
    v.split(',')
        .map(|s| s.trim().trim_matches('"').to_string())
        .collect()
}

pub(super) fn invalid(flag: &str, value: &str, why: &str) -> Error {
    Error::Config(format!(
        "invalid argument {value:?} for \"--{flag}\" flag: {why}"
    ))
}

pub(super) fn dur(slot: &mut Duration, flag: &str, v: Option<String>) -> Result<()> {
    if let Some(v) = v {
        *slot = parse_go_duration(&v).map_err(|e| invalid(flag, &v, &e))?;
    }
    Ok(())
}

pub(super) fn boolean(slot: &mut bool, flag: &str, v: Option<String>) -> Result<()> {
    if let Some(v) = v {
        *slot = parse_go_bool(&v).map_err(|e| invalid(flag, &v, &e))?;
    }
    Ok(())
}

/// pflag's int and int32 flags: Go's `strconv.ParseInt(v, 0, 32)` (`0x10`, `010` and `1_000`
/// are numbers too).
pub(super) fn parse_i32(flag: &str, v: &str) -> Result<i32> {
    crate::compat::parse::parse_go_int(v, 32)
        .map(|n| n as i32)
        .map_err(|why| invalid(flag, v, &why))
}

pub(super) fn non_negative(flag: &str, n: i32) -> Result<u32> {
    u32::try_from(n).map_err(|_| Error::Config(format!("--{flag} {n} must not be negative")))
}

/// pflag's float32 flags (Go's `strconv.ParseFloat(v, 32)`); NaN and infinities, which Go
/// reads, are refused too.
pub(super) fn parse_f32(flag: &str, v: &str) -> Result<f32> {
    crate::compat::parse::parse_go_float(v, 32)
        .and_then(|f| {
            f.is_finite().then_some(f as f32).ok_or_else(|| {
                format!(
                    "strconv.ParseFloat: parsing {}: invalid syntax",
                    go_quote(v.as_bytes())
                )
            })
        })
        .map_err(|why| invalid(flag, v, &why))
}

pub(super) fn mask(flag: &str, v: Option<String>, max: u8) -> Result<Option<u8>> {
    let Some(v) = v else { return Ok(None) };
    let n = parse_i32(flag, &v)?;
    if n == 0 {
        return Ok(None);
    }
    match u8::try_from(n) {
        Ok(m) if m <= max => Ok(Some(m)),
        _ => Err(Error::Config(format!(
            "--{flag} {n} must be between 1 and {max}"
        ))),
    }
}

pub(super) fn cidrs(
    flag: &str,
    v: Option<&str>,
    required_valid: bool,
    warnings: &mut Vec<String>,
) -> Result<Vec<Cidr>> {
    let Some(v) = v.filter(|s| !s.trim().is_empty()) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for part in v.split(',') {
        match part.trim().parse::<Cidr>() {
            Ok(c) => out.push(c),
            Err(e) if required_valid => return Err(invalid(flag, v, &e)),
            Err(e) => {
                warnings.push(format!(
                    "flag --{flag}: {e}; ignored because --allocate-node-cidrs is false"
                ));
                return Ok(Vec::new());
            }
        }
    }
    Ok(out)
}
