//! Cron schedules as upstream reads them (the `robfig/cron/v3` standard parser): five fields
//! (minute, hour, day of month, month, day of week) of numbers, names (`jan`, `mon`), `*`
//! and `?`, ranges `a-b`, steps `/n` and lists `a,b`; the descriptors `@yearly`,
//! `@annually`, `@monthly`, `@weekly`, `@daily`, `@midnight`, `@hourly` and `@every <d>`; a
//! leading `TZ=<zone>` or `CRON_TZ=<zone>`. When both day fields are restricted a day
//! matches either (a field written with `*` or `?` restricts nothing).
//!
//! [`Schedule::next`] is the library's search, step by step (month, day, hour, minute,
//! second, each restarting the larger ones when it wraps), in Go's time arithmetic
//! ([`super::gotime`]), so daylight-saving transitions fall where they fall upstream: a
//! time in a spring-forward gap does not run that day, one in an autumn overlap can run in
//! both occurrences.

use super::gotime::{self, add_date, civil, date, truncate, HOUR, MINUTE, SECOND};
use jiff::tz::TimeZone;

const STAR: u64 = 1 << 63;

#[derive(Clone, Copy)]
struct Bounds {
    min: u64,
    max: u64,
    names: &'static [(&'static str, u64)],
}

const MINUTES: Bounds = Bounds {
    min: 0,
    max: 59,
    names: &[],
};
const HOURS: Bounds = Bounds {
    min: 0,
    max: 23,
    names: &[],
};
const DOM: Bounds = Bounds {
    min: 1,
    max: 31,
    names: &[],
};
const MONTHS: Bounds = Bounds {
    min: 1,
    max: 12,
    names: &[
        ("jan", 1),
        ("feb", 2),
        ("mar", 3),
        ("apr", 4),
        ("may", 5),
        ("jun", 6),
        ("jul", 7),
        ("aug", 8),
        ("sep", 9),
        ("oct", 10),
        ("nov", 11),
        ("dec", 12),
    ],
};
const DOW: Bounds = Bounds {
    min: 0,
    max: 6,
    names: &[
        ("sun", 0),
        ("mon", 1),
        ("tue", 2),
        ("wed", 3),
        ("thu", 4),
        ("fri", 5),
        ("sat", 6),
    ],
};

/// The zone a schedule runs in: the one its `TZ=` prefix names, else the process's own
/// (Go's `time.Local`), as upstream.
#[derive(Debug, Clone)]
pub enum Zone {
    Local,
    Named(TimeZone),
}

impl Zone {
    fn tz(&self) -> TimeZone {
        match self {
            Zone::Local => gotime::local(),
            Zone::Named(tz) => tz.clone(),
        }
    }
}

/// A parsed schedule.
#[derive(Debug, Clone)]
pub enum Schedule {
    Spec {
        second: u64,
        minute: u64,
        hour: u64,
        dom: u64,
        month: u64,
        dow: u64,
        zone: Zone,
    },
    /// `@every <duration>`: a fixed delay (whole seconds, at least one).
    Every(i64),
}

fn bits(min: u64, max: u64, step: u64) -> u64 {
    let mut b = 0;
    let mut i = min;
    while i <= max {
        b |= 1 << i;
        i += step;
    }
    b
}

fn all(r: Bounds) -> u64 {
    bits(r.min, r.max, 1) | STAR
}

/// Go's `strconv.Atoi` with the library's messages.
fn parse_int(expr: &str) -> Result<u64, String> {
    let digits = expr.strip_prefix(['+', '-']).unwrap_or(expr);
    let syntax = || {
        format!("failed to parse int from {expr}: strconv.Atoi: parsing {expr:?}: invalid syntax")
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(syntax());
    }
    let n: i64 = expr.parse().map_err(|_| {
        format!(
            "failed to parse int from {expr}: strconv.Atoi: parsing {expr:?}: value out of range"
        )
    })?;
    if n < 0 {
        return Err(format!("negative number ({n}) not allowed: {expr}"));
    }
    Ok(n as u64)
}

fn int_or_name(expr: &str, r: Bounds) -> Result<u64, String> {
    let lower = expr.to_lowercase();
    if let Some((_, v)) = r.names.iter().find(|(n, _)| *n == lower) {
        return Ok(*v);
    }
    parse_int(expr)
}

fn range(expr: &str, r: Bounds) -> Result<u64, String> {
    let range_and_step: Vec<&str> = expr.split('/').collect();
    let low_high: Vec<&str> = range_and_step[0].split('-').collect();
    let single = low_high.len() == 1;
    let (start, mut end, mut extra);
    if low_high[0] == "*" || low_high[0] == "?" {
        (start, end, extra) = (r.min, r.max, STAR);
    } else {
        start = int_or_name(low_high[0], r)?;
        end = match low_high.len() {
            1 => start,
            2 => int_or_name(low_high[1], r)?,
            _ => return Err(format!("too many hyphens: {expr}")),
        };
        extra = 0;
    }
    let step = match range_and_step.len() {
        1 => 1,
        2 => {
            let step = parse_int(range_and_step[1])?;
            if single {
                end = r.max;
            }
            if step > 1 {
                extra = 0;
            }
            step
        }
        _ => return Err(format!("too many slashes: {expr}")),
    };
    if start < r.min {
        return Err(format!(
            "beginning of range ({start}) below minimum ({}): {expr}",
            r.min
        ));
    }
    if end > r.max {
        return Err(format!(
            "end of range ({end}) above maximum ({}): {expr}",
            r.max
        ));
    }
    if start > end {
        return Err(format!(
            "beginning of range ({start}) beyond end of range ({end}): {expr}"
        ));
    }
    if step == 0 {
        return Err(format!("step of range should be a positive number: {expr}"));
    }
    Ok(bits(start, end, step) | extra)
}

fn field(f: &str, r: Bounds) -> Result<u64, String> {
    f.split(',')
        .filter(|s| !s.is_empty())
        .try_fold(0, |acc, e| Ok(acc | range(e, r)?))
}

/// `time.ParseDuration`, to whole nanoseconds.
fn parse_duration(s: &str) -> Result<i64, String> {
    let bad = || format!("time: invalid duration {s:?}");
    let (neg, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total: f64 = 0.0;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let num = &rest[..num_end];
        if num.is_empty() || num == "." || num.matches('.').count() > 1 {
            return Err(bad());
        }
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = match &rest[..unit_end] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            "" => return Err(format!("time: missing unit in duration {s:?}")),
            u => return Err(format!("time: unknown unit {u:?} in duration {s:?}")),
        };
        rest = &rest[unit_end..];
        total += num.parse::<f64>().map_err(|_| bad())? * unit;
    }
    if total > i64::MAX as f64 {
        return Err(bad());
    }
    Ok(if neg { -(total as i64) } else { total as i64 })
}

/// `cron.ParseStandard`.
pub fn parse(spec: &str) -> Result<Schedule, String> {
    if spec.is_empty() {
        return Err("empty spec string".into());
    }
    let mut spec = spec;
    let mut zone = Zone::Local;
    if spec.starts_with("TZ=") || spec.starts_with("CRON_TZ=") {
        let eq = spec.find('=').unwrap_or(0);
        let Some(sp) = spec.find(' ') else {
            return Err(format!(
                "provided bad location {}: no schedule after it",
                &spec[eq + 1..]
            ));
        };
        let name = &spec[eq + 1..sp];
        let tz = gotime::load_location(name)
            .map_err(|e| format!("provided bad location {name}: {e}"))?;
        zone = if name == "Local" {
            Zone::Local
        } else {
            Zone::Named(tz)
        };
        spec = spec[sp..].trim();
    }
    if spec.starts_with('@') {
        return descriptor(spec, zone);
    }
    let fields: Vec<&str> = spec.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "expected exactly 5 fields, found {}: [{}]",
            fields.len(),
            fields.join(" ")
        ));
    }
    Ok(Schedule::Spec {
        second: 1,
        minute: field(fields[0], MINUTES)?,
        hour: field(fields[1], HOURS)?,
        dom: field(fields[2], DOM)?,
        month: field(fields[3], MONTHS)?,
        dow: field(fields[4], DOW)?,
        zone,
    })
}

fn descriptor(d: &str, zone: Zone) -> Result<Schedule, String> {
    let spec = |minute, hour, dom, month, dow| Schedule::Spec {
        second: 1,
        minute,
        hour,
        dom,
        month,
        dow,
        zone: zone.clone(),
    };
    Ok(match d {
        "@yearly" | "@annually" => spec(1, 1, 1 << 1, 1 << 1, all(DOW)),
        "@monthly" => spec(1, 1, 1 << 1, all(MONTHS), all(DOW)),
        "@weekly" => spec(1, 1, all(DOM), all(MONTHS), 1),
        "@daily" | "@midnight" => spec(1, 1, all(DOM), all(MONTHS), all(DOW)),
        "@hourly" => spec(1, all(HOURS), all(DOM), all(MONTHS), all(DOW)),
        _ => match d.strip_prefix("@every ") {
            Some(dur) => {
                let n = parse_duration(dur)
                    .map_err(|e| format!("failed to parse duration {d}: {e}"))?;
                Schedule::Every(if n < SECOND { SECOND } else { n - n % SECOND })
            }
            None => return Err(format!("unrecognized descriptor: {d}")),
        },
    })
}

fn has(bits: u64, v: i64) -> bool {
    (0..64).contains(&v) && bits & (1 << v) != 0
}

impl Schedule {
    /// The first activation after `t` (nanoseconds since the epoch); None when there is none
    /// within five years (upstream's zero time).
    pub fn next(&self, t: i64) -> Option<i64> {
        let (second, minute, hour, dom, month, dow, zone) = match self {
            Schedule::Every(d) => return Some(t + d - t.rem_euclid(SECOND)),
            Schedule::Spec {
                second,
                minute,
                hour,
                dom,
                month,
                dow,
                zone,
            } => (*second, *minute, *hour, *dom, *month, *dow, zone),
        };
        let tz = zone.tz();
        let day_matches = |c: &gotime::Civil| {
            let (d, w) = (has(dom, c.day), has(dow, c.weekday));
            if dom & STAR != 0 || dow & STAR != 0 {
                d && w
            } else {
                d || w
            }
        };
        // The upcoming second.
        let mut t = t + SECOND - t.rem_euclid(SECOND);
        let mut added = false;
        let year_limit = civil(&tz, t).year + 5;
        'wrap: loop {
            if civil(&tz, t).year > year_limit {
                return None;
            }
            while !has(month, civil(&tz, t).month) {
                if !added {
                    added = true;
                    let c = civil(&tz, t);
                    t = date(&tz, c.year, c.month, 1, 0, 0, 0, 0);
                }
                t = add_date(&tz, t, 0, 1, 0);
                if civil(&tz, t).month == 1 {
                    continue 'wrap;
                }
            }
            while !day_matches(&civil(&tz, t)) {
                if !added {
                    added = true;
                    let c = civil(&tz, t);
                    t = date(&tz, c.year, c.month, c.day, 0, 0, 0, 0);
                }
                t = add_date(&tz, t, 0, 0, 1);
                // Midnight may not exist on a day daylight saving starts: back to the hour.
                let h = civil(&tz, t).hour;
                if h != 0 {
                    t += if h > 12 { (24 - h) * HOUR } else { -h * HOUR };
                }
                if civil(&tz, t).day == 1 {
                    continue 'wrap;
                }
            }
            while !has(hour, civil(&tz, t).hour) {
                if !added {
                    added = true;
                    let c = civil(&tz, t);
                    t = date(&tz, c.year, c.month, c.day, c.hour, 0, 0, 0);
                }
                t += HOUR;
                if civil(&tz, t).hour == 0 {
                    continue 'wrap;
                }
            }
            while !has(minute, civil(&tz, t).minute) {
                if !added {
                    added = true;
                    t = truncate(t, MINUTE);
                }
                t += MINUTE;
                if civil(&tz, t).minute == 0 {
                    continue 'wrap;
                }
            }
            while !has(second, civil(&tz, t).second) {
                if !added {
                    added = true;
                    t = truncate(t, SECOND);
                }
                t += SECOND;
                if civil(&tz, t).second == 0 {
                    continue 'wrap;
                }
            }
            return Some(t);
        }
    }
}

/// How many start times were missed (upstream's `missedSchedulesType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missed {
    None,
    Few,
    /// More than 100: the `TooManyMissedTimes` Event.
    Many,
}

/// Upstream's `mostRecentScheduleTime`: from the last schedule time (else the creation time;
/// with `deadline` seconds, no earlier than `now - deadline`), the earliest time looked
/// from, the most recent start time not after `now` (None when none is due), and how many
/// were missed. An error when two consecutive start times are under a second apart (a
/// schedule that never fires gives that too).
pub fn most_recent(
    sched: &Schedule,
    earliest: i64,
    deadline: Option<i64>,
    now: i64,
) -> (i64, Option<i64>, Missed, Result<(), String>) {
    let mut earliest = earliest;
    if let Some(d) = deadline {
        let limit = now - d.saturating_mul(SECOND);
        if limit > earliest {
            earliest = limit;
        }
    }
    let t1 = sched.next(earliest);
    let t2 = t1.and_then(|t| sched.next(t));
    if let Some(t1) = t1 {
        if now < t1 {
            return (earliest, None, Missed::None, Ok(()));
        }
        if matches!(t2, Some(t2) if now < t2) {
            return (earliest, Some(t1), Missed::None, Ok(()));
        }
    }
    let between = match (t1, t2) {
        (Some(t1), Some(t2)) => round_seconds(t2 - t1),
        _ => 0,
    };
    let (Some(t1), true) = (t1, between >= 1) else {
        return (
            earliest,
            None,
            Missed::None,
            Err("time difference between two schedules is less than 1 second".into()),
        );
    };
    let elapsed = (now - t1) / SECOND;
    let missed = elapsed / between + 1;
    let mut most_recent = None;
    let mut t = sched.next(t1 + (missed - 2) * between * SECOND);
    while let Some(x) = t.filter(|x| *x <= now) {
        most_recent = Some(x);
        t = sched.next(x);
    }
    let kind = if missed > 100 {
        Missed::Many
    } else {
        Missed::Few
    };
    (earliest, most_recent, kind, Ok(()))
}

/// A duration rounded to whole seconds, halves away from zero (Go's `Round(time.Second)`).
fn round_seconds(ns: i64) -> i64 {
    (ns + SECOND / 2).div_euclid(SECOND)
}

/// Upstream waits this much past a start time before looking again.
pub const NEXT_DELTA: i64 = 100_000_000;

/// Upstream's `nextScheduleTimeDuration`: how long from `now` until the start time after the
/// most recent one (or after `earliest` when none was due), plus 100 ms. None when the
/// schedule has no next time.
pub fn next_duration(sched: &Schedule, earliest: i64, now: i64) -> Option<i64> {
    let (earliest, recent, missed, err) = most_recent(sched, earliest, None, now);
    let from = match (err, recent) {
        (Err(_), _) => now,
        (Ok(()), Some(t)) => t,
        (Ok(()), None) if missed == Missed::None => earliest,
        (Ok(()), None) => now,
    };
    sched.next(from).map(|n| n + NEXT_DELTA - now)
}
