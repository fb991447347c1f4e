//! What a container "does": the stand-in runs nothing, it reads the container's command and
//! arguments and recognises the few shell snippets upstream's e2e Job fixtures use
//! (`exit N`, `exit $(( $RANDOM / 16384 ))`, the odd/even index test, the marker-file tests on
//! `/data`, `sleep N`). Anything else (the pause image, servers, `sleep 1000000`) runs until
//! its pod is deleted.

use std::collections::HashSet;
use std::time::Duration;

/// The outcome of one run of a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Run {
    /// Ends with this exit code after `after`.
    Exit { code: i32, after: Duration },
    /// Runs until the pod is deleted.
    Forever,
}

/// One container run: `text` is its command and arguments joined by spaces, `index` the
/// pod's completion index (if any), `markers` the marker files already on its `/data`
/// volume (the stand-in keeps them per volume); a run may add one.
pub fn run(text: &str, index: Option<&str>, markers: &mut HashSet<String>) -> Run {
    let quick = Duration::from_millis(500);
    let exit = |code| Run::Exit { code, after: quick };
    let idx = index.unwrap_or("");
    if text.contains("-r /data/foo") {
        let marker = if text.contains("/data/foo-$JOB_COMPLETION_INDEX") {
            format!("foo-{idx}")
        } else {
            "foo".to_string()
        };
        if !markers.insert(marker) {
            return exit(0);
        }
        if text.contains("sleep ") {
            return Run::Forever;
        }
        return exit(last_exit_code(text).unwrap_or(1));
    }
    if text.contains("JOB_COMPLETION_INDEX} % 2") {
        let odd = idx.parse::<u64>().map(|i| i % 2 == 1).unwrap_or(false);
        return exit(i32::from(odd));
    }
    if text.contains("$RANDOM / 16384") {
        return exit(i32::from(fastrand::bool()));
    }
    let words: Vec<&str> = text.split_whitespace().collect();
    match words.as_slice() {
        [.., "exit", code] => code.parse().map(exit).unwrap_or(Run::Forever),
        [.., "sleep", secs] => match secs.parse::<u64>() {
            Ok(s) if s < 3600 => Run::Exit {
                code: 0,
                after: Duration::from_secs(s),
            },
            _ => Run::Forever,
        },
        _ => Run::Forever,
    }
}

/// How a running container ends on SIGTERM: a `trap ... SIGTERM` handler runs (its `sleep N`
/// takes N seconds, its `exit N` is the code), else the process dies at once with 137 (the
/// shell's `sleep` loops and servers of the fixtures install no handler).
pub fn on_term(text: &str) -> (Duration, i32) {
    if !text.contains("SIGTERM") {
        return (Duration::ZERO, 137);
    }
    let words: Vec<&str> = text.split_whitespace().collect();
    let sleep = words
        .windows(2)
        .find(|w| w[0] == "sleep")
        .and_then(|w| w[1].parse().ok())
        .unwrap_or(0);
    let code = words
        .windows(2)
        .find(|w| w[0] == "exit")
        .and_then(|w| w[1].parse().ok())
        .unwrap_or(143);
    (Duration::from_secs(sleep), code)
}

/// The code of the last `exit N` in a snippet.
fn last_exit_code(text: &str) -> Option<i32> {
    let words: Vec<&str> = text.split_whitespace().collect();
    words
        .windows(2)
        .rev()
        .find(|w| w[0] == "exit")
        .and_then(|w| w[1].parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn once(text: &str, index: Option<&str>) -> Run {
        run(text, index, &mut HashSet::new())
    }

    fn code(r: Run) -> Option<i32> {
        match r {
            Run::Exit { code, .. } => Some(code),
            Run::Forever => None,
        }
    }

    #[test]
    fn the_fixtures() {
        assert_eq!(code(once("/bin/sh -c exit 1", None)), Some(1));
        assert_eq!(code(once("/bin/sh -c exit 0", None)), Some(0));
        assert_eq!(once("sleep 1000000", None), Run::Forever);
        assert_eq!(once("", None), Run::Forever);
        let odd =
            "sh -c if [ $(expr ${JOB_COMPLETION_INDEX} % 2) -ne 0 ]; then exit 1 else exit 0 fi";
        assert_eq!(code(once(odd, Some("3"))), Some(1));
        assert_eq!(code(once(odd, Some("2"))), Some(0));
        let random = code(once("/bin/sh -c exit $(( $RANDOM / 16384 ))", None)).unwrap();
        assert!(random == 0 || random == 1);
    }

    #[test]
    fn sigterm_handlers() {
        let trap =
            "/bin/sh -c _term(){ sleep 5 exit 143 } trap _term SIGTERM while true; do sleep 1 done";
        assert_eq!(on_term(trap), (Duration::from_secs(5), 143));
        assert_eq!(on_term("sleep 1000000"), (Duration::ZERO, 137));
    }

    #[test]
    fn marker_files_make_the_second_run_differ() {
        let mut m = HashSet::new();
        let fail_once =
            "/bin/sh -c if [[ -r /data/foo ]] then exit 0 else touch /data/foo exit 1 fi";
        assert_eq!(code(run(fail_once, None, &mut m)), Some(1));
        assert_eq!(code(run(fail_once, None, &mut m)), Some(0));
        let per_index = "/bin/sh -c if [[ -r /data/foo-$JOB_COMPLETION_INDEX ]] then exit 0 \
                         else touch /data/foo-$JOB_COMPLETION_INDEX exit 42 fi";
        assert_eq!(code(run(per_index, Some("1"), &mut m)), Some(42));
        assert_eq!(code(run(per_index, Some("2"), &mut m)), Some(42));
        assert_eq!(code(run(per_index, Some("1"), &mut m)), Some(0));
        let hang = "/bin/sh -c if [[ -r /data/foo-$JOB_COMPLETION_INDEX ]] then exit 0 \
                    else touch /data/foo-$JOB_COMPLETION_INDEX sleep 1000000 fi";
        let mut m = HashSet::new();
        assert_eq!(run(hang, Some("0"), &mut m), Run::Forever);
        assert_eq!(code(run(hang, Some("0"), &mut m)), Some(0));
    }
}
