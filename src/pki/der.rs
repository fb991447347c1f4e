//! Just enough DER for `edgekcm certs`: read the fields of an X.509 certificate that reusing a
//! CA and checking kept files need, and wrap PKCS#1 / SEC1 private keys in a PKCS#8 envelope
//! (ring, and so rcgen, loads only PKCS#8). Anything unexpected is `None` / `Err`, never a panic.

use std::time::SystemTime;

pub const SEQUENCE: u8 = 0x30;
pub const SET: u8 = 0x31;
pub const BOOLEAN: u8 = 0x01;
pub const INTEGER: u8 = 0x02;
pub const BIT_STRING: u8 = 0x03;
pub const OCTET_STRING: u8 = 0x04;
pub const NULL: u8 = 0x05;
pub const OID: u8 = 0x06;
const UTF8_STRING: u8 = 0x0c;
const PRINTABLE_STRING: u8 = 0x13;
const TELETEX_STRING: u8 = 0x14;
const IA5_STRING: u8 = 0x16;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;
const UNIVERSAL_STRING: u8 = 0x1c;
const BMP_STRING: u8 = 0x1e;
const CONTEXT_0: u8 = 0xa0;
const CONTEXT_3: u8 = 0xa3;

/// OID contents (without tag and length).
pub const OID_RSA_ENCRYPTION: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
pub const OID_EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
pub const OID_P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
pub const OID_P384: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x22];
const OID_BASIC_CONSTRAINTS: &[u8] = &[0x55, 0x1d, 0x13];
const OID_SUBJECT_KEY_ID: &[u8] = &[0x55, 0x1d, 0x0e];
const OID_COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];

/// One tag-length-value element.
#[derive(Debug, Clone, Copy)]
pub struct Tlv<'a> {
    pub tag: u8,
    pub content: &'a [u8],
    /// The whole element, header included.
    pub raw: &'a [u8],
}

/// Read one element from the front of `input`; returns it and what follows.
pub fn read(input: &[u8]) -> Option<(Tlv<'_>, &[u8])> {
    let (&tag, rest) = input.split_first()?;
    if tag & 0x1f == 0x1f {
        return None; // multi-byte tags never occur in what we read
    }
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        rest = &rest[n..];
        len
    };
    if rest.len() < len {
        return None;
    }
    let header = input.len() - rest.len();
    Some((
        Tlv {
            tag,
            content: &rest[..len],
            raw: &input[..header + len],
        },
        &rest[len..],
    ))
}

/// Every element inside a constructed element's content.
pub fn children(mut content: &[u8]) -> Option<Vec<Tlv<'_>>> {
    let mut out = Vec::new();
    while !content.is_empty() {
        let (t, rest) = read(content)?;
        out.push(t);
        content = rest;
    }
    Some(out)
}

/// Read exactly one element of the given tag that fills `input`.
pub fn read_exact(input: &[u8], tag: u8) -> Option<Tlv<'_>> {
    match read(input)? {
        (t, []) if t.tag == tag => Some(t),
        _ => None,
    }
}

/// Encode one element.
pub fn write(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|&&b| b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(content);
    out
}

fn concat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// Dotted arcs of an OID's content bytes.
pub fn oid_arcs(content: &[u8]) -> Option<Vec<u64>> {
    let mut arcs = Vec::new();
    let mut v: u64 = 0;
    for (i, &b) in content.iter().enumerate() {
        v = v.checked_mul(128)? | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            if arcs.is_empty() {
                let first = (v / 40).min(2);
                arcs.push(first);
                arcs.push(v - first * 40);
            } else {
                arcs.push(v);
            }
            v = 0;
        } else if i + 1 == content.len() {
            return None;
        }
    }
    if arcs.is_empty() {
        return None;
    }
    Some(arcs)
}

/// `YYMMDDHHMMSSZ` (UTCTime) or `YYYYMMDDHHMMSSZ` (GeneralizedTime).
fn parse_time(t: &Tlv<'_>) -> Option<SystemTime> {
    let s = std::str::from_utf8(t.content).ok()?;
    let s = s.strip_suffix('Z')?;
    // Digits only, before any slicing: a multi-byte character would not split at a byte index.
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let full = match (t.tag, s.len()) {
        (UTC_TIME, 12) => {
            let yy: u32 = s[..2].parse().ok()?;
            let century = if yy < 50 { "20" } else { "19" };
            format!("{century}{s}")
        }
        (GENERALIZED_TIME, 14) => s.to_string(),
        _ => return None,
    };
    let rfc = format!(
        "{}-{}-{}T{}:{}:{}Z",
        &full[..4],
        &full[4..6],
        &full[6..8],
        &full[8..10],
        &full[10..12],
        &full[12..14]
    );
    crate::compat::timefmt::parse_rfc3339(&rfc)
}

/// The parts of a certificate `edgekcm certs` looks at.
#[derive(Debug, Clone)]
pub struct CertInfo<'a> {
    /// The subject Name element, as encoded.
    pub subject: &'a [u8],
    /// The issuer Name element, as encoded.
    pub issuer: &'a [u8],
    /// The SubjectPublicKeyInfo element, as encoded.
    pub spki: &'a [u8],
    /// The subjectPublicKey bits (RSAPublicKey DER, or the EC point).
    pub public_key: &'a [u8],
    pub not_before: SystemTime,
    pub not_after: SystemTime,
    /// basicConstraints cA.
    pub is_ca: bool,
    pub subject_key_id: Option<&'a [u8]>,
    pub common_name: Option<String>,
}

/// Parse a DER certificate.
pub fn parse_cert(der: &[u8]) -> Option<CertInfo<'_>> {
    let cert = read_exact(der, SEQUENCE)?;
    let parts = children(cert.content)?;
    let tbs = parts.first().filter(|t| t.tag == SEQUENCE)?;
    let mut fields = children(tbs.content)?.into_iter().peekable();
    if fields.peek()?.tag == CONTEXT_0 {
        fields.next(); // version
    }
    let _serial = fields.next().filter(|t| t.tag == INTEGER)?;
    let _sig_alg = fields.next().filter(|t| t.tag == SEQUENCE)?;
    let issuer = fields.next().filter(|t| t.tag == SEQUENCE)?;
    let validity = fields.next().filter(|t| t.tag == SEQUENCE)?;
    let subject = fields.next().filter(|t| t.tag == SEQUENCE)?;
    let spki = fields.next().filter(|t| t.tag == SEQUENCE)?;
    let times = children(validity.content)?;
    let (not_before, not_after) = match times.as_slice() {
        [a, b] => (parse_time(a)?, parse_time(b)?),
        _ => return None,
    };
    let spki_parts = children(spki.content)?;
    let bits = spki_parts.get(1).filter(|t| t.tag == BIT_STRING)?;
    let public_key = bits.content.strip_prefix(&[0u8])?;

    let mut is_ca = false;
    let mut subject_key_id = None;
    for f in fields {
        if f.tag != CONTEXT_3 {
            continue;
        }
        let exts = read_exact(f.content, SEQUENCE)?;
        for ext in children(exts.content)? {
            let items = children(ext.content)?;
            let oid = items.first().filter(|t| t.tag == OID)?;
            let value = items.last().filter(|t| t.tag == OCTET_STRING)?;
            if oid.content == OID_BASIC_CONSTRAINTS {
                let bc = read_exact(value.content, SEQUENCE)?;
                is_ca = children(bc.content)?.first().is_some_and(|t| {
                    t.tag == BOOLEAN && t.content.first().is_some_and(|&b| b != 0)
                });
            } else if oid.content == OID_SUBJECT_KEY_ID {
                subject_key_id = Some(read_exact(value.content, OCTET_STRING)?.content);
            }
        }
    }
    let common_name = name_attributes(subject.content)?
        .into_iter()
        .find(|(oid, _, _)| *oid == OID_COMMON_NAME)
        .and_then(|(_, tag, v)| decode_string(tag, v));
    Some(CertInfo {
        subject: subject.raw,
        issuer: issuer.raw,
        spki: spki.raw,
        public_key,
        not_before,
        not_after,
        is_ca,
        subject_key_id,
        common_name,
    })
}

/// One attribute of a Name: type OID contents, value tag, value bytes.
type Attribute<'a> = (&'a [u8], u8, &'a [u8]);

/// Every attribute of a Name, in order (multi-valued RDNs flattened).
fn name_attributes(name_content: &[u8]) -> Option<Vec<Attribute<'_>>> {
    let mut out = Vec::new();
    for rdn in children(name_content)? {
        if rdn.tag != SET {
            return None;
        }
        for atv in children(rdn.content)? {
            let items = children(atv.content)?;
            match items.as_slice() {
                [oid, value] if oid.tag == OID => out.push((oid.content, value.tag, value.content)),
                _ => return None,
            }
        }
    }
    Some(out)
}

fn decode_string(tag: u8, v: &[u8]) -> Option<String> {
    match tag {
        UTF8_STRING | PRINTABLE_STRING | IA5_STRING | TELETEX_STRING => {
            String::from_utf8(v.to_vec()).ok()
        }
        BMP_STRING => {
            let units: Vec<u16> = v
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            String::from_utf16(&units).ok()
        }
        _ => None,
    }
}

/// An rcgen DistinguishedName that encodes to the same bytes as this Name, so that
/// certificates we sign name the CA exactly as the CA names itself. Errors say what cannot be
/// reproduced; the caller still compares the encodings afterwards.
pub fn distinguished_name(name_raw: &[u8]) -> Result<rcgen::DistinguishedName, String> {
    use rcgen::{DnType, DnValue};
    let name = read_exact(name_raw, SEQUENCE).ok_or("malformed subject name")?;
    let rdns = children(name.content).ok_or("malformed subject name")?;
    let mut dn = rcgen::DistinguishedName::new();
    let mut seen: Vec<Vec<u64>> = Vec::new();
    for rdn in rdns {
        let atvs = children(rdn.content).ok_or("malformed subject name")?;
        if atvs.len() != 1 {
            return Err("the subject has a multi-valued RDN".into());
        }
        let items = children(atvs[0].content).ok_or("malformed subject name")?;
        let [oid, value] = items.as_slice() else {
            return Err("malformed subject attribute".into());
        };
        let arcs = oid_arcs(oid.content).ok_or("malformed attribute OID")?;
        if seen.contains(&arcs) {
            return Err("the subject repeats an attribute type".into());
        }
        seen.push(arcs.clone());
        let text = || decode_string(value.tag, value.content).ok_or("undecodable attribute value");
        let bad = |e: rcgen::Error| format!("attribute value: {e}");
        let v = match value.tag {
            UTF8_STRING => DnValue::Utf8String(text()?),
            PRINTABLE_STRING => DnValue::PrintableString(text()?.try_into().map_err(bad)?),
            IA5_STRING => DnValue::Ia5String(text()?.try_into().map_err(bad)?),
            TELETEX_STRING => DnValue::TeletexString(text()?.try_into().map_err(bad)?),
            BMP_STRING => DnValue::BmpString(
                rcgen::string::BmpString::from_utf16be(value.content.to_vec()).map_err(bad)?,
            ),
            UNIVERSAL_STRING => DnValue::UniversalString(
                rcgen::string::UniversalString::from_utf32be(value.content.to_vec())
                    .map_err(bad)?,
            ),
            t => return Err(format!("attribute value of unsupported type 0x{t:02x}")),
        };
        dn.push(DnType::from_oid(&arcs), v);
    }
    Ok(dn)
}

/// `SEQ{INT 0, SEQ{OID rsaEncryption, NULL}, OCTET STRING{pkcs1}}`.
pub fn pkcs1_to_pkcs8(pkcs1: &[u8]) -> Vec<u8> {
    let alg = write(
        SEQUENCE,
        &concat(&[&write(OID, OID_RSA_ENCRYPTION), &write(NULL, &[])]),
    );
    write(
        SEQUENCE,
        &concat(&[&write(INTEGER, &[0]), &alg, &write(OCTET_STRING, pkcs1)]),
    )
}

/// `SEQ{INT 0, SEQ{OID ecPublicKey, OID curve}, OCTET STRING{sec1}}`, the curve taken from
/// the SEC1 key's parameters.
pub fn sec1_to_pkcs8(sec1: &[u8]) -> Result<Vec<u8>, String> {
    let key = read_exact(sec1, SEQUENCE).ok_or("malformed EC private key")?;
    let items = children(key.content).ok_or("malformed EC private key")?;
    let curve = items
        .iter()
        .find(|t| t.tag == CONTEXT_0)
        .and_then(|p| read_exact(p.content, OID))
        .ok_or("the EC private key does not name its curve")?;
    if curve.content != OID_P256 && curve.content != OID_P384 {
        return Err("unsupported EC curve (P-256 and P-384 are supported)".into());
    }
    let alg = write(
        SEQUENCE,
        &concat(&[&write(OID, OID_EC_PUBLIC_KEY), curve.raw]),
    );
    Ok(write(
        SEQUENCE,
        &concat(&[&write(INTEGER, &[0]), &alg, &write(OCTET_STRING, sec1)]),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_round_trip() {
        for n in [0usize, 1, 127, 128, 255, 256, 70_000] {
            let content = vec![7u8; n];
            let enc = write(OCTET_STRING, &content);
            let (t, rest) = read(&enc).unwrap();
            assert!(rest.is_empty());
            assert_eq!(t.tag, OCTET_STRING);
            assert_eq!(t.content.len(), n);
            assert_eq!(t.raw, &enc[..]);
        }
    }

    #[test]
    fn truncated_input_is_none() {
        let enc = write(SEQUENCE, &[1, 2, 3]);
        for cut in 0..enc.len() {
            assert!(read_exact(&enc[..cut], SEQUENCE).is_none());
        }
        assert!(read(&[0x30, 0x85, 1, 1, 1, 1, 1]).is_none());
        assert!(parse_cert(&[]).is_none());
        assert!(parse_cert(&[0x30, 0x00]).is_none());
    }

    #[test]
    fn oids() {
        assert_eq!(
            oid_arcs(OID_RSA_ENCRYPTION).unwrap(),
            vec![1, 2, 840, 113549, 1, 1, 1]
        );
        assert_eq!(oid_arcs(OID_P384).unwrap(), vec![1, 3, 132, 0, 34]);
        assert!(oid_arcs(&[0x2a, 0x86]).is_none());
        assert!(oid_arcs(&[]).is_none());
    }

    #[test]
    fn times() {
        let utc = write(UTC_TIME, b"250102030405Z");
        let (t, _) = read(&utc).unwrap();
        assert_eq!(
            crate::compat::timefmt::rfc3339(parse_time(&t).unwrap()),
            "2025-01-02T03:04:05Z"
        );
        let gen = write(GENERALIZED_TIME, b"20991231235959Z");
        let (t, _) = read(&gen).unwrap();
        assert_eq!(
            crate::compat::timefmt::rfc3339(parse_time(&t).unwrap()),
            "2099-12-31T23:59:59Z"
        );
        let bad = write(UTC_TIME, b"2501020304xxZ");
        assert!(parse_time(&read(&bad).unwrap().0).is_none());
        // Twelve (fourteen) bytes, with a character across a field boundary: None, not a panic.
        for text in [
            "0\u{20ac}12345678Z",
            "\u{10000}12345678Z",
            "2\u{e9}12312359590Z",
        ] {
            for tag in [UTC_TIME, GENERALIZED_TIME] {
                let t = write(tag, text.as_bytes());
                assert!(parse_time(&read(&t).unwrap().0).is_none(), "{text}");
            }
        }
    }

    #[test]
    fn rcgen_certificate_fields() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name
            .push(rcgen::DnType::CommonName, "edgekcm test");
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let cert = p.self_signed(&key).unwrap();
        let info = parse_cert(cert.der()).unwrap();
        assert!(info.is_ca);
        assert_eq!(info.subject, info.issuer);
        assert_eq!(info.common_name.as_deref(), Some("edgekcm test"));
        assert_eq!(info.public_key, key.public_key_raw());
        assert!(info.subject_key_id.is_some());
        assert!(info.not_after > info.not_before);
        // The Name rebuilds to the same bytes.
        let dn = distinguished_name(info.subject).unwrap();
        let mut q = rcgen::CertificateParams::default();
        q.distinguished_name = dn;
        let again = q.self_signed(&key).unwrap();
        assert_eq!(parse_cert(again.der()).unwrap().subject, info.subject);
    }

    #[test]
    fn garbage_never_panics() {
        let mut seed = 0x1234_5678u32;
        for _ in 0..2000 {
            let n = (seed % 64) as usize;
            let mut buf = Vec::with_capacity(n);
            for _ in 0..n {
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                buf.push(seed as u8);
            }
            let _ = parse_cert(&buf);
            let _ = distinguished_name(&buf);
            let _ = sec1_to_pkcs8(&buf);
        }
    }
}
