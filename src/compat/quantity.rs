//! Kubernetes resource quantities (`100m`, `64Mi`, `1.5G`, `2e3`) as apimachinery's
//! `resource.Quantity` reads, adds, compares and prints them.
//!
//! A value is kept exactly in nano units (`i128`), which is the finest scale Kubernetes keeps
//! (finer values are rounded up, away from zero, when read, as upstream does), so sums never
//! lose precision. The format (decimal SI, binary SI, decimal exponent) comes from the suffix
//! and decides how a value is printed: canonical form as `Quantity.String()` writes it (the
//! largest suffix that keeps the number an integer; binary values that are not a whole number
//! of units, or are under 1024, print in decimal SI).

use std::cmp::Ordering;
use std::fmt;

const NANO: i128 = 1_000_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    DecimalSi,
    BinarySi,
    DecimalExponent,
}

/// A quantity: its value in nano units and the format it prints in.
#[derive(Debug, Clone, Copy)]
pub struct Quantity {
    nano: i128,
    pub format: Format,
}

impl PartialEq for Quantity {
    fn eq(&self, o: &Self) -> bool {
        self.nano == o.nano
    }
}

impl Quantity {
    /// Zero in decimal SI (a `resource.Quantity{Format: DecimalSI}`).
    pub const ZERO: Quantity = Quantity {
        nano: 0,
        format: Format::DecimalSi,
    };

    /// A whole number of units in decimal SI (`resource.NewQuantity(n, DecimalSI)`).
    pub fn from_int(n: i64) -> Self {
        Quantity {
            nano: n as i128 * NANO,
            format: Format::DecimalSi,
        }
    }

    pub fn is_zero(&self) -> bool {
        self.nano == 0
    }

    /// Add `o`; a zero quantity takes `o`'s format (as `Quantity.Add`).
    pub fn add(&mut self, o: &Quantity) {
        if self.nano == 0 {
            self.format = o.format;
        }
        self.nano = self.nano.saturating_add(o.nano);
    }

    /// Subtract `o`; a zero quantity takes `o`'s format (as `Quantity.Sub`).
    pub fn sub(&mut self, o: &Quantity) {
        if self.nano == 0 {
            self.format = o.format;
        }
        self.nano = self.nano.saturating_sub(o.nano);
    }

    pub fn cmp_value(&self, o: &Quantity) -> Ordering {
        self.nano.cmp(&o.nano)
    }

    /// Round up (away from zero) to a whole number of units (`RoundUp(0)`).
    pub fn round_up_units(&self) -> Quantity {
        let r = self.nano % NANO;
        let nano = if r == 0 {
            self.nano
        } else if self.nano > 0 {
            self.nano - r + NANO
        } else {
            self.nano - r - NANO
        };
        Quantity {
            nano,
            format: self.format,
        }
    }

    /// The value rounded up (away from zero) to a whole number of units (`Quantity.Value()`).
    pub fn value(&self) -> i128 {
        self.round_up_units().nano / NANO
    }

    /// The value in milli-units, rounded up (away from zero) as `Quantity.MilliValue()` does,
    /// held to `i64`'s range.
    pub fn milli_value(&self) -> i64 {
        const PER_MILLI: i128 = NANO / 1000;
        let (q, r) = (self.nano / PER_MILLI, self.nano % PER_MILLI);
        let m = match r.cmp(&0) {
            Ordering::Greater => q + 1,
            Ordering::Less => q - 1,
            Ordering::Equal => q,
        };
        m.clamp(i64::MIN as i128, i64::MAX as i128) as i64
    }

    /// The value as a float, for comparing sizes.
    pub fn as_f64(&self) -> f64 {
        self.nano as f64 / NANO as f64
    }

    /// Read a quantity as `resource.ParseQuantity` does; None when it is not one.
    pub fn parse(s: &str) -> Option<Quantity> {
        let b = s.as_bytes();
        if b.is_empty() {
            return None;
        }
        let mut i = 0;
        let neg = match b[0] {
            b'-' => {
                i += 1;
                true
            }
            b'+' => {
                i += 1;
                false
            }
            _ => false,
        };
        let (mut mant, mut frac, mut digits, mut seen_dot) = (0i128, 0i32, 0usize, false);
        while i < b.len() {
            match b[i] {
                c @ b'0'..=b'9' => {
                    digits += 1;
                    mant = mant.checked_mul(10)?.checked_add((c - b'0') as i128)?;
                    if seen_dot {
                        frac += 1;
                    }
                }
                b'.' if !seen_dot => seen_dot = true,
                _ => break,
            }
            i += 1;
        }
        if digits == 0 {
            return None;
        }
        let suffix = &s[i..];
        // (power of ten, power of 1024, format)
        let (exp10, exp1024, format) = match suffix {
            "" => (0, 0, Format::DecimalSi),
            "n" => (-9, 0, Format::DecimalSi),
            "u" => (-6, 0, Format::DecimalSi),
            "m" => (-3, 0, Format::DecimalSi),
            "k" => (3, 0, Format::DecimalSi),
            "M" => (6, 0, Format::DecimalSi),
            "G" => (9, 0, Format::DecimalSi),
            "T" => (12, 0, Format::DecimalSi),
            "P" => (15, 0, Format::DecimalSi),
            "E" => (18, 0, Format::DecimalSi),
            "Ki" => (0, 1, Format::BinarySi),
            "Mi" => (0, 2, Format::BinarySi),
            "Gi" => (0, 3, Format::BinarySi),
            "Ti" => (0, 4, Format::BinarySi),
            "Pi" => (0, 5, Format::BinarySi),
            "Ei" => (0, 6, Format::BinarySi),
            s if s.starts_with(['e', 'E']) => {
                let e: i32 = s[1..].parse().ok()?;
                if !(-40..=40).contains(&e) {
                    return None;
                }
                (e, 0, Format::DecimalExponent)
            }
            _ => return None,
        };
        for _ in 0..exp1024 {
            mant = mant.checked_mul(1024)?;
        }
        let shift = 9 + exp10 - frac;
        let mut nano = if shift >= 0 {
            mant.checked_mul(10i128.checked_pow(shift as u32)?)?
        } else {
            let d = 10i128.checked_pow((-shift) as u32).unwrap_or(i128::MAX);
            let q = mant / d;
            if mant % d != 0 {
                q + 1
            } else {
                q
            }
        };
        if neg {
            nano = -nano;
        }
        Some(Quantity { nano, format })
    }
}

/// A quantity's text in milli-units, rounded up as `Quantity.MilliValue()` does; 0 when the
/// text is not a quantity (as a missing value reads upstream).
pub fn milli_value(s: &str) -> i64 {
    Quantity::parse(s.trim()).map_or(0, |q| q.milli_value())
}

impl fmt::Display for Quantity {
    /// The canonical form (`Quantity.String()`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.nano == 0 {
            return f.write_str("0");
        }
        let mut format = self.format;
        if format == Format::BinarySi && (self.nano.abs() < 1024 * NANO || self.nano % NANO != 0) {
            format = Format::DecimalSi;
        }
        if format == Format::BinarySi {
            let (mut n, mut e) = (self.nano / NANO, 0);
            while n % 1024 == 0 && e < 6 {
                n /= 1024;
                e += 1;
            }
            let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][e];
            return write!(f, "{n}{suffix}");
        }
        let (mut n, mut e) = (self.nano, -9i32);
        while n % 10 == 0 {
            n /= 10;
            e += 1;
        }
        let r = e.rem_euclid(3);
        n *= 10i128.pow(r as u32);
        e -= r;
        let si = match e {
            -9 => Some("n"),
            -6 => Some("u"),
            -3 => Some("m"),
            0 => Some(""),
            3 => Some("k"),
            6 => Some("M"),
            9 => Some("G"),
            12 => Some("T"),
            15 => Some("P"),
            18 => Some("E"),
            _ => None,
        };
        match (format, si) {
            (Format::DecimalSi, Some(s)) => write!(f, "{n}{s}"),
            (_, _) if e == 0 => write!(f, "{n}"),
            _ => write!(f, "{n}e{e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(s: &str) -> String {
        Quantity::parse(s).expect(s).to_string()
    }

    #[test]
    fn milli_values_are_exact() {
        // Every milli quantity reads back as itself (a float product rounded 9m up to 10m).
        for m in 1..2000i64 {
            assert_eq!(milli_value(&format!("{m}m")), m, "{m}m");
        }
        for (s, m) in [
            ("1", 1000),
            ("1.5", 1500),
            ("0.0001", 1),
            ("100u", 1),
            ("1Ki", 1_024_000),
            ("2e3", 2_000_000),
            ("-1500u", -2),
            ("x", 0),
            ("", 0),
        ] {
            assert_eq!(milli_value(s), m, "{s}");
        }
    }

    #[test]
    fn values_round_up_to_whole_units() {
        for (s, v) in [
            ("1Gi", 1i128 << 30),
            ("1.5Gi", 3 << 29),
            ("100m", 1),
            ("1e3", 1000),
            ("-1.5", -2),
        ] {
            assert_eq!(Quantity::parse(s).unwrap().value(), v, "{s}");
        }
        assert_eq!(Quantity::parse("1.5Ki").unwrap().as_f64(), 1536.0);
    }

    #[test]
    fn a_large_value_reads_back_from_its_canonical_form() {
        // Found by the coverage-guided fuzz target `quantity`: the canonical form (38 digits
        // of nano units) was refused by a digit limit stricter than i128.
        let q = Quantity::parse("17106000605.000655096Ei").unwrap();
        let shown = q.to_string();
        assert_eq!(shown, "19721875955322989932864402407026589696n");
        assert_eq!(Quantity::parse(&shown), Some(q));
        assert_eq!(
            Quantity::parse("999999999999999999999999999999999999999n"),
            None
        );
    }

    #[test]
    fn canonical_forms_are_upstreams() {
        for (i, o) in [
            ("100m", "100m"),
            ("0.1", "100m"),
            ("1000m", "1"),
            ("1.5", "1500m"),
            ("64Mi", "64Mi"),
            ("1024Mi", "1Gi"),
            ("1.5Gi", "1536Mi"),
            ("1000", "1k"),
            ("1500", "1500"),
            ("12e6", "12e6"),
            ("1e3", "1e3"),
            ("0", "0"),
            ("0Mi", "0"),
            ("512Ki", "512Ki"),
            ("100Ki", "100Ki"),
            ("1Ki", "1Ki"),
            ("0.5Ki", "512"),
            ("1n", "1n"),
            ("0.0000000001", "1n"),
            ("-100m", "-100m"),
            ("10G", "10G"),
            ("2000000k", "2G"),
        ] {
            assert_eq!(canon(i), o, "{i}");
        }
    }

    #[test]
    fn bad_quantities_are_refused() {
        for s in ["", "m", "1x", "1.2.3", "1 Gi", "Gi", "1e", "--1"] {
            assert!(Quantity::parse(s).is_none(), "{s}");
        }
    }

    #[test]
    fn add_keeps_the_first_format() {
        let mut q = Quantity::ZERO;
        q.add(&Quantity::parse("64Mi").unwrap());
        q.add(&Quantity::parse("1M").unwrap());
        assert_eq!(q.format, Format::BinarySi);
        let mut z = Quantity::ZERO;
        z.add(&Quantity::parse("100m").unwrap());
        z.add(&Quantity::parse("400m").unwrap());
        assert_eq!(z.to_string(), "500m");
        let mut m = Quantity::ZERO;
        for _ in 0..5 {
            m.add(&Quantity::parse("64Mi").unwrap());
        }
        assert_eq!(m.to_string(), "320Mi");
    }

    #[test]
    fn round_up_to_units() {
        assert_eq!(
            Quantity::parse("1500m")
                .unwrap()
                .round_up_units()
                .to_string(),
            "2"
        );
        assert_eq!(
            Quantity::parse("1Gi").unwrap().round_up_units().to_string(),
            "1Gi"
        );
    }
}
