//! Query strings as Go's `url.ParseQuery` reads them, for the secure port's handlers and the
//! sandbox's apiserver: `&`-separated pairs (`;` is not a separator, Go >= 1.17), each side
//! percent-decoded with `+` as a space. A malformed escape is kept as it is.

/// Percent-decoding for query components (`+` is a space).
pub fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(v) => {
                        out.push(v);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `a=1&b&c=x%20y` -> [(a,1),(b,""),(c,"x y")].
pub fn query_pairs(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (percent_decode(k), percent_decode(v)),
            None => (percent_decode(p), String::new()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_are_decoded_and_malformed_ones_kept() {
        assert_eq!(percent_decode("%zz%41"), "%zzA");
        assert_eq!(percent_decode("abc%4"), "abc%4");
        assert_eq!(percent_decode("a+b%2Bc"), "a b+c");
        assert_eq!(percent_decode("%C3%A9"), "é");
    }

    #[test]
    fn pairs_in_order_without_semicolons() {
        assert_eq!(
            query_pairs("a=1&b&&c=x%20y&a=2;d=3"),
            [
                ("a".to_string(), "1".to_string()),
                ("b".to_string(), String::new()),
                ("c".to_string(), "x y".to_string()),
                ("a".to_string(), "2;d=3".to_string()),
            ]
        );
    }
}
