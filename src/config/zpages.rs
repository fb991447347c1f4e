//! `/flagz` and `/statusz`, the z-pages kube-controller-manager serves on its secure port
//! since the gates ComponentFlagz and ComponentStatusz went beta (on) in v1.36: behind the
//! same authentication and authorization as `/configz`, each served only while its gate is
//! on at the emulated version (so not when emulating v1.34 or v1.35).
//!
//! - `/flagz`: every flag with its value, as pflag prints it (`[a,b]` lists, Go durations,
//!   `true`/`false`): the value given on the command line, else the default. The flags and
//!   their defaults are v1.37's (`flagz_v1_37.txt`, recorded from kube-controller-manager
//!   v1.37.2 started without them), plus edgekcm's own `--node-autonomy-duration`.
//! - `/statusz`: start time, uptime, versions and the debugging paths served.
//!
//! Both answer as upstream negotiates: no `Accept` (or `text/plain`, `*/*`) gets the text
//! page, whose delimiter is chosen at random for every answer (upstream does so on purpose:
//! the text is not meant to be parsed); `application/json` or `application/yaml` with
//! `as=Flagz|Statusz;g=config.k8s.io;v=v1alpha1|v1beta1` gets the structured document
//! (v1alpha1 with upstream's deprecation `Warning`); anything else is 406. Differences: the
//! Go version is empty (edgekcm is not written in Go) and the binary version is the minor
//! edgekcm implements (`1.37`).

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use super::Config;
use crate::compat::parse::{
    format_go_duration, parse_go_bool, parse_go_duration_signed, parse_go_float, parse_go_int,
    split_csv,
};
use crate::server::{Handler, Request, Response, Server};

pub const FLAGZ_PATH: &str = "/flagz";
pub const STATUSZ_PATH: &str = "/statusz";
const COMPONENT: &str = "kube-controller-manager";
const DEFAULTS: &str = include_str!("flagz_v1_37.txt");
const WARNING: &str = "Warning: This endpoint is not meant to be machine parseable, has no formatting compatibility guarantees and is for debugging purposes only.";
const DELIMITERS: [&str; 4] = [":", ": ", "=", " "];

/// v1.37's flags and their defaults as pflag prints them.
pub fn defaults() -> impl Iterator<Item = (&'static str, &'static str)> {
    DEFAULTS.lines().filter_map(|l| l.split_once('\t'))
}

/// The emulated version once start-up has decided it (for `/statusz`).
static EMULATED: OnceLock<String> = OnceLock::new();

/// Record the emulated version (`major.minor`) for `/statusz`; later calls are ignored.
pub fn set_emulated(version: String) {
    let _ = EMULATED.set(version);
}

/// Every flag with its value: given on the command line (as pflag would print it), else the
/// default.
pub fn flag_values(cfg: &Config) -> BTreeMap<&'static str, String> {
    let own = [(
        "node-autonomy-duration",
        format_go_duration(cfg.node_lifecycle.node_autonomy_duration),
    )];
    defaults()
        .map(|(name, default)| {
            let v = match cfg.command_line.get(name) {
                Some(given) => render(name, default, given),
                None => default.to_string(),
            };
            (name, v)
        })
        .chain(own)
        .collect()
}

/// A given flag's value as pflag prints it, its type read off its default; a value that
/// does not read as that type (a quantity where the default is a number) is kept as given.
fn render(name: &str, default: &str, given: &[String]) -> String {
    let last = given.last().map(String::as_str).unwrap_or("");
    if name == "feature-gates" {
        // component-base's versioned gates print each pair with its (empty) component.
        return given
            .iter()
            .flat_map(|v| split_csv(v))
            .map(|p| format!(":{}", p.trim()))
            .collect::<Vec<_>>()
            .join(",");
    }
    if default.starts_with('[') {
        let items: Vec<String> = given.iter().flat_map(|v| split_csv(v)).collect();
        return format!("[{}]", items.join(","));
    }
    if default == "true" || default == "false" {
        return parse_go_bool(last).map_or(last.to_string(), |b| b.to_string());
    }
    let is_duration =
        default.ends_with(['s', 'm', 'h']) && parse_go_duration_signed(default).is_ok();
    if is_duration {
        return match parse_go_duration_signed(last) {
            Ok((negative, d)) if !d.is_zero() && negative => format!("-{}", format_go_duration(d)),
            Ok((_, d)) => format_go_duration(d),
            Err(_) => last.to_string(),
        };
    }
    if parse_go_int(default, 64).is_ok() {
        return parse_go_int(last, 64).map_or(last.to_string(), |n| n.to_string());
    }
    if parse_go_float(default, 64).is_ok() {
        return parse_go_float(last, 64).map_or(last.to_string(), go_float);
    }
    last.to_string()
}

/// Go's `strconv.FormatFloat(f, 'g', -1, 32)` for the float flags' values.
fn go_float(f: f64) -> String {
    let f = f as f32;
    let a = f.abs();
    // %e where the exponent is below -4 or at least 6 (Go's rule for the shortest form).
    if a != 0.0 && !(1e-4..1e6).contains(&a) {
        let s = format!("{f:e}");
        let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
        let e: i32 = e.parse().unwrap_or(0);
        return format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs());
    }
    format!("{f}")
}

/// What an `Accept` header asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wanted {
    Text,
    Json(&'static str),
    Yaml(&'static str),
    NotAcceptable,
}

/// Upstream's negotiation for a z-page of `kind` (`Flagz`, `Statusz`): the clauses by their
/// `q` (highest first, then in order), the first one served wins.
pub fn negotiate(accept: Option<&str>, kind: &str) -> Wanted {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Wanted::Text;
    };
    let mut clauses: Vec<(f32, Wanted)> = accept
        .split(',')
        .filter_map(|clause| {
            let mut parts = clause.split(';').map(str::trim);
            let media = parts.next()?.to_ascii_lowercase();
            let mut q = 1.0f32;
            let (mut as_, mut g, mut v) = ("", "", "");
            for p in parts {
                let (k, val) = p.split_once('=').unwrap_or((p, ""));
                match k.trim() {
                    "q" => q = val.trim().parse().unwrap_or(1.0),
                    "as" => as_ = val.trim(),
                    "g" => g = val.trim(),
                    "v" => v = val.trim(),
                    _ => {}
                }
            }
            let version = match v {
                "v1alpha1" => Some("v1alpha1"),
                "v1beta1" => Some("v1beta1"),
                _ => None,
            };
            let structured = (as_ == kind && g == "config.k8s.io")
                .then_some(version)
                .flatten();
            let w = match media.as_str() {
                "text/plain" | "text/*" | "*/*" => Wanted::Text,
                "application/json" => structured.map_or(Wanted::NotAcceptable, Wanted::Json),
                "application/yaml" => structured.map_or(Wanted::NotAcceptable, Wanted::Yaml),
                _ => Wanted::NotAcceptable,
            };
            (q > 0.0).then_some((q, w))
        })
        .collect();
    crate::sort::sort_by(&mut clauses[..], |a, b| b.0.total_cmp(&a.0));
    clauses
        .into_iter()
        .map(|(_, w)| w)
        .find(|w| *w != Wanted::NotAcceptable)
        .unwrap_or(Wanted::NotAcceptable)
}

fn not_acceptable() -> Response {
    let body = "{\n  \"kind\": \"Status\",\n  \"apiVersion\": \"v1\",\n  \"metadata\": {},\n  \"status\": \"Failure\",\n  \"message\": \"only the following media types are accepted: application/json, application/yaml, text/plain\",\n  \"reason\": \"NotAcceptable\",\n  \"code\": 406\n}";
    Response::json(406, body)
}

/// The structured answer: content type with its parameters, and the deprecation warning of
/// v1alpha1.
fn structured(body: String, media: &str, version: &str, kind: &str, page: &str) -> Response {
    let mut r = Response::json(200, body);
    r.content_type = format!("{media};g=config.k8s.io;v={version};as={kind}");
    if version == "v1alpha1" {
        r.headers.push((
            "Warning".into(),
            format!("299 - \"This version of the {page} endpoint is deprecated. Please use a newer version.\""),
        ));
    }
    r
}

fn text(body: String) -> Response {
    Response::text(200, body)
}

fn delimiter() -> &'static str {
    DELIMITERS[fastrand::usize(..DELIMITERS.len())]
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// YAML's scalar for a string, quoted as sigs.k8s.io/yaml quotes it where plain text would
/// read as something else.
fn yaml_str(s: &str) -> String {
    let reads_as_other = s.is_empty()
        || matches!(
            s.to_ascii_lowercase().as_str(),
            "true" | "false" | "yes" | "no" | "on" | "off" | "y" | "n" | "null" | "~"
        )
        || s.parse::<f64>().is_ok()
        || parse_go_int(s, 64).is_ok();
    if reads_as_other {
        return json_str(s);
    }
    // `-`, `?` and `:` start a plain scalar unless a space or the end follows.
    let indicator =
        ["- ", "? ", ": "].iter().any(|p| s.starts_with(p)) || matches!(s, "-" | "?" | ":");
    let special = indicator
        || s.starts_with([
            '[', ']', '{', '}', ',', '#', '&', '*', '!', '|', '>', '\'', '"', '%', '@', '`',
        ])
        || s.contains(": ")
        || s.contains(" #")
        || s.ends_with(':')
        || s.starts_with(' ')
        || s.ends_with(' ');
    if special {
        return format!("'{}'", s.replace('\'', "''"));
    }
    s.to_string()
}

/// The `/flagz` answer for one request.
pub fn flagz(flags: &BTreeMap<&'static str, String>, req: &Request) -> Response {
    match negotiate(req.header("accept"), "Flagz") {
        Wanted::Text => {
            let d = delimiter();
            let mut out = format!("\n{COMPONENT} flagz\n{WARNING}\n");
            for (k, v) in flags {
                out.push_str(&format!("{k}{d}{v}\n"));
            }
            text(out)
        }
        Wanted::Json(v) => {
            let entries: Vec<String> = flags
                .iter()
                .map(|(k, val)| format!("    {}: {}", json_str(k), json_str(val)))
                .collect();
            let body = format!(
                "{{\n  \"kind\": \"Flagz\",\n  \"apiVersion\": \"config.k8s.io/{v}\",\n  \"metadata\": {{\n    \"name\": \"{COMPONENT}\"\n  }},\n  \"flags\": {{\n{}\n  }}\n}}",
                entries.join(",\n")
            );
            structured(body, "application/json", v, "Flagz", "flagz")
        }
        Wanted::Yaml(v) => {
            let mut out = format!("apiVersion: config.k8s.io/{v}\nflags:\n");
            for (k, val) in flags {
                out.push_str(&format!("  {k}: {}\n", yaml_str(val)));
            }
            out.push_str(&format!("kind: Flagz\nmetadata:\n  name: {COMPONENT}\n"));
            structured(out, "application/yaml", v, "Flagz", "flagz")
        }
        Wanted::NotAcceptable => not_acceptable(),
    }
}

/// What `/statusz` reports.
pub struct Status {
    pub started: SystemTime,
    pub now: SystemTime,
    pub emulated: Option<String>,
    pub paths: Vec<&'static str>,
}

/// The `/statusz` answer for one request.
pub fn statusz(s: &Status, req: &Request) -> Response {
    let up = s
        .now
        .duration_since(s.started)
        .unwrap_or_default()
        .as_secs();
    let binary = format!("1.{}", super::version::BINARY_MINOR);
    match negotiate(req.header("accept"), "Statusz") {
        Wanted::Text => {
            let d = delimiter();
            let started = crate::compat::timefmt::unix_date(s.started);
            let emulated = s
                .emulated
                .as_ref()
                .map(|e| format!("Emulation version{d} {e}"))
                .unwrap_or_default();
            let paths = if s.paths.is_empty() {
                String::new()
            } else {
                format!("Paths{d} {}", s.paths.join(" "))
            };
            text(format!(
                "\n{COMPONENT} statusz\n{WARNING}\n\nStarted{d} {started}\nUp{d} {} hr {:02} min {:02} sec\nGo version{d} \nBinary version{d} {binary}\n{emulated}\n{paths}\n",
                up / 3600,
                (up / 60) % 60,
                up % 60
            ))
        }
        Wanted::Json(v) => {
            let mut body = format!(
                "{{\n  \"kind\": \"Statusz\",\n  \"apiVersion\": \"config.k8s.io/{v}\",\n  \"metadata\": {{\n    \"name\": \"{COMPONENT}\"\n  }},\n  \"startTime\": \"{}\",\n  \"uptimeSeconds\": {up},\n  \"goVersion\": \"\",\n  \"binaryVersion\": \"{binary}\"",
                crate::compat::timefmt::rfc3339(s.started)
            );
            if let Some(e) = &s.emulated {
                body.push_str(&format!(",\n  \"emulationVersion\": {}", json_str(e)));
            }
            if !s.paths.is_empty() {
                let p: Vec<String> = s
                    .paths
                    .iter()
                    .map(|p| format!("    {}", json_str(p)))
                    .collect();
                body.push_str(&format!(",\n  \"paths\": [\n{}\n  ]", p.join(",\n")));
            }
            body.push_str("\n}");
            structured(body, "application/json", v, "Statusz", "statusz")
        }
        Wanted::Yaml(v) => {
            let mut out = format!(
                "apiVersion: config.k8s.io/{v}\nbinaryVersion: {}\n",
                yaml_str(&binary)
            );
            if let Some(e) = &s.emulated {
                out.push_str(&format!("emulationVersion: {}\n", yaml_str(e)));
            }
            out.push_str(&format!(
                "goVersion: \"\"\nkind: Statusz\nmetadata:\n  name: {COMPONENT}\n"
            ));
            if !s.paths.is_empty() {
                out.push_str("paths:\n");
                for p in &s.paths {
                    out.push_str(&format!("- {p}\n"));
                }
            }
            out.push_str(&format!(
                "startTime: \"{}\"\nuptimeSeconds: {up}\n",
                crate::compat::timefmt::rfc3339(s.started)
            ));
            structured(out, "application/yaml", v, "Statusz", "statusz")
        }
        Wanted::NotAcceptable => not_acceptable(),
    }
}

/// Serve `/flagz` and `/statusz` while their gates are on (looked at per request: the gates
/// are settled once the emulated version is known, after the port opened). `paths` are the
/// debugging paths served, for `/statusz`.
pub fn install(s: &mut Server, cfg: &Config, paths: Vec<&'static str>) {
    let flags = flag_values(cfg);
    let flagz_handler: Handler = Arc::new(move |req: &Request| {
        if !super::gates::enabled("ComponentFlagz") {
            return Response::not_found();
        }
        flagz(&flags, req)
    });
    s.route(FLAGZ_PATH, flagz_handler);
    let started = SystemTime::now();
    let statusz_handler: Handler = Arc::new(move |req: &Request| {
        if !super::gates::enabled("ComponentStatusz") {
            return Response::not_found();
        }
        let status = Status {
            started,
            now: SystemTime::now(),
            emulated: EMULATED.get().cloned(),
            paths: paths.clone(),
        };
        statusz(&status, req)
    });
    s.route(STATUSZ_PATH, statusz_handler);
}

#[cfg(test)]
#[path = "zpages_tests.rs"]
mod tests;
