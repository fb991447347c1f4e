//! Instants and civil times in a time zone, with the arithmetic of Go's `time` package that
//! the cron schedule search is written in: `time.Date` (with its normalisation of out-of-range
//! fields and its choice of offset in a gap or an overlap), `AddDate`, `Add`, `Truncate` and the
//! field accessors. Instants are nanoseconds since the Unix epoch; zone data comes from the
//! `jiff` crate (the system's zoneinfo, else the copy of the tz database built into the binary).

use jiff::tz::{TimeZone, TimeZoneDatabase};
use jiff::Timestamp;
use std::sync::OnceLock;

pub const SECOND: i64 = 1_000_000_000;
pub const MINUTE: i64 = 60 * SECOND;
pub const HOUR: i64 = 60 * MINUTE;

/// Go's `time.LoadLocation`: "" and "UTC" are UTC, "Local" the process's zone, any other
/// name an IANA zone, from the system's zoneinfo if it has it, else from the embedded tz
/// database (upstream links Go's `time/tzdata` for the same fallback). Names match exactly
/// (the database's own lookup ignores case; Go's does not).
pub fn load_location(name: &str) -> Result<TimeZone, String> {
    match name {
        "" | "UTC" => return Ok(TimeZone::UTC),
        "Local" => return Ok(local()),
        _ => {}
    }
    if name.contains("..") || name.starts_with('/') || name.contains('\\') {
        return Err("time: invalid location name".to_string());
    }
    let exact = |tz: TimeZone| (tz.iana_name() == Some(name)).then_some(tz);
    if let Some(tz) = jiff::tz::db().get(name).ok().and_then(exact) {
        return Ok(tz);
    }
    static BUNDLED: OnceLock<TimeZoneDatabase> = OnceLock::new();
    BUNDLED
        .get_or_init(TimeZoneDatabase::bundled)
        .get(name)
        .ok()
        .and_then(exact)
        .ok_or_else(|| format!("unknown time zone {name}"))
}

/// The process's own zone (`TZ`, else `/etc/localtime`, else UTC), as Go's `time.Local`.
pub fn local() -> TimeZone {
    static LOCAL: OnceLock<TimeZone> = OnceLock::new();
    LOCAL.get_or_init(TimeZone::system).clone()
}

/// The zone's offset from UTC at `unix` seconds, in seconds.
pub fn offset_at(tz: &TimeZone, unix: i64) -> i64 {
    match Timestamp::from_second(unix) {
        Ok(ts) => tz.to_offset(ts).seconds() as i64,
        Err(_) => 0,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (month 1..=12).
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day count since 1970-01-01: (year, month 1..=12, day 1..=31).
pub fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (
        if m <= 2 {
            yoe + era * 400 + 1
        } else {
            yoe + era * 400
        },
        m,
        d,
    )
}

/// The civil fields of an instant in a zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Civil {
    pub year: i64,
    pub month: i64,
    pub day: i64,
    pub hour: i64,
    pub minute: i64,
    pub second: i64,
    pub nanos: i64,
    /// 0 = Sunday.
    pub weekday: i64,
    /// The zone's offset at that instant, in seconds.
    pub offset: i64,
}

pub fn civil(tz: &TimeZone, t: i64) -> Civil {
    let secs = t.div_euclid(SECOND);
    let offset = offset_at(tz, secs);
    let local = secs + offset;
    let days = local.div_euclid(86_400);
    let sod = local.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    Civil {
        year,
        month,
        day,
        hour: sod / 3600,
        minute: sod / 60 % 60,
        second: sod % 60,
        nanos: t.rem_euclid(SECOND),
        weekday: (days + 4).rem_euclid(7),
        offset,
    }
}

/// Go's `time.Date(y, m, d, h, mi, s, ns, tz)`: fields out of range carry into the next
/// larger one (month 13 is January of the next year, day 0 the last of the month before);
/// a civil time that falls in a gap or an overlap takes the offset in force at the instant
/// the time would be with the offset found first, as Go does.
#[allow(clippy::too_many_arguments)]
pub fn date(tz: &TimeZone, y: i64, m: i64, d: i64, h: i64, mi: i64, s: i64, ns: i64) -> i64 {
    let m0 = m - 1;
    let (y, m) = (y + m0.div_euclid(12), m0.rem_euclid(12) + 1);
    let days = days_from_civil(y, m, 1) + d - 1;
    let unix = days * 86_400 + h * 3600 + mi * 60 + s + ns.div_euclid(SECOND);
    let guess = offset_at(tz, unix);
    let offset = offset_at(tz, unix - guess);
    (unix - offset) * SECOND + ns.rem_euclid(SECOND)
}

/// Go's `t.AddDate(years, months, days)` in `tz`.
pub fn add_date(tz: &TimeZone, t: i64, years: i64, months: i64, days: i64) -> i64 {
    let c = civil(tz, t);
    date(
        tz,
        c.year + years,
        c.month + months,
        c.day + days,
        c.hour,
        c.minute,
        c.second,
        c.nanos,
    )
}

/// Go's `t.Truncate(d)` (on the absolute time, whatever the zone).
pub fn truncate(t: i64, d: i64) -> i64 {
    t - t.rem_euclid(d)
}

/// RFC 3339 with the zone's offset (`Z` when it is zero), seconds precision: Go's
/// `t.In(tz).Format(time.RFC3339)`.
pub fn rfc3339_in(tz: &TimeZone, t: i64) -> String {
    let c = civil(tz, t);
    let zone = if c.offset == 0 {
        "Z".to_string()
    } else {
        let (sign, o) = if c.offset < 0 {
            ('-', -c.offset)
        } else {
            ('+', c.offset)
        };
        format!("{sign}{:02}:{:02}", o / 3600, o / 60 % 60)
    };
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}{zone}",
        c.year, c.month, c.day, c.hour, c.minute, c.second
    )
}

/// Nanoseconds since the epoch of a `SystemTime`.
pub fn from_system(t: std::time::SystemTime) -> i64 {
    match t.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i64,
        Err(e) => -(e.duration().as_nanos() as i64),
    }
}

/// The `SystemTime` of nanoseconds since the epoch.
pub fn to_system(t: i64) -> std::time::SystemTime {
    if t >= 0 {
        std::time::UNIX_EPOCH + std::time::Duration::from_nanos(t as u64)
    } else {
        std::time::UNIX_EPOCH - std::time::Duration::from_nanos(t.unsigned_abs())
    }
}
