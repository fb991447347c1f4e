//! PKCS#10 certificate requests as the CSR approver reads them
//! (`controllers::certificates::request`): requests made by rcgen, mutated as DER trees (so
//! lengths stay right and parsing goes deep), as bytes and as PEM text, and random TLVs. The
//! reader answers with a request or an error, never a panic; unmutated requests read as what
//! they are.

use std::sync::OnceLock;

use super::certs::{decode, encode, mutate_tree, random_der};
use super::Gen;
use crate::controllers::certificates::request::{parse_der, parse_pem, request_pem};

struct Seed {
    pem: String,
    der: Vec<u8>,
    cn: &'static str,
}

fn seeds() -> &'static [Seed] {
    static S: OnceLock<Vec<Seed>> = OnceLock::new();
    S.get_or_init(|| {
        [
            ("system:node:n1", &["system:nodes"][..], &[][..]),
            (
                "system:node:n2",
                &["system:nodes", "x"][..],
                &["n2.example", "10.0.0.2"][..],
            ),
            ("é", &[][..], &["::1"][..]),
        ]
        .iter()
        .map(|(cn, orgs, sans)| {
            let pem = request_pem(cn, orgs, sans);
            let der = crate::pki::gopem::first_block(pem.as_bytes())
                .expect("a PEM block")
                .der;
            Seed { pem, der, cn }
        })
        .collect()
    })
}

const PEM_DICT: &[&[u8]] = &[
    b"-----BEGIN CERTIFICATE REQUEST-----\n",
    b"-----END CERTIFICATE REQUEST-----\n",
    b"-----BEGIN NEW CERTIFICATE REQUEST-----",
    b"-----",
    b"=",
    b"\r\n",
    b"MII",
    b"AAAA",
];

fn case(g: &mut Gen) {
    let s = seeds();
    let seed = &s[g.below(s.len())];
    match g.below(4) {
        0 => {
            let r = parse_pem(seed.pem.as_bytes()).expect("a seed request parses");
            assert_eq!(r.common_name, seed.cn);
            let bad = g.mutate(
                &seed.der,
                &[&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff], &[0x87, 0x05]],
            );
            g.note(&bad);
            let _ = parse_der(&bad);
        }
        1 => {
            let mut tree = decode(&seed.der, 0).expect("a seed request decodes");
            mutate_tree(g, &mut tree);
            let mut bad = Vec::new();
            encode(&tree, &mut bad);
            g.note(&bad);
            if let Err(e) = parse_der(&bad) {
                assert!(!e.is_empty());
            }
        }
        2 => {
            let bad = g.mutate(seed.pem.as_bytes(), PEM_DICT);
            g.note(String::from_utf8_lossy(&bad));
            let _ = parse_pem(&bad);
        }
        _ => {
            let bytes = random_der(g, 4);
            g.note(&bytes);
            let _ = parse_der(&bytes);
        }
    }
}

#[test]
fn fuzz_csr_request() {
    super::run("csr-request", 600, case);
}
