//! From a metric's proposal to the replica count written: stabilization over recent
//! recommendations, min/max replicas, the scale-up limit of HPAs without `behavior`, and the
//! rate policies of those with one. What upstream keeps in memory per HPA (recent
//! recommendations, recent scale changes) is [`History`]; like upstream's, it starts empty
//! after a restart.

use super::spec::{Behavior, Rules, Select};
use std::time::{Duration, SystemTime};

/// A condition the normalisation sets: (reason, message).
pub type Cond = (&'static str, &'static str);

#[derive(Debug, Clone, Copy)]
struct Recommendation {
    replicas: i32,
    at: SystemTime,
}

#[derive(Debug, Clone, Copy)]
struct ScaleEvent {
    change: i32,
    at: SystemTime,
    outdated: bool,
}

/// One HPA's recent recommendations and scale changes.
#[derive(Debug, Default, Clone)]
pub struct History {
    recommendations: Vec<Recommendation>,
    up: Vec<ScaleEvent>,
    down: Vec<ScaleEvent>,
}

fn secs(s: i32) -> Duration {
    Duration::from_secs(u64::try_from(s).unwrap_or(0))
}

impl History {
    /// `recordInitialRecommendation`: the current size, once.
    pub fn record_initial(&mut self, current: i32, now: SystemTime) {
        if self.recommendations.is_empty() {
            self.recommendations.push(Recommendation {
                replicas: current,
                at: now,
            });
        }
    }

    fn record(&mut self, old_index: Option<usize>, replicas: i32, now: SystemTime) {
        let r = Recommendation { replicas, at: now };
        match old_index {
            Some(i) => self.recommendations[i] = r,
            None => self.recommendations.push(r),
        }
    }

    /// `stabilizeRecommendation` (no `behavior`): the highest recommendation within the
    /// downscale window.
    fn stabilize(&mut self, desired: i32, window: Duration, now: SystemTime) -> i32 {
        let cutoff = now.checked_sub(window).unwrap_or(SystemTime::UNIX_EPOCH);
        let mut max = desired;
        let mut old = None;
        for (i, r) in self.recommendations.iter().enumerate() {
            if r.at < cutoff {
                old = Some(i);
            } else if r.replicas > max {
                max = r.replicas;
            }
        }
        self.record(old, desired, now);
        max
    }

    /// `stabilizeRecommendationWithBehaviors`.
    fn stabilize_with(
        &mut self,
        b: &Behavior,
        current: i32,
        desired: i32,
        now: SystemTime,
    ) -> (i32, &'static str, &'static str) {
        let up_cutoff = now
            .checked_sub(secs(b.up.stabilization_seconds))
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let down_cutoff = now
            .checked_sub(secs(b.down.stabilization_seconds))
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let (mut up, mut down) = (desired, desired);
        let mut old = None;
        for (i, r) in self.recommendations.iter().enumerate() {
            if r.at > up_cutoff {
                up = up.min(r.replicas);
            }
            if r.at > down_cutoff {
                down = down.max(r.replicas);
            }
            if r.at < up_cutoff && r.at < down_cutoff {
                old = Some(i);
            }
        }
        let recommendation = current.max(up).min(down);
        self.record(old, desired, now);
        if desired >= current {
            (
                recommendation,
                "ScaleUpStabilized",
                "recent recommendations were lower than current one, applying the lowest recent recommendation",
            )
        } else {
            (
                recommendation,
                "ScaleDownStabilized",
                "recent recommendations were higher than current one, applying the highest recent recommendation",
            )
        }
    }

    /// `storeScaleEvent`: remember a change made under `behavior`.
    pub fn store_scale_event(&mut self, b: &Behavior, prev: i32, new: i32, now: SystemTime) {
        let (events, rules, change) = if new > prev {
            (&mut self.up, &b.up, new - prev)
        } else {
            (&mut self.down, &b.down, prev - new)
        };
        let longest = rules
            .policies
            .iter()
            .map(|p| p.period_seconds)
            .max()
            .unwrap_or(0)
            .max(0);
        let cutoff = now
            .checked_sub(secs(longest))
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let mut old = None;
        for (i, e) in events.iter_mut().enumerate() {
            if e.at < cutoff {
                e.outdated = true;
            }
            if e.outdated {
                old = Some(i);
            }
        }
        let e = ScaleEvent {
            change,
            at: now,
            outdated: false,
        };
        match old {
            Some(i) => events[i] = e,
            None => events.push(e),
        }
    }
}

fn changes_in_period(period_seconds: i32, events: &[ScaleEvent], now: SystemTime) -> i32 {
    let cutoff = now
        .checked_sub(secs(period_seconds))
        .unwrap_or(SystemTime::UNIX_EPOCH);
    events
        .iter()
        .filter(|e| e.at > cutoff)
        .map(|e| e.change)
        .sum()
}

fn scale_up_limit(current: i32, h: &History, rules: &Rules, now: SystemTime) -> i32 {
    let min_change = match rules.select {
        Select::Disabled => return current,
        Select::Min => true,
        Select::Max => false,
    };
    let mut result = if min_change { i32::MAX } else { i32::MIN };
    for p in &rules.policies {
        let start = current - changes_in_period(p.period_seconds, &h.up, now)
            + changes_in_period(p.period_seconds, &h.down, now);
        let proposed = if p.percent {
            (start as f64 * (1.0 + p.value as f64 / 100.0)).ceil() as i32
        } else {
            start + p.value
        };
        result = if min_change {
            result.min(proposed)
        } else {
            result.max(proposed)
        };
    }
    result
}

fn scale_down_limit(current: i32, h: &History, rules: &Rules, now: SystemTime) -> i32 {
    let min_change = match rules.select {
        Select::Disabled => return current,
        Select::Min => true,
        Select::Max => false,
    };
    let mut result = if min_change { i32::MIN } else { i32::MAX };
    for p in &rules.policies {
        let start = current - changes_in_period(p.period_seconds, &h.up, now)
            + changes_in_period(p.period_seconds, &h.down, now);
        let proposed = if p.percent {
            (start as f64 * (1.0 - p.value as f64 / 100.0)) as i32
        } else {
            start - p.value
        };
        result = if min_change {
            result.max(proposed)
        } else {
            result.min(proposed)
        };
    }
    result
}

/// The replica count to write and the conditions it sets: `AbleToScale` and `ScalingLimited`
/// (true when the limits changed the recommendation).
pub struct Normalized {
    pub replicas: i32,
    pub able: Cond,
    pub limited: bool,
    pub limit: Cond,
}

const READY: Cond = ("ReadyForNewScale", "recommended size matches current size");
const WITHIN: Cond = (
    "DesiredWithinRange",
    "the desired count is within the acceptable range",
);

/// `normalizeDesiredReplicas` (no `behavior`).
pub fn normalize(
    h: &mut History,
    window: Duration,
    current: i32,
    desired: i32,
    min: i32,
    max: i32,
    now: SystemTime,
) -> Normalized {
    let stabilized = h.stabilize(desired, window, now);
    let able = if stabilized != desired {
        (
            "ScaleDownStabilized",
            "recent recommendations were higher than current one, applying the highest recent recommendation",
        )
    } else {
        READY
    };
    let up_limit = ((2.0 * current as f64).max(4.0)) as i32;
    let (max_allowed, over) = if max > up_limit {
        (
            up_limit,
            (
                "ScaleUpLimit",
                "the desired replica count is increasing faster than the maximum scale rate",
            ),
        )
    } else {
        (
            max,
            (
                "TooManyReplicas",
                "the desired replica count is more than the maximum replica count",
            ),
        )
    };
    let (replicas, limit) = if stabilized < min {
        (
            min,
            (
                "TooFewReplicas",
                "the desired replica count is less than the minimum replica count",
            ),
        )
    } else if stabilized > max_allowed {
        (max_allowed, over)
    } else {
        (stabilized, WITHIN)
    };
    Normalized {
        replicas,
        able,
        limited: replicas != stabilized,
        limit,
    }
}

/// `normalizeDesiredReplicasWithBehaviors`.
pub fn normalize_with(
    h: &mut History,
    b: &Behavior,
    current: i32,
    desired: i32,
    min: i32,
    max: i32,
    now: SystemTime,
) -> Normalized {
    let (stabilized, reason, message) = h.stabilize_with(b, current, desired, now);
    let able = if stabilized != desired {
        (reason, message)
    } else {
        READY
    };
    let (replicas, limit) = rate_limited(h, b, current, stabilized, min, max, now);
    Normalized {
        replicas,
        able,
        limited: replicas != stabilized,
        limit,
    }
}

/// `convertDesiredReplicasWithBehaviorRate`.
fn rate_limited(
    h: &History,
    b: &Behavior,
    current: i32,
    desired: i32,
    min: i32,
    max: i32,
    now: SystemTime,
) -> (i32, Cond) {
    if desired > current {
        let limit = scale_up_limit(current, h, &b.up, now).max(current);
        let (allowed, cond) = if max > limit {
            (
                limit,
                (
                    "ScaleUpLimit",
                    "the desired replica count is increasing faster than the maximum scale rate",
                ),
            )
        } else {
            (
                max,
                (
                    "TooManyReplicas",
                    "the desired replica count is more than the maximum replica count",
                ),
            )
        };
        if desired > allowed {
            return (allowed, cond);
        }
    } else if desired < current {
        let limit = scale_down_limit(current, h, &b.down, now).min(current);
        let (allowed, cond) = if min < limit {
            (
                limit,
                (
                    "ScaleDownLimit",
                    "the desired replica count is decreasing faster than the maximum scale rate",
                ),
            )
        } else {
            (
                min,
                (
                    "TooFewReplicas",
                    "the desired replica count is less than the minimum replica count",
                ),
            )
        };
        if desired < allowed {
            return (allowed, cond);
        }
    }
    (desired, WITHIN)
}
