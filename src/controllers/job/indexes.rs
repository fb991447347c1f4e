//! Completion indexes of Indexed Jobs: the `batch.kubernetes.io/job-completion-index`
//! annotation of a pod, and sets of indexes as ordered intervals written in upstream's
//! compressed form (`1,3-5,7`: two neighbours are written `3,4`, three or more `3-5`).

use crate::obj;
use serde_json::Value;
use std::collections::BTreeSet;

pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
pub const COMPLETION_INDEX_ENV: &str = "JOB_COMPLETION_INDEX";

/// The pod's completion index; None when absent, not a number or negative.
pub fn completion_index(pod: &Value) -> Option<usize> {
    obj::annotation(pod, COMPLETION_INDEX)?
        .parse::<i64>()
        .ok()
        .and_then(|i| usize::try_from(i).ok())
}

/// The index of a pod that counts for a job of `completions`: known and below it.
pub fn valid_index(pod: &Value, completions: usize) -> Option<usize> {
    completion_index(pod).filter(|i| *i < completions)
}

/// Ordered, disjoint, non-adjacent closed intervals of indexes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Intervals(pub Vec<(usize, usize)>);

impl Intervals {
    /// Parse the compressed form, dropping what is not below `completions` (upstream's
    /// `parseIndexesFromString`: a malformed interval is skipped).
    pub fn parse(s: &str, completions: usize) -> Intervals {
        let mut out: Vec<(usize, usize)> = Vec::new();
        if s.is_empty() {
            return Intervals(out);
        }
        for part in s.split(',') {
            let mut limits = part.split('-');
            let Some(first) = limits.next().and_then(|f| f.parse::<usize>().ok()) else {
                log::info!("job-controller: corrupted indexes interval {part:?}, ignoring");
                continue;
            };
            if first >= completions {
                break;
            }
            let last = match limits.next() {
                Some(l) => match l.parse::<usize>() {
                    Ok(l) => l.min(completions - 1),
                    Err(_) => {
                        log::info!("job-controller: corrupted indexes interval {part:?}, ignoring");
                        continue;
                    }
                },
                None => first,
            };
            match out.last_mut() {
                Some(prev) if prev.1 + 1 == first => prev.1 = last,
                _ => out.push((first, last)),
            }
        }
        Intervals(out)
    }

    pub fn total(&self) -> usize {
        self.0.iter().map(|(f, l)| l - f + 1).sum()
    }

    pub fn has(&self, ix: usize) -> bool {
        let pos = self.0.partition_point(|(_, last)| *last < ix);
        self.0.get(pos).is_some_and(|(first, _)| *first <= ix)
    }

    /// These intervals merged with `other` (upstream's `merge`).
    pub fn merge(&self, other: &Intervals) -> Intervals {
        let mut all: Vec<(usize, usize)> = self.0.iter().chain(other.0.iter()).copied().collect();
        crate::sort::sort(&mut all[..]);
        let mut out: Vec<(usize, usize)> = Vec::new();
        for (f, l) in all {
            match out.last_mut() {
                Some(prev) if f <= prev.1 + 1 => prev.1 = prev.1.max(l),
                _ => out.push((f, l)),
            }
        }
        Intervals(out)
    }

    pub fn with_indexes(&self, ixs: impl IntoIterator<Item = usize>) -> Intervals {
        self.merge(&Intervals(ixs.into_iter().map(|i| (i, i)).collect()))
    }
}

impl std::fmt::Display for Intervals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (n, (first, last)) in self.0.iter().enumerate() {
            if n > 0 {
                f.write_str(",")?;
            }
            write!(f, "{first}")?;
            if last > first {
                let sep = if *last == first + 1 { ',' } else { '-' };
                write!(f, "{sep}{last}")?;
            }
        }
        Ok(())
    }
}

/// The first `count` indexes below `completions` that are neither succeeded nor held by an
/// active pod (upstream's `firstPendingIndexes`).
pub fn first_pending(
    succeeded: &Intervals,
    active: &BTreeSet<usize>,
    count: usize,
    completions: usize,
) -> Vec<usize> {
    let taken = succeeded.with_indexes(active.iter().copied());
    let mut out = Vec::with_capacity(count);
    let mut candidate = 0;
    for &(first, last) in &taken.0 {
        while candidate < completions && out.len() < count && candidate < first {
            out.push(candidate);
            candidate += 1;
        }
        if candidate < last + 1 {
            candidate = last + 1;
        }
    }
    while candidate < completions && out.len() < count {
        out.push(candidate);
        candidate += 1;
    }
    out
}

/// `generateName` of the pod of an index: `<job>-<index>-`, the job name cut so that the
/// prefix fits upstream's 58-character limit of generated names.
pub fn generate_name(job: &str, index: usize) -> String {
    const MAX_GENERATED_NAME_LENGTH: usize = 58;
    let tail = format!("-{index}-");
    let prefix = format!("{job}{tail}");
    if prefix.len() > MAX_GENERATED_NAME_LENGTH {
        let keep = MAX_GENERATED_NAME_LENGTH.saturating_sub(tail.len());
        let cut = job
            .char_indices()
            .nth(keep)
            .map(|(i, _)| i)
            .unwrap_or(job.len());
        format!("{}{tail}", &job[..cut])
    } else {
        prefix
    }
}
