//! PEM certificates and private keys read the way kube-controller-manager reads them (Go's
//! `encoding/pem`, client-go's `cert.ParseCertsPEM` and `keyutil.ParsePrivateKeyPEM`,
//! `crypto/tls.X509KeyPair`), so that what it refuses at start edgekcm refuses too, with the
//! same words. The DER is checked for its structure (and a key against its certificate); the
//! numbers are not validated beyond that.

use base64::Engine as _;

use crate::pki::der::{self, Tlv, BIT_STRING, INTEGER, OCTET_STRING, OID, SEQUENCE};

const CONTEXT_0: u8 = 0xa0;
const CONTEXT_1: u8 = 0xa1;
/// 1.2.840.10045.3.1.1 (P-192 is not one Go knows), 1.3.132.0.33/34/35: P-224, P-384, P-521.
const OID_P224: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x21];
const OID_P521: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x23];
const OID_ED25519: &[u8] = &[0x2b, 0x65, 0x70];
const OID_X25519: &[u8] = &[0x2b, 0x65, 0x6e];

/// One PEM block as Go's `pem.Decode` returns it.
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    pub kind: String,
    pub has_headers: bool,
    pub der: Vec<u8>,
}

/// Go's `getLine`: one line without its end and trailing blanks, and the rest.
fn get_line(data: &[u8]) -> (&[u8], &[u8]) {
    let (mut line, rest) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &data[data.len()..]),
    };
    if let Some(l) = line.strip_suffix(b"\r") {
        line = l;
    }
    while let Some(l) = line.strip_suffix(b" ").or_else(|| line.strip_suffix(b"\t")) {
        line = l;
    }
    (line, rest)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Go's `pem.Decode`: the next well-formed block and what follows it.
fn decode(data: &[u8]) -> Option<(Block, &[u8])> {
    const START: &[u8] = b"\n-----BEGIN ";
    const END: &[u8] = b"\n-----END ";
    const EOL: &[u8] = b"-----";
    let mut rest = data;
    loop {
        if rest.starts_with(&START[1..]) {
            rest = &rest[START.len() - 1..];
        } else if let Some(i) = find(rest, START) {
            rest = &rest[i + START.len()..];
        } else {
            return None;
        }
        let (type_line, after) = get_line(rest);
        rest = after;
        let Some(kind) = type_line.strip_suffix(EOL) else {
            continue;
        };
        let mut has_headers = false;
        loop {
            if rest.is_empty() {
                return None;
            }
            let (line, next) = get_line(rest);
            if !line.contains(&b':') {
                break;
            }
            has_headers = true;
            rest = next;
        }
        let (end_index, trailer_index) = if !has_headers && rest.starts_with(&END[1..]) {
            (0, END.len() - 1)
        } else {
            match find(rest, END) {
                Some(i) => (i, i + END.len()),
                None => continue,
            }
        };
        let trailer = &rest[trailer_index..];
        let trailer_len = kind.len() + EOL.len();
        if trailer.len() < trailer_len {
            continue;
        }
        let (end, rest_of_line) = trailer.split_at(trailer_len);
        if !end.starts_with(kind) || !end.ends_with(EOL) || !get_line(rest_of_line).0.is_empty() {
            continue;
        }
        let b64: Vec<u8> = rest[..end_index]
            .iter()
            .copied()
            .filter(|b| !matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
            .collect();
        let Ok(der) = base64::engine::general_purpose::STANDARD.decode(&b64) else {
            continue;
        };
        let (_, after_end) = get_line(&rest[end_index + END.len() - 1..]);
        return Some((
            Block {
                kind: String::from_utf8_lossy(kind).into_owned(),
                has_headers,
                der,
            },
            after_end,
        ));
    }
}

/// The first block, as one `pem.Decode` call finds it.
pub fn first_block(data: &[u8]) -> Option<Block> {
    decode(data).map(|(b, _)| b)
}

/// Every block, as repeated `pem.Decode` calls find them.
pub fn blocks(mut data: &[u8]) -> Vec<Block> {
    let mut out = Vec::new();
    while let Some((b, rest)) = decode(data) {
        out.push(b);
        data = rest;
    }
    out
}

fn seq(input: &[u8]) -> Option<Vec<Tlv<'_>>> {
    der::children(der::read_exact(input, SEQUENCE)?.content)
}

/// Structurally a certificate: `SEQ{SEQ tbs, SEQ algorithm, BIT STRING}`.
fn is_certificate(der: &[u8]) -> bool {
    matches!(seq(der).as_deref(), Some([a, b, c]) if a.tag == SEQUENCE && b.tag == SEQUENCE && c.tag == BIT_STRING)
}

/// client-go's `cert.ParseCertsPEM`: the number of certificates, or its error.
pub fn parse_certs_pem(data: &[u8]) -> Result<usize, String> {
    let mut n = 0;
    for b in blocks(data) {
        if b.kind != "CERTIFICATE" || b.has_headers {
            continue;
        }
        if !is_certificate(&b.der) {
            return Err("x509: malformed certificate".into());
        }
        n += 1;
    }
    if n == 0 {
        return Err("data does not contain any valid RSA or ECDSA certificates".into());
    }
    Ok(n)
}

/// A private key, as far as the checks need it.
#[derive(Debug, Clone, PartialEq)]
pub enum PrivateKey {
    /// The modulus, without leading zero bytes.
    Rsa(Vec<u8>),
    /// The public point, when the key carries it (openssl's and kubeadm's keys do).
    Ec {
        public: Option<Vec<u8>>,
    },
    Ed25519,
    X25519,
}

fn unsigned(int: &[u8]) -> Vec<u8> {
    let start = int.iter().position(|&b| b != 0).unwrap_or(int.len());
    int[start..].to_vec()
}

/// `x509.ParsePKCS1PrivateKey`'s structure: version 0 and eight integers.
fn pkcs1(der: &[u8]) -> Option<PrivateKey> {
    let items = seq(der)?;
    if items.len() < 9 || items.iter().take(9).any(|t| t.tag != INTEGER) {
        return None;
    }
    if items[0].content != [0] {
        return None;
    }
    Some(PrivateKey::Rsa(unsigned(items[1].content)))
}

fn known_curve(oid: &[u8]) -> bool {
    [OID_P224, der::OID_P256, der::OID_P384, OID_P521].contains(&oid)
}

/// `x509.ParseECPrivateKey`'s structure: version 1, the scalar, the curve (here or from the
/// PKCS#8 wrapping), the public point if given.
fn sec1(der: &[u8], outer_curve: Option<&[u8]>) -> Option<PrivateKey> {
    let items = seq(der)?;
    let version = items.first().filter(|t| t.tag == INTEGER)?;
    if version.content != [1] {
        return None;
    }
    items.get(1).filter(|t| t.tag == OCTET_STRING)?;
    let inner_curve = items
        .iter()
        .find(|t| t.tag == CONTEXT_0)
        .and_then(|p| der::read_exact(p.content, OID))
        .map(|o| o.content);
    // A curve Go knows, from here or from the PKCS#8 wrapping.
    outer_curve.or(inner_curve).filter(|c| known_curve(c))?;
    let public = items
        .iter()
        .find(|t| t.tag == CONTEXT_1)
        .and_then(|p| der::read_exact(p.content, BIT_STRING))
        .and_then(|b| b.content.strip_prefix(&[0u8]))
        .map(<[u8]>::to_vec);
    Some(PrivateKey::Ec { public })
}

/// `x509.ParsePKCS8PrivateKey`'s structure, for the algorithms Go knows.
fn pkcs8(der: &[u8]) -> Option<PrivateKey> {
    let items = seq(der)?;
    let (version, alg, key) = (items.first()?, items.get(1)?, items.get(2)?);
    if version.tag != INTEGER || alg.tag != SEQUENCE || key.tag != OCTET_STRING {
        return None;
    }
    let alg = der::children(alg.content)?;
    let oid = alg.first().filter(|t| t.tag == OID)?.content;
    if oid == der::OID_RSA_ENCRYPTION {
        pkcs1(key.content)
    } else if oid == der::OID_EC_PUBLIC_KEY {
        let curve = alg.get(1).filter(|t| t.tag == OID).map(|t| t.content);
        sec1(key.content, curve)
    } else if oid == OID_ED25519 || oid == OID_X25519 {
        let inner = der::read_exact(key.content, OCTET_STRING)?;
        (inner.content.len() == 32).then_some(if oid == OID_ED25519 {
            PrivateKey::Ed25519
        } else {
            PrivateKey::X25519
        })
    } else {
        None
    }
}

/// client-go's `keyutil.ParsePrivateKeyPEM`: the first key block that parses.
pub fn parse_private_key_pem(data: &[u8]) -> Result<PrivateKey, String> {
    for b in blocks(data) {
        let key = match b.kind.as_str() {
            "EC PRIVATE KEY" => sec1(&b.der, None),
            "RSA PRIVATE KEY" => pkcs1(&b.der),
            "PRIVATE KEY" => pkcs8(&b.der),
            _ => None,
        };
        if let Some(k) = key {
            return Ok(k);
        }
    }
    Err("data does not contain a valid RSA or ECDSA private key".into())
}

/// The public key of a certificate: its algorithm's OID and the subjectPublicKey bits.
fn cert_public_key(der: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let info = der::parse_cert(der)?;
    let spki = seq(info.spki)?;
    let alg = der::children(spki.first().filter(|t| t.tag == SEQUENCE)?.content)?;
    let oid = alg.first().filter(|t| t.tag == OID)?.content.to_vec();
    Some((oid, info.public_key.to_vec()))
}

/// Go's `tls.X509KeyPair`: the first certificate and the key must be readable and belong
/// together.
pub fn x509_key_pair(cert_pem: &[u8], key_pem: &[u8]) -> Result<(), String> {
    let mut certs = Vec::new();
    let mut skipped = Vec::new();
    for b in blocks(cert_pem) {
        if b.kind == "CERTIFICATE" {
            certs.push(b.der);
        } else {
            skipped.push(b.kind);
        }
    }
    if certs.is_empty() {
        return Err(match skipped.as_slice() {
            [] => "tls: failed to find any PEM data in certificate input".into(),
            [one] if one.ends_with("PRIVATE KEY") => "tls: failed to find certificate PEM data in certificate input, but did find a private key; PEM inputs may have been switched".into(),
            many => format!("tls: failed to find \"CERTIFICATE\" PEM block in certificate input after skipping PEM blocks of the following types: [{}]", many.join(" ")),
        });
    }
    let mut skipped = Vec::new();
    let key_block = blocks(key_pem)
        .into_iter()
        .find(|b| {
            let is_key = b.kind == "PRIVATE KEY" || b.kind.ends_with(" PRIVATE KEY");
            if !is_key {
                skipped.push(b.kind.clone());
            }
            is_key
        })
        .ok_or_else(|| match skipped.as_slice() {
            [] => "tls: failed to find any PEM data in key input".to_string(),
            [one] if one == "CERTIFICATE" => {
                "tls: found a certificate rather than a key in the PEM for the private key"
                    .to_string()
            }
            many => format!("tls: failed to find PEM block with type ending in \"PRIVATE KEY\" in key input after skipping PEM blocks of the following types: [{}]", many.join(" ")),
        })?;
    let (alg, public) =
        cert_public_key(&certs[0]).ok_or_else(|| "x509: malformed certificate".to_string())?;
    // Go's parsePrivateKey: PKCS#1, then PKCS#8, then SEC1, whatever the block's type.
    let key = pkcs1(&key_block.der)
        .or_else(|| pkcs8(&key_block.der))
        .or_else(|| sec1(&key_block.der, None))
        .ok_or_else(|| "tls: failed to parse private key".to_string())?;
    let mismatch = || Err("tls: private key does not match public key".to_string());
    let wrong_type = || Err("tls: private key type does not match public key type".to_string());
    match key {
        PrivateKey::X25519 => Err("tls: found unknown private key type in PKCS#8 wrapping".into()),
        _ if alg == der::OID_RSA_ENCRYPTION => match key {
            PrivateKey::Rsa(n) => {
                let cert_n = seq(&public)
                    .and_then(|p| p.first().map(|t| unsigned(t.content)))
                    .unwrap_or_default();
                if cert_n == n {
                    Ok(())
                } else {
                    mismatch()
                }
            }
            _ => wrong_type(),
        },
        _ if alg == der::OID_EC_PUBLIC_KEY => match key {
            PrivateKey::Ec { public: p } => match p {
                Some(point) if point == public => Ok(()),
                Some(_) => mismatch(),
                // Without its public point the key cannot be compared here (ring computes
                // no point from a scalar); such keys are rare, and the pair is trusted.
                None => Ok(()),
            },
            _ => wrong_type(),
        },
        _ if alg == OID_ED25519 => match key {
            PrivateKey::Ed25519 => Ok(()),
            _ => wrong_type(),
        },
        _ => Err("tls: unknown public key algorithm".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ca() -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(vec!["ca".into()]).unwrap();
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let cert = p.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn pem_blocks_as_go_finds_them() {
        let text = "junk before\n-----BEGIN A-----\nAAEC\n-----END A-----\n\
            -----BEGIN B-----\nProc-Type: 4,ENCRYPTED\n\nAAEC\n-----END B-----\n\
            -----BEGIN C-----\nnot base64!\n-----END C-----\n\
            -----BEGIN D-----\r\nAA\r\nEC\r\n-----END D-----  \n";
        let b = blocks(text.as_bytes());
        let kinds: Vec<(&str, bool)> = b.iter().map(|b| (b.kind.as_str(), b.has_headers)).collect();
        assert_eq!(kinds, [("A", false), ("B", true), ("D", false)]);
        assert_eq!(b[0].der, [0, 1, 2]);
        assert_eq!(b[2].der, [0, 1, 2]);
        assert!(blocks(b"not pem\n").is_empty());
        // An END of another type does not close a block.
        assert!(blocks(b"-----BEGIN A-----\nAAEC\n-----END B-----\n").is_empty());
    }

    #[test]
    fn certificates() {
        let (cert, key) = ca();
        assert_eq!(parse_certs_pem(cert.as_bytes()), Ok(1));
        assert_eq!(parse_certs_pem(format!("{cert}{cert}").as_bytes()), Ok(2));
        let none = "data does not contain any valid RSA or ECDSA certificates";
        assert_eq!(parse_certs_pem(b"not pem\n").unwrap_err(), none);
        assert_eq!(parse_certs_pem(key.as_bytes()).unwrap_err(), none);
        assert_eq!(
            parse_certs_pem(
                crate::certs::pem_encode("CERTIFICATE", b"\x30\x03\x02\x01\x00").as_bytes()
            )
            .unwrap_err(),
            "x509: malformed certificate"
        );
    }

    #[test]
    fn private_keys() {
        let (_, key) = ca();
        assert!(matches!(
            parse_private_key_pem(key.as_bytes()),
            Ok(PrivateKey::Ec { .. })
        ));
        let rsa = include_str!("../../tests/fixtures/rsa-pkcs1.key");
        assert!(matches!(
            parse_private_key_pem(rsa.as_bytes()),
            Ok(PrivateKey::Rsa(_))
        ));
        // EC PARAMETERS before the key, as openssl writes them, are skipped.
        let with_params = format!(
            "{}{}",
            crate::certs::pem_encode("EC PARAMETERS", &der::write(OID, der::OID_P256)),
            key
        );
        assert!(parse_private_key_pem(with_params.as_bytes()).is_ok());
        let none = "data does not contain a valid RSA or ECDSA private key";
        assert_eq!(parse_private_key_pem(b"garbage").unwrap_err(), none);
        assert_eq!(
            parse_private_key_pem(
                crate::certs::pem_encode("RSA PRIVATE KEY", b"\x30\x00").as_bytes()
            )
            .unwrap_err(),
            none
        );
    }

    #[test]
    fn key_pairs() {
        let (cert, key) = ca();
        assert_eq!(x509_key_pair(cert.as_bytes(), key.as_bytes()), Ok(()));
        let (other_cert, other_key) = ca();
        assert_eq!(
            x509_key_pair(cert.as_bytes(), other_key.as_bytes()).unwrap_err(),
            "tls: private key does not match public key"
        );
        let rsa = include_str!("../../tests/fixtures/rsa-pkcs1.key");
        assert_eq!(
            x509_key_pair(other_cert.as_bytes(), rsa.as_bytes()).unwrap_err(),
            "tls: private key type does not match public key type"
        );
        assert_eq!(
            x509_key_pair(b"", key.as_bytes()).unwrap_err(),
            "tls: failed to find any PEM data in certificate input"
        );
        assert_eq!(
            x509_key_pair(key.as_bytes(), cert.as_bytes()).unwrap_err(),
            "tls: failed to find certificate PEM data in certificate input, but did find a private key; PEM inputs may have been switched"
        );
        assert_eq!(
            x509_key_pair(cert.as_bytes(), cert.as_bytes()).unwrap_err(),
            "tls: found a certificate rather than a key in the PEM for the private key"
        );
        assert_eq!(
            x509_key_pair(cert.as_bytes(), b"nope").unwrap_err(),
            "tls: failed to find any PEM data in key input"
        );
        assert_eq!(
            x509_key_pair(
                cert.as_bytes(),
                crate::certs::pem_encode("EC PRIVATE KEY", b"\x30\x00").as_bytes()
            )
            .unwrap_err(),
            "tls: failed to parse private key"
        );
        // A SEC1 key without its public point parses, and is not compared.
        let kp = rcgen::KeyPair::generate().unwrap();
        let kp_der = kp.serialize_der();
        let outer = seq(&kp_der).unwrap();
        let inner = seq(outer[2].content).unwrap();
        let bare = der::write(
            SEQUENCE,
            &[
                inner[0].raw.to_vec(),
                inner[1].raw.to_vec(),
                der::write(CONTEXT_0, &der::write(OID, der::OID_P256)),
            ]
            .concat(),
        );
        let bare_pem = crate::certs::pem_encode("EC PRIVATE KEY", &bare);
        let Ok(PrivateKey::Ec { public: None, .. }) = parse_private_key_pem(bare_pem.as_bytes())
        else {
            panic!("no bare SEC1 key")
        };
        assert_eq!(x509_key_pair(cert.as_bytes(), bare_pem.as_bytes()), Ok(()));
    }
}
