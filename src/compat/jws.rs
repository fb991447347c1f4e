//! JSON Web Signatures in the compact form, as the Go JOSE library upstream uses writes them:
//! the protected header `{"alg":...,"kid":...}` (keys sorted, no `typ`), every part base64url
//! without padding, JSON strings escaped as Go's `encoding/json` escapes them (`<`, `>`, `&`,
//! U+2028 and U+2029 as `\u` escapes). Used for the legacy ServiceAccount tokens (RS256, ES256,
//! ES384) and the bootstrap tokens' detached signatures of `cluster-info` (HS256).

use base64::Engine as _;

/// base64url without padding (`base64.RawURLEncoding`).
pub fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(data)
}

/// A JSON string literal as Go's `encoding/json` writes it (HTML-safe escaping).
pub fn go_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    super::json::write_str(&mut out, s);
    out
}

/// A JSON object of string members in the order given (callers give them sorted, as Go's
/// encoder writes a map).
pub fn go_object(members: &[(&str, &str)]) -> String {
    let mut out = String::from("{");
    for (i, (k, v)) in members.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&go_string(k));
        out.push(':');
        out.push_str(&go_string(v));
    }
    out.push('}');
    out
}

/// The protected header of a signature with this algorithm and key id.
pub fn header(alg: &str, kid: &str) -> String {
    go_object(&[("alg", alg), ("kid", kid)])
}

/// `header.payload.signature`, `sign` given the signing input (`header.payload`).
pub fn compact<E>(
    header: &str,
    payload: &[u8],
    sign: impl FnOnce(&[u8]) -> Result<Vec<u8>, E>,
) -> Result<String, E> {
    let input = format!("{}.{}", b64(header.as_bytes()), b64(payload));
    let sig = sign(input.as_bytes())?;
    Ok(format!("{input}.{}", b64(&sig)))
}

/// cluster-bootstrap's `ComputeDetachedSignature`: an HS256 JWS of `content` keyed by the
/// token secret, with the token id as `kid`, the payload left out (`header..signature`).
pub fn detached_hs256(content: &str, token_id: &str, token_secret: &str) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, token_secret.as_bytes());
    let full = compact::<std::convert::Infallible>(
        &header("HS256", token_id),
        content.as_bytes(),
        |input| Ok(ring::hmac::sign(&key, input).as_ref().to_vec()),
    )
    .unwrap_or_else(|never| match never {});
    let mut parts = full.split('.');
    let (h, _, s) = (parts.next(), parts.next(), parts.next());
    format!("{}..{}", h.unwrap_or(""), s.unwrap_or(""))
}

/// cluster-bootstrap's `DetachedTokenIsValid`: the signature is the one this token makes.
pub fn detached_is_valid(detached: &str, content: &str, token_id: &str, secret: &str) -> bool {
    detached_hs256(content, token_id, secret) == detached
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_escaping() {
        assert_eq!(go_string("a<b>&c"), r#""a\u003cb\u003e\u0026c""#);
        assert_eq!(go_string("q\"\\\n"), r#""q\"\\\n""#);
        assert_eq!(go_string("\u{2028}"), r#""\u2028""#);
        assert_eq!(
            go_object(&[("alg", "HS256"), ("kid", "abcdef")]),
            r#"{"alg":"HS256","kid":"abcdef"}"#
        );
    }

    #[test]
    fn detached_signature_form_and_check() {
        let content = "apiVersion: v1\nkind: Config\n";
        let sig = detached_hs256(content, "abcdef", "0123456789abcdef");
        let (h, rest) = sig.split_once("..").expect("detached form");
        assert!(!rest.contains('.'));
        let header = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(h)
            .unwrap();
        assert_eq!(header, br#"{"alg":"HS256","kid":"abcdef"}"#);
        // The signature is HMAC-SHA256 of header.payload with the token secret.
        let input = format!("{h}.{}", b64(content.as_bytes()));
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, b"0123456789abcdef");
        let mac = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(rest)
            .unwrap();
        ring::hmac::verify(&key, input.as_bytes(), &mac).expect("verifies");
        assert!(detached_is_valid(
            &sig,
            content,
            "abcdef",
            "0123456789abcdef"
        ));
        assert!(!detached_is_valid(
            &sig,
            "other",
            "abcdef",
            "0123456789abcdef"
        ));
        assert!(!detached_is_valid(
            &sig,
            content,
            "abcdeg",
            "0123456789abcdef"
        ));
        assert!(!detached_is_valid(
            &sig,
            content,
            "abcdef",
            "0123456789abcdeg"
        ));
    }

    #[test]
    fn known_vector() {
        // HS256 over "hello" with id "abcdef" and secret "0123456789abcdef": header
        // {"alg":"HS256","kid":"abcdef"} = eyJhbGciOiJIUzI1NiIsImtpZCI6ImFiY2RlZiJ9.
        let sig = detached_hs256("hello", "abcdef", "0123456789abcdef");
        assert!(
            sig.starts_with("eyJhbGciOiJIUzI1NiIsImtpZCI6ImFiY2RlZiJ9.."),
            "{sig}"
        );
    }
}
