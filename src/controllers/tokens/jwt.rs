//! The legacy ServiceAccount token (upstream's `serviceaccount.JWTTokenGenerator` with
//! `LegacyClaims`): a JWS in compact form signed with `--service-account-private-key-file`.
//!
//! - Keys: RSA (PKCS#1 `RSA PRIVATE KEY`, as kubeadm writes `sa.key`, or PKCS#8 `PRIVATE
//!   KEY`) signs RS256; EC P-256 / P-384 (SEC1 `EC PRIVATE KEY` or PKCS#8) sign ES256 / ES384
//!   (the signature is `r || s`, fixed size, as JOSE has it). The first key block of the file
//!   that reads is used, as client-go's `keyutil.ParsePrivateKeyPEM`. P-521 (ES512) is
//!   refused with a clear error: ring has no P-521.
//! - Header `{"alg":"RS256","kid":"..."}`: `kid` is the base64url SHA-256 of the public key's
//!   DER SubjectPublicKeyInfo (`x509.MarshalPKIXPublicKey`), as upstream's `keyIDFromPublicKey`.
//! - Claims, keys sorted as Go writes the claim map: `iss` `kubernetes/serviceaccount`, the
//!   four `kubernetes.io/serviceaccount/...` claims (namespace, secret name, ServiceAccount
//!   name and UID) and `sub` `system:serviceaccount:<ns>:<name>`. No `exp`, `iat`, `nbf` or
//!   `aud`: legacy tokens do not expire.

use crate::compat::jws;
use crate::pki::der;
use crate::pki::gopem;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair as _, RsaKeyPair};

pub const LEGACY_ISSUER: &str = "kubernetes/serviceaccount";

use der::{OID_EC_PUBLIC_KEY as OID_EC, OID_P256, OID_P384, OID_RSA_ENCRYPTION as OID_RSA};
const CONTEXT_0: u8 = 0xa0;
const OID_P521: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x23];

enum Key {
    Rsa(RsaKeyPair),
    Ec(EcdsaKeyPair, &'static str),
}

/// A token signer made from a private key.
pub struct Signer {
    key: Key,
    kid: String,
    rng: SystemRandom,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("alg", &self.alg())
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

/// What goes into a legacy token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyClaims<'a> {
    pub namespace: &'a str,
    pub service_account_name: &'a str,
    pub service_account_uid: &'a str,
    pub secret_name: &'a str,
}

impl LegacyClaims<'_> {
    /// The payload, as Go's encoder writes the merged claim map (keys sorted).
    pub fn payload(&self) -> String {
        let sub = format!(
            "system:serviceaccount:{}:{}",
            self.namespace, self.service_account_name
        );
        jws::go_object(&[
            ("iss", LEGACY_ISSUER),
            ("kubernetes.io/serviceaccount/namespace", self.namespace),
            ("kubernetes.io/serviceaccount/secret.name", self.secret_name),
            (
                "kubernetes.io/serviceaccount/service-account.name",
                self.service_account_name,
            ),
            (
                "kubernetes.io/serviceaccount/service-account.uid",
                self.service_account_uid,
            ),
            ("sub", &sub),
        ])
    }
}

fn spki(alg: &[u8], params: &[u8], public: &[u8]) -> Vec<u8> {
    let mut bits = vec![0u8];
    bits.extend_from_slice(public);
    let alg_id = der::write(
        der::SEQUENCE,
        &[&der::write(der::OID, alg), params].concat(),
    );
    der::write(
        der::SEQUENCE,
        &[alg_id, der::write(der::BIT_STRING, &bits)].concat(),
    )
}

fn ec_alg(
    curve: &[u8],
) -> Result<(&'static signature::EcdsaSigningAlgorithm, &'static str), String> {
    match curve {
        OID_P256 => Ok((&signature::ECDSA_P256_SHA256_FIXED_SIGNING, "ES256")),
        OID_P384 => Ok((&signature::ECDSA_P384_SHA384_FIXED_SIGNING, "ES384")),
        OID_P521 => Err("P-521 (ES512) service account keys are not supported by edgekcm; use RSA, P-256 or P-384".into()),
        _ => Err("unknown private key curve, must be 256, 384, or 521".into()),
    }
}

/// The curve OID of a PKCS#8 key's AlgorithmIdentifier, or of a SEC1 key's parameters.
fn pkcs8_algorithm(pkcs8: &[u8]) -> Option<(Vec<u8>, Option<Vec<u8>>)> {
    let outer = der::children(der::read_exact(pkcs8, der::SEQUENCE)?.content)?;
    let alg = outer.get(1).filter(|t| t.tag == der::SEQUENCE)?;
    let parts = der::children(alg.content)?;
    let oid = parts
        .first()
        .filter(|t| t.tag == der::OID)?
        .content
        .to_vec();
    let param = parts
        .get(1)
        .filter(|t| t.tag == der::OID)
        .map(|t| t.content.to_vec());
    Some((oid, param))
}

fn sec1_curve(sec1: &[u8]) -> Option<Vec<u8>> {
    let items = der::children(der::read_exact(sec1, der::SEQUENCE)?.content)?;
    let p = items.iter().find(|t| t.tag == CONTEXT_0)?;
    Some(der::read_exact(p.content, der::OID)?.content.to_vec())
}

impl Signer {
    /// From the PEM text of a key file.
    pub fn from_pem(data: &[u8]) -> Result<Signer, String> {
        let mut last = None;
        for b in gopem::blocks(data) {
            let made = match b.kind.as_str() {
                "RSA PRIVATE KEY" => Some(Self::rsa(RsaKeyPair::from_der(&b.der))),
                "PRIVATE KEY" => Some(Self::pkcs8(&b.der)),
                "EC PRIVATE KEY" => Some(Self::sec1(&b.der)),
                _ => None,
            };
            match made {
                Some(Ok(s)) => return Ok(s),
                Some(Err(e)) => last = Some(e),
                None => {}
            }
        }
        Err(last.unwrap_or_else(|| {
            "data does not contain a valid RSA or ECDSA private key".to_string()
        }))
    }

    fn rsa(k: Result<RsaKeyPair, ring::error::KeyRejected>) -> Result<Signer, String> {
        let k = k.map_err(|e| format!("could not read the RSA key: {e}"))?;
        let kid = spki(OID_RSA, &der::write(der::NULL, &[]), k.public().as_ref());
        Ok(Signer {
            kid: jws::b64(ring::digest::digest(&ring::digest::SHA256, &kid).as_ref()),
            key: Key::Rsa(k),
            rng: SystemRandom::new(),
        })
    }

    fn ec(pkcs8: &[u8], curve: &[u8]) -> Result<Signer, String> {
        let (alg, name) = ec_alg(curve)?;
        let rng = SystemRandom::new();
        let k = EcdsaKeyPair::from_pkcs8(alg, pkcs8, &rng)
            .map_err(|e| format!("could not read the ECDSA key: {e}"))?;
        let public = spki(
            OID_EC,
            &der::write(der::OID, curve),
            k.public_key().as_ref(),
        );
        Ok(Signer {
            kid: jws::b64(ring::digest::digest(&ring::digest::SHA256, &public).as_ref()),
            key: Key::Ec(k, name),
            rng,
        })
    }

    fn pkcs8(pkcs8: &[u8]) -> Result<Signer, String> {
        match pkcs8_algorithm(pkcs8) {
            Some((oid, _)) if oid == OID_RSA => Self::rsa(RsaKeyPair::from_pkcs8(pkcs8)),
            Some((oid, Some(curve))) if oid == OID_EC => Self::ec(pkcs8, &curve),
            _ => Err("unknown private key type, must be *rsa.PrivateKey, *ecdsa.PrivateKey, or jose.OpaqueSigner".into()),
        }
    }

    fn sec1(sec1: &[u8]) -> Result<Signer, String> {
        let curve = sec1_curve(sec1).ok_or("the EC private key does not name its curve")?;
        ec_alg(&curve)?;
        let alg_id = der::write(
            der::SEQUENCE,
            &[der::write(der::OID, OID_EC), der::write(der::OID, &curve)].concat(),
        );
        let pkcs8 = der::write(
            der::SEQUENCE,
            &[
                der::write(der::INTEGER, &[0]),
                alg_id,
                der::write(der::OCTET_STRING, sec1),
            ]
            .concat(),
        );
        Self::ec(&pkcs8, &curve)
    }

    /// The JOSE algorithm: RS256, ES256 or ES384.
    pub fn alg(&self) -> &'static str {
        match &self.key {
            Key::Rsa(_) => "RS256",
            Key::Ec(_, alg) => alg,
        }
    }

    /// The key id of the header.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The public key as ring verifies with it (RSAPublicKey DER, or the uncompressed point).
    pub fn public_key(&self) -> Vec<u8> {
        match &self.key {
            Key::Rsa(k) => k.public().as_ref().to_vec(),
            Key::Ec(k, _) => k.public_key().as_ref().to_vec(),
        }
    }

    /// Sign a payload: the compact JWS.
    pub fn sign(&self, payload: &str) -> Result<String, String> {
        let header = jws::header(self.alg(), &self.kid);
        jws::compact(&header, payload.as_bytes(), |input| match &self.key {
            Key::Rsa(k) => {
                let mut sig = vec![0u8; k.public().modulus_len()];
                k.sign(&signature::RSA_PKCS1_SHA256, &self.rng, input, &mut sig)
                    .map_err(|_| "RSA signing failed".to_string())?;
                Ok(sig)
            }
            Key::Ec(k, _) => k
                .sign(&self.rng, input)
                .map(|s| s.as_ref().to_vec())
                .map_err(|_| "ECDSA signing failed".to_string()),
        })
    }

    /// The legacy token of a Secret for its ServiceAccount.
    pub fn legacy_token(&self, claims: &LegacyClaims<'_>) -> Result<String, String> {
        self.sign(&claims.payload())
    }
}
