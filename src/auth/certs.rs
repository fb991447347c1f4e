//! Client certificates: a CA bundle that verifies a client's chain, and the subject's
//! common name and organisations read from the certificate.

use super::*;

// ---------------------------------------------------------------------------------------------
// Certificates

/// A CA bundle ready to verify client certificate chains.
#[derive(Clone)]
pub struct CaBundle {
    pub(super) verifier: Arc<dyn ClientCertVerifier>,
}

impl std::fmt::Debug for CaBundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CaBundle")
    }
}

impl CaBundle {
    /// Every certificate of the PEM bundle becomes a root; any unreadable one is an error.
    pub fn from_pem(pem: &[u8]) -> std::result::Result<CaBundle, String> {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(pem) {
            let c = c.map_err(|e| format!("unable to parse the CA bundle: {e}"))?;
            roots
                .add(c)
                .map_err(|e| format!("unusable CA certificate: {e}"))?;
        }
        if roots.is_empty() {
            return Err("the CA bundle holds no certificate".into());
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| format!("CA bundle: {e}"))?;
        Ok(CaBundle { verifier })
    }

    /// Verify a chain (leaf first) for client authentication, as of now.
    pub fn verify(&self, chain: &[Vec<u8>]) -> std::result::Result<(), String> {
        let Some(leaf) = chain.first() else {
            return Err("no certificate".into());
        };
        let leaf = CertificateDer::from(leaf.as_slice());
        let intermediates: Vec<CertificateDer<'_>> = chain[1..]
            .iter()
            .map(|c| CertificateDer::from(c.as_slice()))
            .collect();
        self.verifier
            .verify_client_cert(&leaf, &intermediates, UnixTime::now())
            .map(|_| ())
            .map_err(|e| format!("verifying certificate failed: {e}"))
    }
}

/// One DER TLV: (tag, contents, rest).
pub(super) fn der_next(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let tag = *input.first()?;
    let first = *input.get(1)?;
    let (len, header) = if first < 0x80 {
        (first as usize, 2)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 {
            return None;
        }
        let mut len = 0usize;
        for i in 0..n {
            len = (len << 8) | *input.get(2 + i)? as usize;
        }
        (len, 2 + n)
    };
    let end = header.checked_add(len)?;
    if end > input.len() {
        return None;
    }
    Some((tag, &input[header..end], &input[end..]))
}

pub(super) fn der_string(tag: u8, v: &[u8]) -> Option<String> {
    match tag {
        // UTF8String, PrintableString, IA5String, T61String, NumericString
        0x0c | 0x13 | 0x16 | 0x14 | 0x12 => Some(String::from_utf8_lossy(v).into_owned()),
        // BMPString (UTF-16BE)
        0x1e => {
            let units: Vec<u16> = v
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            Some(String::from_utf16_lossy(&units))
        }
        _ => None,
    }
}

pub(super) const OID_COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];
pub(super) const OID_ORGANIZATION: &[u8] = &[0x55, 0x04, 0x0a];

/// The subject's common name (the last one, as Go) and organizations of a DER certificate.
pub fn subject_cn_and_orgs(der: &[u8]) -> Option<(String, Vec<String>)> {
    let (tag, cert, _) = der_next(der)?;
    if tag != 0x30 {
        return None;
    }
    let (tag, tbs, _) = der_next(cert)?;
    if tag != 0x30 {
        return None;
    }
    let (tag, _, mut rest) = der_next(tbs)?;
    if tag == 0xa0 {
        // [0] version, then the serial number.
        rest = der_next(rest)?.2;
    }
    // signature algorithm, issuer, validity
    for _ in 0..3 {
        rest = der_next(rest)?.2;
    }
    let (tag, mut subject, _) = der_next(rest)?;
    if tag != 0x30 {
        return None;
    }
    let (mut cn, mut orgs) = (String::new(), Vec::new());
    while !subject.is_empty() {
        let (tag, mut set, r) = der_next(subject)?;
        subject = r;
        if tag != 0x31 {
            return None;
        }
        while !set.is_empty() {
            let (tag, atv, r) = der_next(set)?;
            set = r;
            if tag != 0x30 {
                return None;
            }
            let (tag, oid, r) = der_next(atv)?;
            if tag != 0x06 {
                return None;
            }
            let (vtag, value, _) = der_next(r)?;
            let Some(text) = der_string(vtag, value) else {
                continue;
            };
            if oid == OID_COMMON_NAME {
                cn = text;
            } else if oid == OID_ORGANIZATION {
                orgs.push(text);
            }
        }
    }
    Some((cn, orgs))
}
