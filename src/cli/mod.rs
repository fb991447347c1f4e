//! The command line, spelled as kube-controller-manager spells it.
//!
//! kube-controller-manager uses Go's pflag: `--name=value` or `--name value`, booleans as
//! `--name` or `--name=true|false` (a boolean never takes the next argument), `_` and `-` are
//! the same in names, `-v` is the only short flag with a value, and a repeated flag replaces the
//! earlier value except list flags, which append. This module normalises argv with those rules,
//! sorts every flag into one of four kinds (acted on, accepted and ignored, removed upstream and
//! ignored, unknown), hands the acted-on ones to an argh parser and builds the [`Config`].

use std::collections::BTreeMap;

use crate::config::{self, Config, ControllerSelection, RunFlags};
use crate::error::{Error, Result};

/// What to do after parsing.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Run the controller manager.
    Run(Box<Config>),
    /// Print this text to stdout and exit 0.
    Help(String),
    /// Print this text to stdout and exit 0.
    Version(String),
    /// `edgekcm certs`: write the local PKI.
    Certs(Box<crate::certs::CertsOptions>),
}

pub mod certs;
mod flags;
mod help;

use argh::FromArgs;
pub use flags::flag_counts;
#[cfg(test)]
pub(crate) use flags::{current_flags, known_flags};
use flags::{lookup, Kind};
pub use help::help_text;

/// Parse the arguments after argv\[0\].
pub fn parse(args: &[String]) -> Result<Command> {
    let mut rest = args;
    if let Some(first) = rest.first() {
        if !first.starts_with('-') {
            match first.as_str() {
                "run" => rest = &rest[1..],
                "help" => {
                    return Ok(Command::Help(match rest.get(1).map(String::as_str) {
                        Some("certs") => certs::help_text(),
                        _ => help_text(),
                    }))
                }
                "certs" => return certs::parse_args(&rest[1..]),
                other => {
                    return Err(Error::Config(format!(
                        "unknown command {other:?} for \"edgekcm\""
                    )))
                }
            }
        }
    }
    parse_run(rest)
}

/// One flag occurrence after normalisation.
struct Occurrence {
    name: &'static str,
    kind: Kind,
    value: String,
}

/// The command line read as pflag reads it: each flag occurrence, normalised, and the
/// positional arguments; or, for `-V`, the answer at once.
enum Scan {
    Flags(Vec<Occurrence>, Vec<String>),
    Done(Command),
}

fn scan(args: &[String]) -> Result<Scan> {
    let mut occurrences = Vec::new();
    let mut positionals = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_str();
        i += 1;
        if arg == "--" {
            positionals.extend(args[i..].iter().cloned());
            break;
        }
        if let Some(body) = arg.strip_prefix("--") {
            if body.is_empty() || body.starts_with('-') || body.starts_with('=') {
                return Err(Error::Config(format!("bad flag syntax: {arg}")));
            }
            let (given, inline) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (body, None),
            };
            let normalised = given.replace('_', "-");
            let (name, kind) = lookup(&normalised)
                .ok_or_else(|| Error::Config(format!("unknown flag: --{given}")))?;
            let value = match inline {
                Some(v) => v,
                None if kind.is_bool() => "true".to_string(),
                None => match args.get(i) {
                    Some(v) => {
                        i += 1;
                        v.clone()
                    }
                    None => return Err(Error::Config(format!("flag needs an argument: {arg}"))),
                },
            };
            occurrences.push(Occurrence { name, kind, value });
        } else if arg.len() > 1 && arg.starts_with('-') {
            let body = &arg[1..];
            let mut chars = body.chars();
            let c = chars.next().unwrap_or('-');
            let tail = chars.as_str();
            match c {
                'v' => {
                    let value = if let Some(v) = tail.strip_prefix('=') {
                        v.to_string()
                    } else if !tail.is_empty() {
                        tail.to_string()
                    } else {
                        match args.get(i) {
                            Some(v) => {
                                i += 1;
                                v.clone()
                            }
                            None => {
                                return Err(Error::Config(format!(
                                    "flag needs an argument: 'v' in {arg}"
                                )))
                            }
                        }
                    };
                    occurrences.push(Occurrence {
                        name: "v",
                        kind: Kind::Acted {
                            boolean: false,
                            list: false,
                        },
                        value,
                    });
                }
                'V' if tail.is_empty() => return Ok(Scan::Done(Command::Version(version_text()))),
                'h' if tail.is_empty() || tail.starts_with('=') => {
                    occurrences.push(Occurrence {
                        name: "help",
                        kind: Kind::Help,
                        value: tail.strip_prefix('=').unwrap_or("true").to_string(),
                    });
                }
                _ => {
                    return Err(Error::Config(format!(
                        "unknown shorthand flag: '{c}' in {arg}"
                    )))
                }
            }
        } else if !arg.is_empty() {
            positionals.push(arg.to_string());
        }
    }
    Ok(Scan::Flags(occurrences, positionals))
}

/// The occurrences by what is done with them: values and lists handed to argh, the
/// `--concurrent-*` values, the text of flags kept for `/configz`, and the warnings.
struct Sorted {
    values: BTreeMap<&'static str, String>,
    lists: BTreeMap<&'static str, Vec<String>>,
    concurrent: BTreeMap<&'static str, String>,
    given: BTreeMap<&'static str, String>,
    warnings: Vec<String>,
}

fn sort(occurrences: Vec<Occurrence>) -> Result<Sorted> {
    let mut values: BTreeMap<&'static str, String> = BTreeMap::new();
    let mut lists: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
    let mut concurrent: BTreeMap<&'static str, String> = BTreeMap::new();
    let mut given: BTreeMap<&'static str, String> = BTreeMap::new();
    let mut warnings = Vec::new();
    let mut warned = std::collections::BTreeSet::new();
    for o in occurrences {
        if o.kind.is_bool() {
            // A bad boolean is an error even for flags edgekcm ignores, as with pflag.
            bool_value(&o)?;
        }
        match o.kind {
            Kind::Acted { boolean, list } => {
                if list {
                    lists
                        .entry(o.name)
                        .or_default()
                        .extend(config::split_list(&o.value));
                } else if boolean {
                    let v = bool_value(&o)?;
                    values.insert(o.name, v.to_string());
                } else {
                    values.insert(o.name, o.value);
                }
            }
            Kind::Concurrent => {
                concurrent.insert(o.name, o.value);
            }
            Kind::Accepted { ty } => {
                keep(&mut given, &o, ty)?;
                if !flags::READ_AS_GIVEN.contains(&o.name) && warned.insert(o.name) {
                    warnings.push(match o.name {
                        // Read by the secure port (`config::debug`); the rest of what it turns
                        // on upstream (/debug/pprof) is not served.
                        "profiling" => "flag --profiling only turns /debug/flags/v on or off here; edgekcm does not serve /debug/pprof".to_string(),
                        n => format!(
                            "flag --{n} is accepted for compatibility; edgekcm does not act on it yet"
                        ),
                    });
                }
            }
            Kind::Later { ty } => {
                keep(&mut given, &o, ty)?;
                if !flags::READ_AS_GIVEN.contains(&o.name) && warned.insert(o.name) {
                    warnings.push(format!(
                        "flag --{} (from a kube-controller-manager release after 1.28) is accepted for compatibility; edgekcm does not act on it yet",
                        o.name
                    ));
                }
            }
            Kind::Removed { since, .. } => {
                if warned.insert(o.name) {
                    warnings.push(format!(
                        "flag --{} was removed upstream{} and is ignored",
                        o.name,
                        release(since)
                    ));
                }
            }
            Kind::Renamed { to, since } => {
                if warned.insert(o.name) {
                    warnings.push(format!(
                        "flag --{} was removed upstream{}; its value is used for --{to}",
                        o.name,
                        release(since)
                    ));
                }
                values.insert(to, o.value);
            }
            Kind::Help | Kind::Version => {}
        }
    }
    Ok(Sorted {
        values,
        lists,
        concurrent,
        given,
        warnings,
    })
}

fn parse_run(args: &[String]) -> Result<Command> {
    let (occurrences, positionals) = match scan(args)? {
        Scan::Flags(o, p) => (o, p),
        Scan::Done(c) => return Ok(c),
    };
    // Help and version win over everything else, as with cobra.
    for o in &occurrences {
        match o.kind {
            Kind::Help if bool_value(o)? => return Ok(Command::Help(help_text())),
            Kind::Version if o.value == "raw" || bool_value(o)? => {
                return Ok(Command::Version(version_text()))
            }
            _ => {}
        }
    }
    let positionals: Vec<&String> = positionals.iter().filter(|p| !p.is_empty()).collect();
    if !positionals.is_empty() {
        return Err(Error::Config(format!(
            "\"edgekcm\" does not take any arguments, got {positionals:?}"
        )));
    }

    let mut command_line: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
    for o in &occurrences {
        let name = match o.kind {
            Kind::Removed { .. } | Kind::Help | Kind::Version => continue,
            Kind::Renamed { to, .. } => to,
            _ => o.name,
        };
        command_line.entry(name).or_default().push(o.value.clone());
    }
    let Sorted {
        values,
        lists,
        concurrent,
        given,
        warnings,
    } = sort(occurrences)?;

    // Hand the acted-on flags to argh, each exactly once.
    let mut argv: Vec<String> = Vec::new();
    for (name, v) in values {
        argv.push(format!("--{name}"));
        argv.push(v);
    }
    for (name, v) in lists {
        argv.push(format!("--{name}"));
        argv.push(v.join(","));
    }
    let argv_ref: Vec<&str> = argv.iter().map(String::as_str).collect();
    let flags = RunFlags::from_args(&["edgekcm"], &argv_ref).map_err(|e| {
        Error::Config(format!(
            "internal flag table error: {}",
            e.output.trim_end()
        ))
    })?;
    let mut cfg = Config::from_flags(flags, &concurrent, warnings, ControllerSelection::parse)?;
    cfg.given.extend(given);
    cfg.command_line = command_line;
    cfg.node_lifecycle_from_given()?;
    Ok(Command::Run(Box::new(cfg)))
}

/// Check the value of a flag edgekcm does not act on against its Go type, as pflag does when
/// it parses the command line, and keep its text for `/configz`.
fn keep(
    given: &mut BTreeMap<&'static str, String>,
    o: &Occurrence,
    ty: config::FlagType,
) -> Result<()> {
    ty.parse(&o.value).map_err(|e| {
        Error::Config(format!(
            "invalid argument {} for \"--{}\" flag: {e}",
            crate::compat::parse::go_quote(o.value.as_bytes()),
            o.name
        ))
    })?;
    config::record_flag(given, o.name, ty, &o.value);
    Ok(())
}

/// ` (kube-controller-manager 1.24)`, or nothing when the release is not recorded.
fn release(since: &str) -> String {
    if since.is_empty() {
        String::new()
    } else {
        format!(" (kube-controller-manager {since})")
    }
}

fn bool_value(o: &Occurrence) -> Result<bool> {
    crate::compat::parse::parse_go_bool(&o.value).map_err(|e| {
        Error::Config(format!(
            "invalid argument {:?} for \"--{}\" flag: {e}",
            o.value, o.name
        ))
    })
}

/// `--version` output.
pub fn version_text() -> String {
    format!(
        "edgekcm {} (kube-controller-manager v1.37 compatible, for kube-apiserver v1.34 to v1.37)",
        env!("CARGO_PKG_VERSION")
    )
}
