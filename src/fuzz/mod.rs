//! Property and fuzz tests of the code that reads input edgekcm does not control: watch
//! streams, kubeconfig YAML, the command line, PEM/DER, and the secure port's request heads.
//!
//! Every target is a `#[test]` (`fuzz::<target>::...`) that runs a small number of inputs inside
//! `cargo test` and as many as asked for on demand:
//!
//! - `EDGEKCM_FUZZ_ITERS=N`: inputs per target (default: each target's own small number).
//! - `EDGEKCM_FUZZ_SECS=S`: stop a target after S seconds (with or without ITERS).
//! - `EDGEKCM_FUZZ_SEED=X`: the run's seed (decimal or 0x-hex). Without it a plain `cargo test`
//!   uses a fixed seed, and a run with ITERS or SECS set a random one.
//! - `EDGEKCM_FUZZ_CASE=I`: run only input number I of that seed (to reproduce a failure).
//! - `EDGEKCM_FUZZ_TRACE=1`: name each input on stderr before running it, to find the one
//!   that aborts the process (a stack overflow cannot be caught).
//!
//! Input I of a run is generated from (seed, I) alone, so a failure names the seed and the
//! input number that reproduce it. Each target prints one line:
//! `fuzz watch-framing: 20000 inputs, 0 panics (seed 0x..., 1.2 s, slowest input 3 ms)`.
//!
//! The generator is [`Gen`]: random bytes, text and choices from `fastrand`, and byte-level
//! mutations of valid inputs (bit flips, cuts, duplicated and repeated ranges, dictionary
//! tokens). No coverage feedback: the valid seeds and the dictionaries carry the structure.

mod certs;
mod cli;
mod csr;
mod http;
mod kubeconfig;
mod watch;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

/// The seed of a plain `cargo test`, so that it is reproducible as it is.
const DEFAULT_SEED: u64 = 0x6564_6765_6b63_6d01;

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim().replace('_', "");
    let parsed = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    Some(parsed.unwrap_or_else(|e| panic!("{name}={v:?}: {e}")))
}

/// SplitMix64: spreads (seed, input number) over the whole seed space.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Run `case` on inputs 0.. of this run's seed; see the module documentation for the
/// environment. Panics (with the seed and input number) if any input panicked.
pub fn run(target: &str, default_iters: u64, case: impl FnMut(&mut Gen) + Send) {
    run_on_stack(target, default_iters, None, case)
}

/// As [`run`], with the inputs run on a thread of `stack` bytes (the stack of the thread the
/// code runs on in edgekcm), so that deep inputs that would overflow it fail here too.
pub fn run_on_stack(
    target: &str,
    default_iters: u64,
    stack: Option<usize>,
    mut case: impl FnMut(&mut Gen) + Send,
) {
    let iters_env = env_u64("EDGEKCM_FUZZ_ITERS");
    let secs_env = env_u64("EDGEKCM_FUZZ_SECS");
    let long_run = iters_env.is_some() || secs_env.is_some();
    let seed = env_u64("EDGEKCM_FUZZ_SEED").unwrap_or_else(|| {
        if long_run {
            fastrand::u64(..)
        } else {
            DEFAULT_SEED
        }
    });
    let only = env_u64("EDGEKCM_FUZZ_CASE");
    let iters = match (iters_env, secs_env) {
        (Some(n), _) => n,
        (None, Some(_)) => u64::MAX,
        (None, None) => default_iters,
    };
    let deadline = secs_env.map(|s| Instant::now() + Duration::from_secs(s));

    let trace = std::env::var_os("EDGEKCM_FUZZ_TRACE").is_some();
    let mut body = move || {
        let start = Instant::now();
        // Straight to stderr, past the test harness's capture: a stack overflow or an abort
        // ends the process before the summary, and this line still names the seed.
        if long_run || trace {
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "fuzz {target}: seed {seed:#x}");
        }
        let (mut inputs, mut panics) = (0u64, 0u64);
        let mut first_failure: Option<(u64, String)> = None;
        let mut slowest = (Duration::ZERO, 0u64);
        let range = match only {
            Some(i) => i..i + 1,
            None => 0..iters,
        };
        for i in range {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
            if trace {
                use std::io::Write as _;
                let _ = writeln!(std::io::stderr(), "fuzz {target}: input {i}");
            }
            let mut g = Gen::new(mix(seed ^ mix(i)));
            let t = Instant::now();
            let outcome = catch_unwind(AssertUnwindSafe(|| case(&mut g)));
            let took = t.elapsed();
            if took > slowest.0 {
                slowest = (took, i);
            }
            inputs += 1;
            if outcome.is_err() {
                panics += 1;
                if first_failure.is_none() {
                    first_failure = Some((i, g.note.clone()));
                }
                if panics >= 10 {
                    break;
                }
            }
        }
        println!(
            "fuzz {target}: {inputs} inputs, {panics} panics (seed {seed:#x}, {:.1} s, slowest input {} ms: #{})",
            start.elapsed().as_secs_f64(),
            slowest.0.as_millis(),
            slowest.1
        );
        if let Some((i, note)) = first_failure {
            panic!(
                "fuzz {target}: {panics} of {inputs} inputs panicked; the first was input {i}, \
                 reproduce with EDGEKCM_FUZZ_SEED={seed:#x} EDGEKCM_FUZZ_CASE={i}\ninput: {note}"
            );
        }
    };
    match stack {
        None => body(),
        Some(size) => std::thread::scope(|s| {
            let h = std::thread::Builder::new()
                .name(format!("fuzz-{target}"))
                .stack_size(size)
                .spawn_scoped(s, body)
                .expect("spawn a fuzz thread");
            if let Err(p) = h.join() {
                std::panic::resume_unwind(p);
            }
        }),
    }
}

/// Bytes that often matter to parsers.
const INTERESTING: &[u8] = &[
    0, 1, 0x7f, 0x80, 0x81, 0xfe, 0xff, b'\n', b'\r', b'\t', b' ', b'"', b'\\', b'{', b'}', b'[',
    b']', b':', b',', b'-', b'=', b'%', b'0', b'9', b'.', b'e', 0x30, 0x82, 0x84, 0x85,
];

/// One input's randomness, plus a description of the input for the failure message.
pub struct Gen {
    pub rng: fastrand::Rng,
    note: String,
}

impl Gen {
    fn new(seed: u64) -> Self {
        Gen {
            rng: fastrand::Rng::with_seed(seed),
            note: String::new(),
        }
    }

    /// Describe the input (shown if it fails); long descriptions are cut.
    pub fn note(&mut self, what: impl std::fmt::Debug) {
        let mut s = format!("{what:?}");
        if s.len() > 4000 {
            let mut cut = 4000;
            while !s.is_char_boundary(cut) {
                cut -= 1;
            }
            s.truncate(cut);
            s.push_str("...");
        }
        self.note = s;
    }

    /// An integer in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        self.rng.usize(..n.max(1))
    }

    /// True one time in `n`.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }

    /// A length up to `max`, mostly small: sizes near the edges matter more than the middle.
    pub fn size(&mut self, max: usize) -> usize {
        match self.below(4) {
            0 => self.below(8.min(max + 1)),
            1 => max.saturating_sub(self.below(8.min(max + 1))),
            _ => self.below(max + 1),
        }
    }

    /// Random bytes, sometimes printable only, sometimes from the interesting set.
    pub fn bytes(&mut self, max: usize) -> Vec<u8> {
        let n = self.size(max);
        match self.below(3) {
            0 => (0..n).map(|_| self.rng.u8(..)).collect(),
            1 => (0..n).map(|_| self.rng.u8(0x20..0x7f)).collect(),
            _ => (0..n).map(|_| self.pick(INTERESTING)).collect(),
        }
    }

    /// A string of random characters: ASCII, controls, multi-byte, combining, RTL, emoji.
    pub fn unicode(&mut self, max_chars: usize) -> String {
        const ODD: &[char] = &[
            '\0',
            '\u{7f}',
            '\u{85}',
            '\u{a0}',
            'é',
            'ß',
            'ı',
            'İ',
            '€',
            '\u{200b}',
            '\u{200e}',
            '\u{202e}',
            '\u{301}',
            '\u{fe0f}',
            '\u{feff}',
            '\u{fffd}',
            '中',
            '😀',
            '\u{10ffff}',
            'µ',
            'μ',
            '＝',
            '－',
        ];
        let n = self.size(max_chars);
        (0..n)
            .map(|_| match self.below(4) {
                0 => self.pick(ODD),
                1 => char::from_u32(self.rng.u32(..0x11_0000)).unwrap_or('\u{fffd}'),
                _ => char::from(self.rng.u8(0x20..0x7f)),
            })
            .collect()
    }

    /// A copy of `input` with 1 to a few mutations; `dict` holds tokens worth inserting.
    pub fn mutate(&mut self, input: &[u8], dict: &[&[u8]]) -> Vec<u8> {
        let mut out = input.to_vec();
        let rounds = 1 + self.below(4);
        for _ in 0..rounds {
            self.mutate_once(&mut out, dict);
        }
        out
    }

    fn range(&mut self, len: usize) -> (usize, usize) {
        let a = self.below(len + 1);
        let b = a + self.size((len - a).min(64));
        (a, b)
    }

    fn mutate_once(&mut self, out: &mut Vec<u8>, dict: &[&[u8]]) {
        let len = out.len();
        match self.below(12) {
            0 if len > 0 => {
                let i = self.below(len);
                out[i] ^= 1 << self.below(8);
            }
            1 if len > 0 => {
                let i = self.below(len);
                out[i] = self.pick(INTERESTING);
            }
            2 if len > 0 => {
                let i = self.below(len);
                out[i] = self.rng.u8(..);
            }
            3 => {
                let (a, b) = self.range(len);
                out.drain(a..b);
            }
            4 => {
                let at = self.below(len + 1);
                let ins = self.bytes(16);
                out.splice(at..at, ins);
            }
            5 if !dict.is_empty() => {
                let at = self.below(len + 1);
                let tok = self.pick(dict);
                out.splice(at..at, tok.iter().copied());
            }
            6 if !dict.is_empty() => {
                // Replace a range by a token.
                let (a, b) = self.range(len);
                let tok = self.pick(dict);
                out.splice(a..b, tok.iter().copied());
            }
            7 => {
                let (a, b) = self.range(len);
                let piece = out[a..b].to_vec();
                let at = self.below(len + 1);
                out.splice(at..at, piece);
            }
            8 => {
                // Repeat a small range many times: long lines, deep nesting, many headers.
                let (a, b) = self.range(len);
                let b = b.min(a + 8);
                let piece = out[a..b].to_vec();
                let times = 1 + self.size(2000);
                let rep: Vec<u8> = piece
                    .iter()
                    .copied()
                    .cycle()
                    .take(piece.len() * times)
                    .collect();
                out.splice(b..b, rep);
            }
            9 => {
                let cut = self.below(len + 1);
                out.truncate(cut);
            }
            10 if len > 1 => {
                let (a, b) = (self.below(len), self.below(len));
                out.swap(a, b);
            }
            _ => {
                // An ASCII digit run changed: numbers are where overflow lives.
                let at = self.below(len + 1);
                let digits = match self.below(4) {
                    0 => "9".repeat(1 + self.below(40)),
                    1 => "0".repeat(1 + self.below(40)),
                    2 => u64::MAX.to_string(),
                    _ => format!("-{}", self.rng.u64(..)),
                };
                out.splice(at..at, digits.into_bytes());
            }
        }
    }

    /// `mutate` for text (invalid UTF-8 replaced).
    pub fn mutate_str(&mut self, input: &str, dict: &[&[u8]]) -> String {
        String::from_utf8_lossy(&self.mutate(input.as_bytes(), dict)).into_owned()
    }

    /// Cut points that split `len` bytes into chunks: one byte at a time, fixed steps, or
    /// random sizes.
    pub fn chunks(&mut self, len: usize) -> Vec<usize> {
        let mut sizes = Vec::new();
        let mut left = len;
        let fixed = match self.below(3) {
            0 => Some(1 + self.below(3)),
            1 => Some(1 + self.below(64)),
            _ => None,
        };
        while left > 0 {
            let n = fixed.unwrap_or_else(|| 1 + self.size(512)).min(left);
            sizes.push(n);
            left -= n;
        }
        sizes
    }
}

/// A reader that hands out `data` in the given chunk sizes, then an optional error.
pub struct ChunkedReader {
    pub data: Vec<u8>,
    pub sizes: Vec<usize>,
    pub pos: usize,
    pub next: usize,
    pub error_at_end: Option<std::io::ErrorKind>,
}

impl ChunkedReader {
    pub fn new(data: Vec<u8>, sizes: Vec<usize>) -> Self {
        ChunkedReader {
            data,
            sizes,
            pos: 0,
            next: 0,
            error_at_end: None,
        }
    }
}

impl std::io::Read for ChunkedReader {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.pos >= self.data.len() {
            return match self.error_at_end.take() {
                Some(kind) => Err(std::io::Error::new(kind, "injected read error")),
                None => Ok(0),
            };
        }
        let chunk = self.sizes.get(self.next).copied().unwrap_or(usize::MAX);
        self.next += 1;
        let n = chunk.max(1).min(out.len()).min(self.data.len() - self.pos);
        out[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

impl futures_lite::AsyncRead for ChunkedReader {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        buf: &mut [u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::task::Poll::Ready(std::io::Read::read(self.get_mut(), buf))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_depend_on_seed_and_number_only() {
        let a: Vec<u8> = Gen::new(mix(7 ^ mix(3))).bytes(100);
        let b: Vec<u8> = Gen::new(mix(7 ^ mix(3))).bytes(100);
        assert_eq!(a, b);
        let mut g = Gen::new(1);
        let m = g.mutate(b"hello world", &[b"XYZ"]);
        let mut g = Gen::new(1);
        assert_eq!(m, g.mutate(b"hello world", &[b"XYZ"]));
    }

    #[test]
    fn chunks_cover_the_input() {
        let mut g = Gen::new(5);
        for len in [0, 1, 7, 1000] {
            assert_eq!(g.chunks(len).iter().sum::<usize>(), len);
        }
    }
}
