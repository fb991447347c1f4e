//! Stable sorts that share one compiled sort.
//!
//! The standard library's stable sort is fast but large, and it is compiled again for every element
//! type and comparison closure: at 67 call sites it was about 330 KB of the static binary, 5 % of
//! its size budget. Here the standard sort runs once, on indices with a comparison behind a `dyn`
//! reference, and the slice is then permuted in place. Every call site shares that one instance;
//! what stays per type is the permutation, a few dozen instructions.
//!
//! The order is exactly the standard stable sort's (equal elements keep their order), so these
//! also stand in for the unstable sorts. The cost is an index vector and an indirect call per
//! comparison: sorting 20,000 pods takes about a millisecond more.

use std::cmp::Ordering;

/// Sorts `v` in ascending order, keeping equal elements in their order.
pub fn sort<T: Ord>(v: &mut [T]) {
    sort_by(v, T::cmp);
}

/// Sorts `v` by `cmp`, keeping elements that compare equal in their order.
pub fn sort_by<T>(v: &mut [T], mut cmp: impl FnMut(&T, &T) -> Ordering) {
    if v.len() < 2 {
        return;
    }
    let order = {
        let s: &[T] = v;
        positions(s.len(), &mut |a, b| cmp(&s[a], &s[b]))
    };
    permute(v, order);
}

/// Sorts `v` by the key `f` gives each element (called on every comparison).
pub fn sort_by_key<T, K: Ord>(v: &mut [T], mut f: impl FnMut(&T) -> K) {
    sort_by(v, |a, b| f(a).cmp(&f(b)));
}

/// Sorts `v` by the key `f` gives each element, calling `f` once per element.
pub fn sort_by_cached_key<T, K: Ord>(v: &mut [T], f: impl FnMut(&T) -> K) {
    if v.len() < 2 {
        return;
    }
    let keys: Vec<K> = v.iter().map(f).collect();
    let order = positions(keys.len(), &mut |a, b| keys[a].cmp(&keys[b]));
    permute(v, order);
}

/// The stable order of `0..n` under `cmp`: the one instance of the standard sort.
#[inline(never)]
fn positions(n: usize, cmp: &mut dyn FnMut(usize, usize) -> Ordering) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| cmp(a, b));
    order
}

/// Rearranges `v` so that position `i` holds what was at `order[i]`, one cycle at a time.
fn permute<T>(v: &mut [T], mut order: Vec<usize>) {
    const DONE: usize = usize::MAX;
    for start in 0..v.len() {
        let mut at = start;
        while order[at] != DONE {
            let from = order[at];
            order[at] = DONE;
            if from == start {
                break;
            }
            // `v[at]` holds the element that started this cycle; it moves on to `from`.
            v.swap(at, from);
            at = from;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(v: Vec<(u8, usize)>) {
        let mut ours = v.clone();
        let mut std_sorted = v;
        sort_by(&mut ours, |a, b| a.0.cmp(&b.0));
        std_sorted.sort_by_key(|a| a.0);
        assert_eq!(ours, std_sorted);
    }

    #[test]
    fn same_order_as_the_standard_stable_sort() {
        let mut rng = fastrand::Rng::with_seed(7);
        for n in 0..200 {
            let v: Vec<(u8, usize)> = (0..n).map(|i| (rng.u8(0..8), i)).collect();
            check(v);
        }
        check((0..1000).rev().map(|i| ((i % 251) as u8, i)).collect());
    }

    #[test]
    fn keys_and_cached_keys() {
        let mut a = vec!["ccc", "a", "bb", "dd", "e"];
        let mut b = a.clone();
        sort_by_key(&mut a, |s| s.len());
        let mut calls = 0;
        sort_by_cached_key(&mut b, |s| {
            calls += 1;
            s.len()
        });
        assert_eq!(a, ["a", "e", "bb", "dd", "ccc"]);
        assert_eq!(a, b);
        assert_eq!(calls, 5);
        let mut c = vec![3, 1, 2, 1];
        sort(&mut c);
        assert_eq!(c, [1, 1, 2, 3]);
    }

    #[test]
    fn moves_elements_that_own_memory() {
        let mut v: Vec<String> = (0..50).map(|i| format!("{}", (i * 37) % 50)).collect();
        let mut expected = v.clone();
        expected.sort();
        sort(&mut v);
        assert_eq!(v, expected);
    }
}
