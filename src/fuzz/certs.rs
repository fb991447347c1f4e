//! PEM and DER in `certs` (`pki::der`, `load_key`, `first_cert`, `spki_bits`): certificates
//! and keys mutated as bytes and as DER trees (so that lengths stay right and parsing goes
//! deep), random TLVs with long and deep length fields, and mutated PEM text. Parsing gives a
//! value or None / an error with a message, never a panic; the unmutated inputs still parse
//! to what they are.

use std::path::Path;
use std::sync::OnceLock;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{PrivateKeyDer, SubjectPublicKeyInfoDer};

use super::Gen;
use crate::certs::{first_cert, load_key, spki_bits};
use crate::pki::der::{self, BIT_STRING, INTEGER, OCTET_STRING, OID, SEQUENCE, SET};

const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

struct Seeds {
    /// DER certificates with their common names.
    certs: Vec<(Vec<u8>, String)>,
    /// PEM private keys (PKCS#8 EC, SEC1 EC, PKCS#1 RSA) with their public key bits.
    keys: Vec<(String, Vec<u8>)>,
    /// PEM public key (SPKI) and its key bits.
    spki: (String, Vec<u8>),
}

/// The SEC1 key inside an EC PKCS#8 key, with its curve named (as `openssl ec` writes it).
fn sec1_of(pkcs8: &[u8]) -> Vec<u8> {
    let outer = der::read_exact(pkcs8, SEQUENCE).unwrap();
    let parts = der::children(outer.content).unwrap();
    let inner = der::read_exact(parts[2].content, SEQUENCE).unwrap();
    let items = der::children(inner.content).unwrap();
    let mut content = Vec::new();
    content.extend_from_slice(items[0].raw);
    content.extend_from_slice(items[1].raw);
    content.extend(der::write(0xa0, &der::write(OID, der::OID_P256)));
    for rest in &items[2..] {
        content.extend_from_slice(rest.raw);
    }
    der::write(SEQUENCE, &content)
}

fn seeds() -> &'static Seeds {
    static S: OnceLock<Seeds> = OnceLock::new();
    S.get_or_init(|| {
        let ca_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut ca = rcgen::CertificateParams::new(vec!["ca.example".to_string()]).unwrap();
        ca.distinguished_name = rcgen::DistinguishedName::new();
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "fuzz CA é");
        ca.distinguished_name
            .push(rcgen::DnType::OrganizationName, "edgekcm");
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let leaf_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384).unwrap();
        let mut leaf =
            rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
                .unwrap();
        leaf.distinguished_name = rcgen::DistinguishedName::new();
        leaf.distinguished_name
            .push(rcgen::DnType::CommonName, "leaf");
        let leaf_cert = leaf.signed_by(&leaf_key, &issuer).unwrap();

        let ec = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let sec1 = sec1_of(&ec.serialize_der());
        let rsa_pem = include_str!("../../tests/fixtures/rsa-pkcs1.key").to_string();
        let rsa_bits = load_key(rsa_pem.as_bytes())
            .unwrap()
            .public_key_raw()
            .to_vec();
        Seeds {
            certs: vec![
                (ca_cert.der().to_vec(), "fuzz CA é".to_string()),
                (leaf_cert.der().to_vec(), "leaf".to_string()),
            ],
            keys: vec![
                (ec.serialize_pem(), ec.public_key_raw().to_vec()),
                (
                    crate::certs::pem_encode("EC PRIVATE KEY", &sec1),
                    ec.public_key_raw().to_vec(),
                ),
                (rsa_pem, rsa_bits),
            ],
            spki: (ec.public_key_pem(), ec.public_key_raw().to_vec()),
        }
    })
}

// ---------------------------------------------------------------------------------------------
// DER as a tree, to mutate without breaking the lengths around the change

#[derive(Clone, Debug)]
pub(super) enum Node {
    Prim(u8, Vec<u8>),
    /// A constructed element, or an OCTET STRING that holds DER (extension values).
    Cons(u8, Vec<Node>),
}

pub(super) fn decode(mut bytes: &[u8], depth: usize) -> Option<Vec<Node>> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let (t, rest) = der::read(bytes)?;
        let nested = depth < 30 && (t.tag & 0x20 != 0 || t.tag == OCTET_STRING);
        out.push(
            match nested.then(|| decode(t.content, depth + 1)).flatten() {
                Some(kids) if !(t.tag == OCTET_STRING && kids.is_empty()) => {
                    Node::Cons(t.tag, kids)
                }
                _ => Node::Prim(t.tag, t.content.to_vec()),
            },
        );
        bytes = rest;
    }
    Some(out)
}

pub(super) fn encode(nodes: &[Node], out: &mut Vec<u8>) {
    for n in nodes {
        match n {
            Node::Prim(tag, c) => out.extend(der::write(*tag, c)),
            Node::Cons(tag, kids) => {
                let mut inner = Vec::new();
                encode(kids, &mut inner);
                out.extend(der::write(*tag, &inner));
            }
        }
    }
}

fn count(nodes: &[Node]) -> usize {
    nodes
        .iter()
        .map(|n| match n {
            Node::Prim(..) => 1,
            Node::Cons(_, k) => 1 + count(k),
        })
        .sum()
}

/// Apply `f` to the `i`-th node in document order.
fn at(nodes: &mut [Node], i: &mut usize, f: &mut dyn FnMut(&mut Node)) -> bool {
    for n in nodes {
        if *i == 0 {
            f(n);
            return true;
        }
        *i -= 1;
        if let Node::Cons(_, kids) = n {
            if at(kids, i, f) {
                return true;
            }
        }
    }
    false
}

/// Content worth putting where a time, a string, an OID or an integer was.
fn content(g: &mut Gen) -> Vec<u8> {
    match g.below(7) {
        0 => g.unicode(14).into_bytes(),
        1 => {
            // 12 or 14 bytes and a Z (the lengths of the two time forms), some of them not
            // digits, some characters more than one byte long.
            let len = if g.one_in(2) { 12 } else { 14 };
            let mut s = String::new();
            while s.len() < len {
                let c = if g.one_in(6) {
                    g.pick(&['é', '€', 'x', '\u{10000}'])
                } else {
                    char::from(b'0' + g.rng.u8(..10))
                };
                if s.len() + c.len_utf8() <= len {
                    s.push(c);
                }
            }
            s.push('Z');
            s.into_bytes()
        }
        2 => vec![0xff; g.size(12)],
        3 => vec![0x80; g.size(12)],
        4 => g.bytes(40),
        5 => vec![g.rng.u8(..); g.size(70_000)],
        _ => Vec::new(),
    }
}

pub(super) fn mutate_tree(g: &mut Gen, tree: &mut [Node]) {
    for _ in 0..1 + g.below(3) {
        let mut i = g.below(count(tree));
        at(tree, &mut i, &mut |node| mutate_node(g, node));
    }
}

fn mutate_node(g: &mut Gen, node: &mut Node) {
    match g.below(6) {
        0 | 1 => {
            let tag = match node {
                Node::Prim(t, _) | Node::Cons(t, _) => *t,
            };
            let tag = if g.one_in(4) {
                g.pick(&[
                    UTC_TIME,
                    GENERALIZED_TIME,
                    0x0c,
                    0x13,
                    0x1e,
                    0x1c,
                    0x16,
                    OID,
                    INTEGER,
                ])
            } else {
                tag
            };
            *node = Node::Prim(tag, content(g));
        }
        2 => {
            let tag = g.pick(&[SEQUENCE, SET, 0xa0, 0xa3, BIT_STRING, 0x1f, 0x00]);
            match node {
                Node::Prim(t, _) | Node::Cons(t, _) => *t = tag,
            }
        }
        3 => {
            // Wrapped deep (as bytes: the tree code here recurses, the parsers must not).
            let mut bytes = Vec::new();
            encode(std::slice::from_ref(node), &mut bytes);
            for _ in 0..g.size(3000) {
                bytes = der::write(SEQUENCE, &bytes);
            }
            *node = Node::Prim(SEQUENCE, bytes);
        }
        4 => {
            if let Node::Cons(_, kids) = node {
                if !kids.is_empty() {
                    let k = g.below(kids.len());
                    if g.one_in(2) {
                        kids.remove(k);
                    } else {
                        let copy = kids[k].clone();
                        kids.insert(k, copy);
                    }
                }
            }
        }
        _ => {
            if let Node::Cons(_, kids) = node {
                g.rng.shuffle(kids);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Random TLVs with odd lengths

pub(super) fn random_der(g: &mut Gen, depth: usize) -> Vec<u8> {
    let tag = g.pick(&[
        SEQUENCE,
        SET,
        INTEGER,
        OID,
        OCTET_STRING,
        BIT_STRING,
        0xa0,
        0xa3,
        UTC_TIME,
        0x1f,
        0xff,
    ]);
    let content = if depth > 0 && g.one_in(2) {
        (0..g.below(4))
            .flat_map(|_| random_der(g, depth - 1))
            .collect()
    } else {
        g.bytes(20)
    };
    let mut out = vec![tag];
    match g.below(6) {
        0 => {
            // Long form with a lying or oversized length.
            let n = 1 + g.below(9);
            out.push(0x80 | n as u8);
            for _ in 0..n {
                out.push(g.pick(&[0x00, 0x01, 0x7f, 0x80, 0xff]));
            }
        }
        1 => out.push(0x80), // indefinite
        2 => out.push(g.rng.u8(..)),
        _ => {
            out = der::write(tag, &content);
            return out;
        }
    }
    out.extend(content);
    out
}

// ---------------------------------------------------------------------------------------------

/// Everything that reads DER, on one input; nothing may panic.
fn read_all(bytes: &[u8]) {
    if let Some(info) = der::parse_cert(bytes) {
        let range = bytes.as_ptr_range();
        for part in [info.subject, info.issuer, info.public_key] {
            assert!(range.contains(&part.as_ptr()) || part.is_empty());
        }
        if let Err(e) = der::distinguished_name(info.subject) {
            assert!(!e.is_empty());
        }
    }
    if let Err(e) = der::distinguished_name(bytes) {
        assert!(!e.is_empty());
    }
    if let Err(e) = der::sec1_to_pkcs8(bytes) {
        assert!(!e.is_empty());
    }
    let _ = der::oid_arcs(bytes);
    let _ = der::children(bytes);
}

const PEM_DICT: &[&[u8]] = &[
    b"-----BEGIN PRIVATE KEY-----\n",
    b"-----END PRIVATE KEY-----\n",
    b"-----BEGIN CERTIFICATE-----\n",
    b"-----END CERTIFICATE-----",
    b"-----BEGIN EC PRIVATE KEY-----",
    b"-----BEGIN RSA PRIVATE KEY-----",
    b"-----BEGIN ENCRYPTED PRIVATE KEY-----",
    b"-----BEGIN PUBLIC KEY-----",
    b"-----",
    b"=",
    b"==",
    b"\r\n",
    b"\n",
    b"Proc-Type: 4,ENCRYPTED\n",
    b"MII",
    b"AAAA",
    b"////",
    b"\xc3\xa9",
    b"\xe2\x82\xac",
];

fn case(g: &mut Gen) {
    let s = seeds();
    match g.below(6) {
        0 => {
            // Certificates: unmutated ones parse to what they are; mutated bytes do not panic.
            let (cert, cn) = &s.certs[g.below(s.certs.len())];
            let info = der::parse_cert(cert).expect("a seed certificate parses");
            assert_eq!(info.common_name.as_deref(), Some(cn.as_str()));
            let dn = der::distinguished_name(info.subject).expect("its name rebuilds");
            drop(dn);
            let bad = g.mutate(
                cert,
                &[
                    &[0x30, 0x84, 0xff, 0xff, 0xff, 0xff],
                    &[0x17, 0x0d],
                    b"\xe2\x82\xac",
                ],
            );
            g.note(&bad);
            read_all(&bad);
        }
        1 | 2 => {
            let (cert, _) = &s.certs[g.below(s.certs.len())];
            let mut tree = decode(cert, 0).expect("a seed certificate decodes");
            let mut same = Vec::new();
            encode(&tree, &mut same);
            assert_eq!(&same, cert);
            mutate_tree(g, &mut tree);
            let mut bad = Vec::new();
            encode(&tree, &mut bad);
            g.note(&bad);
            read_all(&bad);
        }
        3 => {
            let bytes = random_der(g, 4);
            g.note(&bytes);
            read_all(&bytes);
            // Round trip of what `write` makes.
            let content = g.bytes(300);
            let enc = der::write(OCTET_STRING, &content);
            let t = der::read_exact(&enc, OCTET_STRING).unwrap();
            assert_eq!(t.content, &content[..]);
        }
        4 => {
            // Keys: the seeds load with their public keys; mutated PEM gives a key or a message.
            let (pem, bits) = &s.keys[g.below(s.keys.len())];
            let key = load_key(pem.as_bytes()).expect("a seed key loads");
            assert_eq!(key.public_key_raw(), &bits[..]);
            let bad = g.mutate(pem.as_bytes(), PEM_DICT);
            g.note(String::from_utf8_lossy(&bad));
            if let Err(e) = load_key(&bad) {
                assert!(!e.is_empty());
            }
            // The DER inside, mutated.
            if let Ok(der) = PrivateKeyDer::from_pem_slice(pem.as_bytes()) {
                let inner = g.mutate(der.secret_der(), &[&[0x30, 0x82], &[0x04, 0x81]]);
                read_all(&inner);
            }
        }
        _ => {
            let (cert, cn) = &s.certs[g.below(s.certs.len())];
            let cert_pem = crate::certs::pem_encode("CERTIFICATE", cert);
            let first = first_cert(cert_pem.as_bytes(), Path::new("c.pem")).unwrap();
            assert_eq!(
                der::parse_cert(&first).unwrap().common_name.as_deref(),
                Some(cn.as_str())
            );
            let (spki_pem, bits) = &s.spki;
            assert_eq!(spki_bits(spki_pem.as_bytes()).as_deref(), Some(&bits[..]));
            let which = g.below(2);
            let seed = if which == 0 { &cert_pem } else { spki_pem };
            let bad = g.mutate(seed.as_bytes(), PEM_DICT);
            g.note(String::from_utf8_lossy(&bad));
            match first_cert(&bad, Path::new("c.pem")) {
                Ok(c) => read_all(&c),
                Err(e) => assert!(e.to_string().starts_with("c.pem: ")),
            }
            let _ = spki_bits(&bad);
            let _ = SubjectPublicKeyInfoDer::from_pem_slice(&bad);
        }
    }
}

#[test]
fn fuzz_pem_der() {
    super::run("pem-der", 600, case);
}
