//! The parts of a PKCS#10 certificate request (a CSR's `spec.request`) that the approver's
//! recognizers look at, read as Go's `x509.ParseCertificateRequest` reads them: the subject's
//! common name (the last one) and organizations (in order), the subject alternative names of
//! the `extensionRequest` attribute, and the public key's algorithm.
//!
//! The structure is checked where Go's parser would refuse a request (strings of the wrong
//! alphabet, a malformed SAN extension, duplicate requested extensions, trailing data), so a
//! request refused there is refused here; the signature is not checked (the apiserver checks
//! it when the CSR is created, and the controller never sees one it refused). Every length is
//! bounded by the input and nothing recurses: bad input is an error, never a panic.

use crate::pki::der::{self, Tlv, BIT_STRING, BOOLEAN, INTEGER, OCTET_STRING, OID, SEQUENCE, SET};

const CONTEXT_0_CONSTRUCTED: u8 = 0xa0;
/// 2.5.4.3 and 2.5.4.10.
const OID_COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];
const OID_ORGANIZATION: &[u8] = &[0x55, 0x04, 0x0a];
/// 1.2.840.113549.1.9.14, PKCS#9 extensionRequest.
const OID_EXTENSION_REQUEST: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x0e];
/// 2.5.29.17.
const OID_SUBJECT_ALT_NAME: &[u8] = &[0x55, 0x1d, 0x11];
const OID_DSA: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x38, 0x04, 0x01];
const OID_ED25519: &[u8] = &[0x2b, 0x65, 0x70];

/// What a request asks for, as far as the recognizers read it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Request {
    pub common_name: String,
    pub organizations: Vec<String>,
    pub dns_names: Vec<String>,
    pub email_addresses: Vec<String>,
    /// Raw addresses (4 or 16 bytes).
    pub ip_addresses: Vec<Vec<u8>>,
    pub uris: Vec<String>,
    pub public_key_algorithm: KeyAlgorithm,
    /// The subject's string-valued attributes in order: the type's OID (contents) and text.
    pub subject: Vec<(Vec<u8>, String)>,
    /// The SubjectPublicKeyInfo as encoded.
    pub spki: Vec<u8>,
    /// The signed part (`certificationRequestInfo`) as encoded, its signature algorithm
    /// (AlgorithmIdentifier as encoded) and the signature bits.
    pub info: Vec<u8>,
    pub signature_algorithm: Vec<u8>,
    pub signature: Vec<u8>,
}

/// Go's `x509.PublicKeyAlgorithm` for the key's OID.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum KeyAlgorithm {
    #[default]
    Unknown,
    Rsa,
    Dsa,
    Ecdsa,
    Ed25519,
}

fn malformed(what: &str) -> String {
    format!("x509: malformed certificate request: {what}")
}

/// upstream's `certificates.ParseCSR`: the first PEM block must be a `CERTIFICATE REQUEST`.
pub fn parse_pem(pem: &[u8]) -> Result<Request, String> {
    match crate::pki::gopem::first_block(pem) {
        Some(b) if b.kind == "CERTIFICATE REQUEST" => parse_der(&b.der),
        _ => Err("PEM block type must be CERTIFICATE REQUEST".to_string()),
    }
}

fn seq_children<'a>(t: &Tlv<'a>, what: &str) -> Result<Vec<Tlv<'a>>, String> {
    if t.tag != SEQUENCE {
        return Err(malformed(what));
    }
    der::children(t.content).ok_or_else(|| malformed(what))
}

/// One DER `CertificationRequest`.
pub fn parse_der(input: &[u8]) -> Result<Request, String> {
    let (outer, rest) = der::read(input).ok_or_else(|| malformed("truncated"))?;
    if !rest.is_empty() {
        return Err("x509: trailing data after certificate request".to_string());
    }
    let parts = seq_children(&outer, "not a sequence")?;
    let [info, sig_alg, sig, ..] = parts.as_slice() else {
        return Err(malformed("missing fields"));
    };
    if sig_alg.tag != SEQUENCE || sig.tag != BIT_STRING {
        return Err(malformed("signature"));
    }
    let fields = seq_children(info, "certificationRequestInfo")?;
    let [version, subject, spki, attrs @ ..] = fields.as_slice() else {
        return Err(malformed("missing fields"));
    };
    if version.tag != INTEGER || version.content.is_empty() || version.content.len() > 8 {
        return Err(malformed("version"));
    }
    let mut req = Request {
        public_key_algorithm: key_algorithm(spki)?,
        spki: spki.raw.to_vec(),
        info: info.raw.to_vec(),
        signature_algorithm: sig_alg.raw.to_vec(),
        signature: sig.content.get(1..).unwrap_or_default().to_vec(),
        ..Request::default()
    };
    read_subject(subject, &mut req)?;
    // [0] IMPLICIT SET OF Attribute; a request without it is still read, as Go reads it.
    if let Some(a) = attrs.first() {
        if a.tag != CONTEXT_0_CONSTRUCTED {
            return Err(malformed("attributes"));
        }
        read_attributes(a.content, &mut req)?;
    }
    Ok(req)
}

fn key_algorithm(spki: &Tlv<'_>) -> Result<KeyAlgorithm, String> {
    let parts = seq_children(spki, "public key")?;
    let [alg, bits] = parts.as_slice() else {
        return Err(malformed("public key"));
    };
    let alg_parts = seq_children(alg, "public key algorithm")?;
    let oid = alg_parts
        .first()
        .filter(|t| t.tag == OID)
        .ok_or_else(|| malformed("public key algorithm"))?;
    if bits.tag != BIT_STRING || bits.content.first().is_none_or(|&unused| unused > 7) {
        return Err(malformed("public key bits"));
    }
    let a = match oid.content {
        der::OID_RSA_ENCRYPTION => KeyAlgorithm::Rsa,
        der::OID_EC_PUBLIC_KEY => KeyAlgorithm::Ecdsa,
        OID_DSA => KeyAlgorithm::Dsa,
        OID_ED25519 => KeyAlgorithm::Ed25519,
        _ => KeyAlgorithm::Unknown,
    };
    if a == KeyAlgorithm::Ed25519 && bits.content.len() != 33 {
        return Err("x509: wrong Ed25519 public key size".to_string());
    }
    Ok(a)
}

/// Go's `pkix.Name.FillFromRDNSequence` for CN and O; attribute values of non-string types are
/// skipped, strings outside their alphabet refused (encoding/asn1's parsers).
fn read_subject(subject: &Tlv<'_>, req: &mut Request) -> Result<(), String> {
    for rdn in seq_children(subject, "subject")? {
        if rdn.tag != SET {
            return Err(malformed("subject"));
        }
        for atv in der::children(rdn.content).ok_or_else(|| malformed("subject"))? {
            let items = seq_children(&atv, "subject attribute")?;
            let [oid, value] = items.as_slice() else {
                return Err(malformed("subject attribute"));
            };
            if oid.tag != OID {
                return Err(malformed("subject attribute"));
            }
            let Some(text) = asn1_string(value.tag, value.content)? else {
                continue;
            };
            match oid.content {
                OID_COMMON_NAME => req.common_name = text.clone(),
                OID_ORGANIZATION => req.organizations.push(text.clone()),
                _ => {}
            }
            req.subject.push((oid.content.to_vec(), text));
        }
    }
    Ok(())
}

/// encoding/asn1's string types: Some(text), None for a value of another type, an error for
/// a string outside its alphabet.
fn asn1_string(tag: u8, v: &[u8]) -> Result<Option<String>, String> {
    let bad = |kind: &str| {
        Err(format!(
            "asn1: syntax error: {kind} contains invalid character"
        ))
    };
    let text = match tag {
        // PrintableString, with '*' and '&' as Go allows them.
        0x13 => {
            let ok = v
                .iter()
                .all(|&b| b.is_ascii_alphanumeric() || b" '()+,-./:=?*&".contains(&b));
            if !ok {
                return bad("PrintableString");
            }
            String::from_utf8_lossy(v).into_owned()
        }
        // NumericString
        0x12 => {
            if !v.iter().all(|&b| b.is_ascii_digit() || b == b' ') {
                return bad("NumericString");
            }
            String::from_utf8_lossy(v).into_owned()
        }
        // IA5String
        0x16 => {
            if !v.is_ascii() {
                return bad("IA5String");
            }
            String::from_utf8_lossy(v).into_owned()
        }
        // T61String: Go takes the bytes as they are.
        0x14 => String::from_utf8_lossy(v).into_owned(),
        // UTF8String
        0x0c => match std::str::from_utf8(v) {
            Ok(s) => s.to_string(),
            Err(_) => return Err("asn1: syntax error: invalid UTF-8 string".to_string()),
        },
        // BMPString: UTF-16BE, an optional 0x0000 terminator.
        0x1e => {
            if !v.len().is_multiple_of(2) {
                return Err("pkcs12: odd-length BMP string".to_string());
            }
            let v = v.strip_suffix(&[0, 0]).unwrap_or(v);
            let units: Vec<u16> = v
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            String::from_utf16_lossy(&units)
        }
        _ => return Ok(None),
    };
    Ok(Some(text))
}

/// The `extensionRequest` attributes (others, and attributes that do not parse, are skipped,
/// as Go skips them); duplicate extensions are refused; the SAN extension is read.
fn read_attributes(mut content: &[u8], req: &mut Request) -> Result<(), String> {
    let mut seen: Vec<&[u8]> = Vec::new();
    while !content.is_empty() {
        let (attr, rest) = der::read(content).ok_or_else(|| malformed("attributes"))?;
        content = rest;
        let Some(items) = (attr.tag == SEQUENCE)
            .then(|| der::children(attr.content))
            .flatten()
        else {
            continue;
        };
        let [oid, values] = items.as_slice() else {
            continue;
        };
        if oid.tag != OID || values.tag != SET {
            continue;
        }
        let Some(first) = der::children(values.content).and_then(|v| v.into_iter().next()) else {
            continue;
        };
        if oid.content != OID_EXTENSION_REQUEST {
            continue;
        }
        for ext in seq_children(&first, "requested extensions")? {
            let parts = seq_children(&ext, "extension")?;
            let (id, value) = match parts.as_slice() {
                [id, value] => (id, value),
                [id, critical, value] if critical.tag == BOOLEAN => (id, value),
                _ => return Err(malformed("extension")),
            };
            if id.tag != OID || value.tag != OCTET_STRING {
                return Err(malformed("extension"));
            }
            if seen.contains(&id.content) {
                return Err(
                    "x509: certificate request contains duplicate requested extensions".into(),
                );
            }
            seen.push(id.content);
            if id.content == OID_SUBJECT_ALT_NAME {
                read_san(value.content, req)?;
            }
        }
    }
    Ok(())
}

/// Go's `parseSANExtension`: rfc822Name, dNSName and URI must be IA5 text, an iPAddress 4 or
/// 16 bytes; other name forms are skipped. What follows the sequence is ignored, as there.
fn read_san(value: &[u8], req: &mut Request) -> Result<(), String> {
    let (names, _) = der::read(value)
        .filter(|(t, _)| t.tag == SEQUENCE)
        .ok_or_else(|| "x509: invalid subject alternative names".to_string())?;
    let mut rest = names.content;
    while !rest.is_empty() {
        let (name, r) =
            der::read(rest).ok_or_else(|| "x509: invalid subject alternative name".to_string())?;
        rest = r;
        let ia5 = |what: &str| {
            if name.content.is_ascii() {
                Ok(String::from_utf8_lossy(name.content).into_owned())
            } else {
                Err(format!("x509: SAN {what} is malformed"))
            }
        };
        match name.tag {
            0x81 => req.email_addresses.push(ia5("rfc822Name")?),
            0x82 => req.dns_names.push(ia5("dNSName")?),
            0x86 => req.uris.push(ia5("uniformResourceIdentifier")?),
            0x87 => match name.content.len() {
                4 | 16 => req.ip_addresses.push(name.content.to_vec()),
                n => return Err(format!("x509: cannot parse IP address of length {n}")),
            },
            _ => {}
        }
    }
    Ok(())
}

/// A request made by rcgen, as PEM (a kubelet's is made the same way by Go's x509).
#[cfg(test)]
pub(crate) fn request_pem(cn: &str, orgs: &[&str], sans: &[&str]) -> String {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut p =
        rcgen::CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .unwrap();
    p.distinguished_name = rcgen::DistinguishedName::new();
    for (i, o) in orgs.iter().enumerate() {
        // rcgen keeps one value per type: a second organization goes under its bare OID.
        let t = match i {
            0 => rcgen::DnType::OrganizationName,
            _ => rcgen::DnType::CustomDnType(vec![2, 5, 4, 10]),
        };
        p.distinguished_name.push(t, *o);
    }
    if !cn.is_empty() {
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
    }
    p.serialize_request(&key).unwrap().pem().unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_subject_sans_and_key() {
        let pem = request_pem("system:node:n1", &["system:nodes"], &[]);
        let r = parse_pem(pem.as_bytes()).expect("parses");
        assert_eq!(r.common_name, "system:node:n1");
        assert_eq!(r.organizations, ["system:nodes"]);
        assert!(r.dns_names.is_empty() && r.ip_addresses.is_empty());
        assert_eq!(r.public_key_algorithm, KeyAlgorithm::Ecdsa);

        let pem = request_pem(
            "system:node:n2",
            &["system:nodes", "other"],
            &["n2.example", "10.0.0.2", "::1"],
        );
        let r = parse_pem(pem.as_bytes()).expect("parses");
        assert_eq!(r.organizations, ["system:nodes", "other"]);
        assert_eq!(r.dns_names, ["n2.example"]);
        assert_eq!(r.ip_addresses.len(), 2);
        assert_eq!(r.ip_addresses[1].len(), 16);
    }

    #[test]
    fn refuses_what_go_refuses() {
        assert_eq!(
            parse_pem(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"),
            Err("PEM block type must be CERTIFICATE REQUEST".to_string())
        );
        assert!(parse_pem(b"").is_err());
        let pem = request_pem("system:node:n1", &["system:nodes"], &[]);
        let der = crate::pki::gopem::first_block(pem.as_bytes()).unwrap().der;
        let mut trailing = der.clone();
        trailing.push(0);
        assert!(parse_der(&trailing).unwrap_err().contains("trailing"));
        for cut in 0..der.len() {
            assert!(parse_der(&der[..cut]).is_err(), "cut at {cut}");
        }
        // A PrintableString with a character outside its alphabet.
        let bad = asn1_string(0x13, b"a@b");
        assert!(bad.is_err());
        assert_eq!(asn1_string(0x02, b"\x01"), Ok(None));
        assert_eq!(
            asn1_string(0x1e, &[0, b'h', 0, b'i', 0, 0]),
            Ok(Some("hi".into()))
        );
    }

    #[test]
    fn san_forms() {
        let mut r = Request::default();
        // otherName [0] constructed and directoryName [4] are skipped; an IP of 5 bytes is not.
        let san = der::write(
            SEQUENCE,
            &[der::write(0xa0, &[]), der::write(0xa4, &[])].concat(),
        );
        read_san(&san, &mut r).unwrap();
        assert_eq!(r, Request::default());
        let san = der::write(SEQUENCE, &der::write(0x87, &[1, 2, 3, 4, 5]));
        assert_eq!(
            read_san(&san, &mut r),
            Err("x509: cannot parse IP address of length 5".to_string())
        );
        let san = der::write(SEQUENCE, &der::write(0x82, "é".as_bytes()));
        assert!(read_san(&san, &mut r).is_err());
    }
}
