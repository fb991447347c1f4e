//! A certificate's public key read without webpki, which parses only X.509 v3 certificates:
//! `openssl x509 -req` without an extensions file makes v1 certificates, and Go's TLS stack
//! (kube-apiserver, client-go, upstream KCM) accepts them as client certificates. Used to
//! check that a client key belongs to its certificate, and to check a TLS handshake signature
//! made with a v1 certificate's key.

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::{CertificateError, DigitallySignedStruct, PeerMisbehaved};
use rustls_pki_types::SubjectPublicKeyInfoDer;

use super::der;

/// A SubjectPublicKeyInfo: its AlgorithmIdentifier (contents, as webpki's algorithm IDs are
/// written), the algorithm OID and OID parameter (the curve of an EC key; a NULL or absent
/// parameter is `None`), and the public key bits.
#[derive(Debug, Clone, Copy)]
pub struct PublicKey<'a> {
    pub algorithm_id: &'a [u8],
    pub algorithm: &'a [u8],
    pub parameter: Option<&'a [u8]>,
    pub bits: &'a [u8],
}

impl<'a> PublicKey<'a> {
    /// Read a DER SubjectPublicKeyInfo.
    pub fn read(spki: &'a [u8]) -> Option<PublicKey<'a>> {
        let seq = der::read_exact(spki, der::SEQUENCE)?;
        let [alg, bits] = <[der::Tlv<'_>; 2]>::try_from(der::children(seq.content)?).ok()?;
        if alg.tag != der::SEQUENCE || bits.tag != der::BIT_STRING {
            return None;
        }
        let mut parts = der::children(alg.content)?.into_iter();
        let algorithm = parts.next().filter(|t| t.tag == der::OID)?.content;
        let parameter = match parts.next() {
            None => None,
            Some(t) if t.tag == der::NULL => None,
            Some(t) if t.tag == der::OID => Some(t.content),
            Some(_) => return None,
        };
        if parts.next().is_some() {
            return None;
        }
        Some(PublicKey {
            algorithm_id: alg.content,
            algorithm,
            parameter,
            bits: bits.content.strip_prefix(&[0u8])?,
        })
    }

    /// The same key: same algorithm and curve, same bits (an RSA AlgorithmIdentifier with or
    /// without its NULL parameter names the same key).
    pub fn same_key(&self, other: &PublicKey<'_>) -> bool {
        self.algorithm == other.algorithm
            && self.parameter == other.parameter
            && self.bits == other.bits
    }
}

/// The SubjectPublicKeyInfo of a version 1 certificate (no `[0]` version field); `None` for
/// any other version, or if it does not parse.
pub fn v1_spki(cert: &[u8]) -> Option<&[u8]> {
    let outer = der::read_exact(cert, der::SEQUENCE)?;
    let (tbs, _) = der::read(outer.content)?;
    let (first, _) = der::read(tbs.content)?;
    if tbs.tag != der::SEQUENCE || first.tag != der::INTEGER {
        return None;
    }
    Some(der::parse_cert(cert)?.spki)
}

/// rustls' `verify_tls12_signature` for a key given as its SubjectPublicKeyInfo (rustls has
/// that form for TLS 1.3 only): one of the scheme's algorithms for this kind of key must
/// verify the signature.
pub fn verify_tls12_signature_with_spki(
    message: &[u8],
    spki: &[u8],
    dss: &DigitallySignedStruct,
    algs: &WebPkiSupportedAlgorithms,
) -> Result<HandshakeSignatureValid, rustls::Error> {
    let candidates = algs
        .mapping
        .iter()
        .find(|(scheme, _)| *scheme == dss.scheme)
        .map(|(_, a)| *a)
        .ok_or(PeerMisbehaved::SignedHandshakeWithUnadvertisedSigScheme)?;
    let key = PublicKey::read(spki).ok_or(CertificateError::BadEncoding)?;
    let alg = candidates
        .iter()
        .find(|a| a.public_key_alg_id().as_ref() == key.algorithm_id)
        .ok_or(
            CertificateError::UnsupportedSignatureAlgorithmForPublicKeyContext {
                signature_algorithm_id: Vec::new(),
                public_key_algorithm_id: key.algorithm_id.to_vec(),
            },
        )?;
    alg.verify_signature(key.bits, message, dss.signature())
        .map(|()| HandshakeSignatureValid::assertion())
        .map_err(|_| CertificateError::BadSignature.into())
}

/// rustls' `verify_tls13_signature`, for a key given as its SubjectPublicKeyInfo.
pub fn verify_tls13_signature_with_spki(
    message: &[u8],
    spki: &[u8],
    dss: &DigitallySignedStruct,
    algs: &WebPkiSupportedAlgorithms,
) -> Result<HandshakeSignatureValid, rustls::Error> {
    rustls::crypto::verify_tls13_signature_with_raw_key(
        message,
        &SubjectPublicKeyInfoDer::from(spki),
        dss,
        algs,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::CertificateDer;

    #[test]
    fn same_key() {
        // An RSA algorithm identifier with or without its NULL parameter names the same key.
        let rsa = der::write(der::OID, der::OID_RSA_ENCRYPTION);
        let alg_null = der::write(
            der::SEQUENCE,
            &[rsa.clone(), der::write(der::NULL, &[])].concat(),
        );
        let alg_bare = der::write(der::SEQUENCE, &rsa);
        let bits = der::write(der::BIT_STRING, &[0, 0x30, 0x00]);
        let spki = |alg: &[u8]| der::write(der::SEQUENCE, &[alg, &bits[..]].concat());
        let (a, b) = (spki(&alg_null), spki(&alg_bare));
        assert!(PublicKey::read(&a)
            .unwrap()
            .same_key(&PublicKey::read(&b).unwrap()));
        // The curve counts.
        let ec = |curve: &[u8]| {
            spki(&der::write(
                der::SEQUENCE,
                &[
                    der::write(der::OID, der::OID_EC_PUBLIC_KEY),
                    der::write(der::OID, curve),
                ]
                .concat(),
            ))
        };
        let (p256, p384) = (ec(der::OID_P256), ec(der::OID_P384));
        assert!(!PublicKey::read(&p256)
            .unwrap()
            .same_key(&PublicKey::read(&p384).unwrap()));
        assert!(PublicKey::read(&p256[..p256.len() - 1]).is_none());
    }

    #[test]
    fn v1_only() {
        let v1 = CertificateDer::from_pem_slice(
            include_bytes!("../../tests/fixtures/test-only-v1-client-ec.crt").as_slice(),
        )
        .unwrap();
        let spki = v1_spki(&v1).unwrap();
        assert_eq!(
            PublicKey::read(spki).unwrap().parameter,
            Some(der::OID_P256)
        );
        // The fixture CA is v3.
        let v3 = CertificateDer::from_pem_slice(
            include_bytes!("../../tests/fixtures/test-only-v1-ca.crt").as_slice(),
        )
        .unwrap();
        assert!(der::parse_cert(&v3).is_some());
        assert!(v1_spki(&v3).is_none());
        assert!(v1_spki(b"\x30\x00").is_none());
    }
}
