//! The Kubernetes minor edgekcm emulates: `--emulated-version` and
//! `--min-compatibility-version` read as kube-controller-manager v1.37 reads them (its
//! component-base compatibility registry, with the single component `kube`), and the version
//! window: which minor to follow for the kube-apiserver `/version` reports.
//!
//! edgekcm is built as a v1.37 controller manager. Like upstream v1.37 it can emulate the three
//! minors before it (1.34 to 1.37): feature-gate defaults, which controllers `*` starts. Unlike
//! upstream, which always emulates its own minor unless told otherwise, edgekcm follows the
//! API server it finds at start: kube-apiserver v1.36 or v1.37 gets v1.37, v1.34 or v1.35 gets
//! its own minor, anything else is refused unless `--emulated-version` is given.

use super::{gates, Config, RunFlags};
use crate::error::Error;

/// Kubernetes 1.x minor of the binary: what it emulates by default.
pub const BINARY_MINOR: u32 = 37;
/// The oldest minor it can emulate (upstream: the binary's minor less three, at least 1.31).
pub const FLOOR_MINOR: u32 = BINARY_MINOR - 3;

/// A `major.minor` version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct MajorMinor {
    pub major: u32,
    pub minor: u32,
}

impl MajorMinor {
    pub const fn kube(minor: u32) -> Self {
        MajorMinor { major: 1, minor }
    }
    /// One minor less, as upstream's `SubtractMinor(1)` (1.0 stays 1.0).
    fn previous(self) -> Self {
        MajorMinor {
            major: self.major,
            minor: self.minor.saturating_sub(1),
        }
    }
}

impl std::fmt::Display for MajorMinor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// `--emulated-version` and `--min-compatibility-version` as given (each a string slice:
/// comma separated, repeats append), read but not yet checked against the window.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VersionFlags {
    pub emulated: Option<MajorMinor>,
    pub min_compatibility: Option<MajorMinor>,
}

/// What the process emulates, and why (one line for the start-up log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Emulation {
    pub version: MajorMinor,
    pub min_compatibility: MajorMinor,
    pub why: String,
}

impl Default for Emulation {
    fn default() -> Self {
        Emulation {
            version: MajorMinor::kube(BINARY_MINOR),
            min_compatibility: MajorMinor::kube(BINARY_MINOR - 1),
            why: "the binary's own version".to_string(),
        }
    }
}

/// The components of a version text as apimachinery's `version.Parse` reads it: an optional
/// `v`, at least two dot-separated numbers without leading zeros, then an optional
/// pre-release and build suffix. Returns (major, minor, patch).
fn parse_version(text: &str) -> Result<(u32, u32, u32), String> {
    let s = text.trim();
    let s = s.strip_prefix('v').unwrap_or(s);
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (numbers, extra) = s.split_at(end);
    if numbers.is_empty() || numbers.starts_with('.') || numbers.ends_with('.') {
        return Err(format!("could not parse {text:?} as version"));
    }
    let extra_ok = extra.is_empty()
        || ((extra.starts_with('-') || extra.starts_with('+'))
            && extra[1..]
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-.+".contains(c))
            && extra.len() > 1);
    if !extra_ok {
        return Err(format!(
            "could not parse pre-release/metadata ({extra}) in version {text:?}"
        ));
    }
    let comps: Vec<&str> = numbers.split('.').collect();
    if comps.len() < 2 {
        return Err(format!("illegal version string {text:?}"));
    }
    let mut nums = Vec::with_capacity(comps.len());
    for c in &comps {
        if c.len() > 1 && c.starts_with('0') {
            return Err(format!(
                "illegal zero-prefixed version component {c:?} in {text:?}"
            ));
        }
        let n: u32 = c.parse().map_err(|_| {
            format!(
                "illegal non-numeric version component {c:?} in {text:?}: strconv.ParseUint: parsing {c:?}: value out of range"
            )
        })?;
        nums.push(n);
    }
    Ok((nums[0], nums[1], nums.get(2).copied().unwrap_or(0)))
}

/// One of the two version flags (its occurrences, each comma separated), as upstream's
/// `toVersionMap`: `1.35` or `kube=1.35`; a patch, another component or a second version
/// for `kube` are errors.
pub fn parse_version_flag(values: &[String]) -> Result<Option<MajorMinor>, String> {
    let mut seen: Vec<(&str, MajorMinor, &str)> = Vec::new();
    for item in values
        .iter()
        .filter(|v| !v.is_empty())
        .flat_map(|v| v.split(','))
    {
        let (component, text) = match item.split_once('=') {
            Some((k, v)) => (k.trim(), v.trim()),
            None => ("kube", item),
        };
        let (major, minor, patch) = parse_version(text)?;
        if patch != 0 {
            return Err(format!(
                "patch version not allowed, got: {component}={major}.{minor}.{patch}"
            ));
        }
        if let Some((_, _, prev)) = seen.iter().find(|(c, _, _)| *c == component) {
            return Err(format!(
                "duplicate version flag, {component}={} and {component}={}",
                trim_version(prev),
                trim_version(text)
            ));
        }
        seen.push((component, MajorMinor { major, minor }, text));
    }
    if let Some((c, _, _)) = seen.iter().find(|(c, _, _)| *c != "kube") {
        return Err(format!("component not registered: {c}"));
    }
    Ok(seen.first().map(|(_, v, _)| *v))
}

/// The version as upstream prints a parsed one (without the `v`).
fn trim_version(text: &str) -> &str {
    let t = text.trim();
    t.strip_prefix('v').unwrap_or(t)
}

/// Upstream's range checks of the effective version, in its words; both are reported.
pub fn validate(emulated: MajorMinor, min_compatibility: MajorMinor) -> Result<(), String> {
    let floor = MajorMinor::kube(FLOOR_MINOR);
    let binary = MajorMinor::kube(BINARY_MINOR);
    let mut errs = Vec::new();
    if emulated > binary || emulated < floor {
        errs.push(format!(
            "emulation version {emulated} is not between [{floor}, {binary}.0]"
        ));
    }
    if min_compatibility > emulated || min_compatibility < floor {
        errs.push(format!(
            "minCompatibilityVersion version {min_compatibility} is not between [{floor}, {emulated}]"
        ));
    }
    match errs.len() {
        0 => Ok(()),
        1 => Err(errs.remove(0)),
        _ => Err(format!("[{}]", errs.join(", "))),
    }
}

/// The default `--min-compatibility-version` for an emulated version: one minor less, not
/// under the floor.
pub fn default_min_compatibility(emulated: MajorMinor) -> MajorMinor {
    emulated.previous().max(MajorMinor::kube(FLOOR_MINOR))
}

impl VersionFlags {
    /// The effective versions the flags alone give (no API server asked): the binary's minor
    /// unless `--emulated-version` says otherwise; checked as upstream checks them.
    pub fn effective(&self) -> Result<(MajorMinor, MajorMinor), String> {
        let emulated = self.emulated.unwrap_or(MajorMinor::kube(BINARY_MINOR));
        let mc = self
            .min_compatibility
            .unwrap_or_else(|| default_min_compatibility(emulated));
        validate(emulated, mc)?;
        Ok((emulated, mc))
    }
}

/// The major and minor of a kube-apiserver `/version` answer: its `major` and `minor` fields
/// (`"37+"` counts as 37), else its `gitVersion`.
pub fn server_version(body: &serde_json::Value) -> Option<MajorMinor> {
    let digits = |k: &str| -> Option<u32> {
        let s = body[k].as_str()?;
        let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        s[..end].parse().ok()
    };
    if let (Some(major), Some(minor)) = (digits("major"), digits("minor")) {
        return Some(MajorMinor { major, minor });
    }
    let (major, minor, _) = parse_version(body["gitVersion"].as_str()?).ok()?;
    Some(MajorMinor { major, minor })
}

/// The window edgekcm serves, for messages: `v1.34 to v1.37`.
pub fn window_text() -> String {
    format!("v1.{FLOOR_MINOR} to v1.{BINARY_MINOR}")
}

/// Which minor to emulate for an API server of `server` (`shown` is its `gitVersion`, for
/// messages; `server` None when its `/version` could not be read), given the version flags.
pub fn decide(
    server: Option<MajorMinor>,
    shown: &str,
    flags: &VersionFlags,
) -> Result<Emulation, String> {
    let floor = MajorMinor::kube(FLOOR_MINOR);
    let binary = MajorMinor::kube(BINARY_MINOR);
    let in_window = server.filter(|s| *s >= floor && *s <= binary);
    let (version, why) = match (flags.emulated, in_window) {
        (Some(v), Some(_)) => (v, format!("--emulated-version={v} (kube-apiserver {shown})")),
        (Some(v), None) => (
            v,
            format!(
                "--emulated-version={v}; kube-apiserver {shown} is outside the versions edgekcm follows by itself ({})",
                window_text()
            ),
        ),
        (None, Some(s)) if s.minor + 1 >= BINARY_MINOR => (
            binary,
            format!("kube-apiserver {shown} is served by a v{binary} controller manager"),
        ),
        (None, Some(s)) => (
            s,
            format!("kube-apiserver {shown} is older than v{}: --emulated-version defaults to its minor", binary.previous()),
        ),
        (None, None) => {
            return Err(format!(
                "kube-apiserver {shown} is outside the versions edgekcm serves ({}); give --emulated-version=1.{FLOOR_MINOR}..1.{BINARY_MINOR} to run against it anyway",
                window_text()
            ))
        }
    };
    let min_compatibility = flags
        .min_compatibility
        .unwrap_or_else(|| default_min_compatibility(version));
    validate(version, min_compatibility)?;
    Ok(Emulation {
        version,
        min_compatibility,
        why,
    })
}

impl Emulation {
    /// The start-up line.
    pub fn line(&self) -> String {
        format!(
            "emulating Kubernetes v{} (min compatibility v{}): {}",
            self.version, self.min_compatibility, self.why
        )
    }
}

impl Config {
    /// Follow another emulated version: the feature gates are resolved again at it (what
    /// was set on the command line is checked again there, as upstream checks it).
    pub fn emulate(&mut self, e: Emulation) -> crate::error::Result<()> {
        self.gates = gates::FeatureGates::resolve(&self.gates.set, e.version, e.min_compatibility)
            .map_err(Error::Config)?;
        self.emulation = e;
        Ok(())
    }
}

/// `--emulated-version`, `--min-compatibility-version` and `--feature-gates`, checked as
/// upstream checks them when it parses its flags (at the versions the flags give; the API
/// server's version may change the emulated version at start, see `Config::emulate`).
pub(super) fn from_flags(c: &mut Config, f: &mut RunFlags) -> crate::error::Result<()> {
    let one = |v: Option<String>| v.map(|v| vec![v]).unwrap_or_default();
    c.version_flags = VersionFlags {
        emulated: parse_version_flag(&one(f.emulated_version.take())).map_err(Error::Config)?,
        min_compatibility: parse_version_flag(&one(f.min_compatibility_version.take()))
            .map_err(Error::Config)?,
    };
    let (emulated, mc) = c.version_flags.effective().map_err(Error::Config)?;
    let set = gates::parse_flag(&one(f.feature_gates.take())).map_err(Error::Config)?;
    let resolved = gates::FeatureGates::resolve(&set, emulated, mc);
    c.gates = match resolved {
        Ok(g) => g,
        // Without --emulated-version the API server decides the version at start: a value
        // that some minor of the window takes waits for that check (`Config::emulate`).
        Err(e) if c.version_flags.emulated.is_none() => (FLOOR_MINOR..BINARY_MINOR)
            .rev()
            .map(MajorMinor::kube)
            .find_map(|v| {
                let mc = c
                    .version_flags
                    .min_compatibility
                    .unwrap_or_else(|| default_min_compatibility(v));
                gates::FeatureGates::resolve(&set, v, mc).ok()
            })
            .ok_or(Error::Config(e))?,
        Err(e) => return Err(Error::Config(e)),
    };
    if c.version_flags.emulated.is_some() {
        c.emulation = Emulation {
            version: emulated,
            min_compatibility: mc,
            why: "--emulated-version".to_string(),
        };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flag(s: &str) -> Result<Option<MajorMinor>, String> {
        parse_version_flag(&[s.to_string()])
    }

    #[test]
    fn flag_syntax_as_upstream() {
        assert_eq!(flag("1.35"), Ok(Some(MajorMinor::kube(35))));
        assert_eq!(flag("kube=1.35"), Ok(Some(MajorMinor::kube(35))));
        assert_eq!(flag(" kube = v1.36 "), Ok(Some(MajorMinor::kube(36))));
        assert_eq!(flag("1.35.0"), Ok(Some(MajorMinor::kube(35))));
        assert_eq!(flag(""), Ok(None));
        assert_eq!(
            flag("kube=1.35.1").unwrap_err(),
            "patch version not allowed, got: kube=1.35.1"
        );
        assert_eq!(
            flag("foo=1.35").unwrap_err(),
            "component not registered: foo"
        );
        assert_eq!(
            flag("1.35,1.36").unwrap_err(),
            "duplicate version flag, kube=1.35 and kube=1.36"
        );
        assert_eq!(
            parse_version_flag(&["kube=1.35".into(), "kube=1.36".into()]).unwrap_err(),
            "duplicate version flag, kube=1.35 and kube=1.36"
        );
        assert_eq!(
            flag("abc").unwrap_err(),
            "could not parse \"abc\" as version"
        );
        assert_eq!(flag("1").unwrap_err(), "illegal version string \"1\"");
        assert_eq!(
            flag("1.035").unwrap_err(),
            "illegal zero-prefixed version component \"035\" in \"1.035\""
        );
    }

    #[test]
    fn range_as_upstream() {
        let f = |e: Option<u32>, m: Option<u32>| VersionFlags {
            emulated: e.map(MajorMinor::kube),
            min_compatibility: m.map(MajorMinor::kube),
        };
        assert_eq!(
            f(None, None).effective(),
            Ok((MajorMinor::kube(37), MajorMinor::kube(36)))
        );
        assert_eq!(
            f(Some(34), None).effective(),
            Ok((MajorMinor::kube(34), MajorMinor::kube(34)))
        );
        assert_eq!(
            f(Some(33), None).effective().unwrap_err(),
            "[emulation version 1.33 is not between [1.34, 1.37.0], minCompatibilityVersion version 1.34 is not between [1.34, 1.33]]"
        );
        assert_eq!(
            f(Some(38), None).effective().unwrap_err(),
            "emulation version 1.38 is not between [1.34, 1.37.0]"
        );
        assert_eq!(
            f(Some(35), Some(36)).effective().unwrap_err(),
            "minCompatibilityVersion version 1.36 is not between [1.34, 1.35]"
        );
    }

    #[test]
    fn reads_server_versions() {
        let v = |j: serde_json::Value| server_version(&j);
        assert_eq!(
            v(serde_json::json!({"major": "1", "minor": "37", "gitVersion": "v1.37.2"})),
            Some(MajorMinor::kube(37))
        );
        assert_eq!(
            v(serde_json::json!({"major": "1", "minor": "35+"})),
            Some(MajorMinor::kube(35))
        );
        assert_eq!(
            v(serde_json::json!({"major": "", "minor": "", "gitVersion": "v1.34.4-gke.1"})),
            Some(MajorMinor::kube(34))
        );
        assert_eq!(v(serde_json::json!({})), None);
    }

    #[test]
    fn the_window() {
        let none = VersionFlags::default();
        let at = |m: u32| decide(Some(MajorMinor::kube(m)), &format!("v1.{m}.1"), &none);
        assert_eq!(at(37).unwrap().version, MajorMinor::kube(37));
        assert_eq!(at(36).unwrap().version, MajorMinor::kube(37));
        assert_eq!(at(35).unwrap().version, MajorMinor::kube(35));
        assert_eq!(at(35).unwrap().min_compatibility, MajorMinor::kube(34));
        assert_eq!(at(34).unwrap().version, MajorMinor::kube(34));
        assert_eq!(at(34).unwrap().min_compatibility, MajorMinor::kube(34));
        for m in [28, 33, 38] {
            let e = at(m).unwrap_err();
            assert!(
                e.starts_with(&format!("kube-apiserver v1.{m}.1 is outside the versions edgekcm serves (v1.34 to v1.37)")),
                "{e}"
            );
        }
        assert!(decide(None, "(unknown)", &none).is_err());
        let given = VersionFlags {
            emulated: Some(MajorMinor::kube(36)),
            min_compatibility: None,
        };
        for m in [33, 35, 37, 40] {
            let e = decide(Some(MajorMinor::kube(m)), "x", &given).unwrap();
            assert_eq!(e.version, MajorMinor::kube(36));
            assert!(e.why.starts_with("--emulated-version=1.36"), "{}", e.why);
        }
        let line = at(35).unwrap().line();
        assert_eq!(
            line,
            "emulating Kubernetes v1.35 (min compatibility v1.34): kube-apiserver v1.35.1 is older than v1.36: --emulated-version defaults to its minor"
        );
        let bad = VersionFlags {
            emulated: None,
            min_compatibility: Some(MajorMinor::kube(36)),
        };
        assert_eq!(
            decide(Some(MajorMinor::kube(35)), "v1.35.0", &bad).unwrap_err(),
            "minCompatibilityVersion version 1.36 is not between [1.34, 1.35]"
        );
    }
}
