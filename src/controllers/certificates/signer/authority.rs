//! A signer's CA and the certificates it issues, as upstream's `authority` package and Go's
//! `x509.CreateCertificate` make them: the request's subject re-encoded as Go encodes a
//! `pkix.Name`, its public key, DNS/email/IP/URI names, the usages as key usage and extended
//! key usage, `basicConstraints` CA:FALSE, an authority key identifier when the CA has a
//! subject key identifier, a random 128-bit serial, and the validity of upstream's
//! `PermissiveSigningPolicy` (5 minutes backdated, never past the CA's own expiry).
//!
//! The DER is built here and signed with ring: RSA CA keys sign SHA-256 with PKCS#1 v1.5,
//! ECDSA P-256 and P-384 keys SHA-256 and SHA-384, Ed25519 keys Ed25519, as Go chooses.
//! The request's own signature is checked first, as upstream checks it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use ring::rand::{SecureRandom, SystemRandom};
use ring::signature::{self as sig, KeyPair as _};

use super::super::request::Request;
use crate::pki::der::{self, BIT_STRING, BOOLEAN, INTEGER, NULL, OCTET_STRING, OID, SEQUENCE, SET};
use crate::pki::gopem;

const OID_SHA256_RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0b];
const OID_ECDSA_SHA256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];
const OID_ECDSA_SHA384: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03];
const OID_ECDSA_SHA512: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x04];
const OID_ED25519: &[u8] = &[0x2b, 0x65, 0x70];
const OID_SHA1_RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x05];
const OID_SHA384_RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0c];
const OID_SHA512_RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0d];
const OID_KEY_USAGE: &[u8] = &[0x55, 0x1d, 0x0f];
const OID_EXT_KEY_USAGE: &[u8] = &[0x55, 0x1d, 0x25];
const OID_BASIC_CONSTRAINTS: &[u8] = &[0x55, 0x1d, 0x13];
const OID_AUTHORITY_KEY_ID: &[u8] = &[0x55, 0x1d, 0x23];
const OID_SUBJECT_ALT_NAME: &[u8] = &[0x55, 0x1d, 0x11];

/// How far back certificates start, and below which lifetime the end is not moved back.
pub const BACKDATE: Duration = Duration::from_secs(5 * 60);
pub const SHORT: Duration = Duration::from_secs(8 * 3600);

/// The CA key, ready to sign.
enum SigningKey {
    Rsa(sig::RsaKeyPair),
    Ecdsa(sig::EcdsaKeyPair, &'static [u8]),
    Ed25519(sig::Ed25519KeyPair),
}

impl SigningKey {
    /// The first PEM block that is a key ring can sign with (client-go's
    /// `ParsePrivateKeyPEM` also takes the first key block that parses).
    fn from_pem(pem: &[u8]) -> Result<SigningKey, String> {
        let rng = SystemRandom::new();
        let ec = |pkcs8: &[u8]| {
            [
                (&sig::ECDSA_P256_SHA256_ASN1_SIGNING, OID_ECDSA_SHA256),
                (&sig::ECDSA_P384_SHA384_ASN1_SIGNING, OID_ECDSA_SHA384),
            ]
            .into_iter()
            .find_map(|(alg, oid)| {
                sig::EcdsaKeyPair::from_pkcs8(alg, pkcs8, &rng)
                    .ok()
                    .map(|k| SigningKey::Ecdsa(k, oid))
            })
        };
        for b in gopem::blocks(pem) {
            let key = match b.kind.as_str() {
                "RSA PRIVATE KEY" => sig::RsaKeyPair::from_der(&b.der).ok().map(SigningKey::Rsa),
                "EC PRIVATE KEY" => der::sec1_to_pkcs8(&b.der).ok().and_then(|p| ec(&p)),
                "PRIVATE KEY" => sig::RsaKeyPair::from_pkcs8(&b.der)
                    .ok()
                    .map(SigningKey::Rsa)
                    .or_else(|| ec(&b.der))
                    .or_else(|| {
                        sig::Ed25519KeyPair::from_pkcs8_maybe_unchecked(&b.der)
                            .ok()
                            .map(SigningKey::Ed25519)
                    }),
                _ => None,
            };
            if let Some(k) = key {
                return Ok(k);
            }
        }
        Err("data does not contain a private key edgekcm can sign with (RSA 2048-4096 bits, ECDSA P-256 or P-384 with its public key, Ed25519)".into())
    }

    fn algorithm(&self) -> Vec<u8> {
        match self {
            SigningKey::Rsa(_) => der::write(
                SEQUENCE,
                &[der::write(OID, OID_SHA256_RSA), der::write(NULL, &[])].concat(),
            ),
            SigningKey::Ecdsa(_, oid) => der::write(SEQUENCE, &der::write(OID, oid)),
            SigningKey::Ed25519(_) => der::write(SEQUENCE, &der::write(OID, OID_ED25519)),
        }
    }

    fn public_key(&self) -> &[u8] {
        match self {
            SigningKey::Rsa(k) => k.public().as_ref(),
            SigningKey::Ecdsa(k, _) => k.public_key().as_ref(),
            SigningKey::Ed25519(k) => k.public_key().as_ref(),
        }
    }

    fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, String> {
        let rng = SystemRandom::new();
        let fail = |_| "failed to sign certificate: the signature failed".to_string();
        match self {
            SigningKey::Rsa(k) => {
                let mut out = vec![0; k.public().modulus_len()];
                k.sign(&sig::RSA_PKCS1_SHA256, &rng, msg, &mut out)
                    .map_err(fail)?;
                Ok(out)
            }
            SigningKey::Ecdsa(k, _) => Ok(k.sign(&rng, msg).map_err(fail)?.as_ref().to_vec()),
            SigningKey::Ed25519(k) => Ok(k.sign(msg).as_ref().to_vec()),
        }
    }
}

/// A CA: its certificate's parts that go into what it signs, and its key.
pub struct Ca {
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
    /// The subject Name as encoded: the issuer of what it signs.
    subject: Vec<u8>,
    pub not_after: SystemTime,
    subject_key_id: Option<Vec<u8>>,
    key: SigningKey,
}

impl Ca {
    /// upstream's `setCA`: exactly one certificate, a key that signs for it.
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<Ca, String> {
        let n = gopem::parse_certs_pem(cert_pem)?;
        if n != 1 {
            return Err(format!("expected 1 certificate, found {n}"));
        }
        let block = gopem::blocks(cert_pem)
            .into_iter()
            .find(|b| b.kind == "CERTIFICATE")
            .ok_or("no certificate")?;
        let info = der::parse_cert(&block.der).ok_or("x509: malformed certificate")?;
        let key = SigningKey::from_pem(key_pem)?;
        if key.public_key() != info.public_key {
            return Err("the private key does not match the certificate".into());
        }
        Ok(Ca {
            cert_pem: cert_pem.to_vec(),
            key_pem: key_pem.to_vec(),
            subject: info.subject.to_vec(),
            not_after: info.not_after,
            subject_key_id: info.subject_key_id.map(<[u8]>::to_vec),
            key,
        })
    }

    /// upstream's `CertificateAuthority.Sign` with its `PermissiveSigningPolicy`: the
    /// certificate (DER) for a request whose signature holds.
    pub fn sign(
        &self,
        req: &Request,
        usages: &[&str],
        ttl: Duration,
        now: SystemTime,
    ) -> Result<Vec<u8>, String> {
        verify_request(req)
            .map_err(|e| format!("unable to verify certificate request signature: {e}"))?;
        let (key_usage, ext_key_usages) = super::policy::key_usages(usages)?;
        let not_before = now - BACKDATE;
        let mut not_after = if ttl < SHORT {
            now + ttl
        } else {
            now + ttl - BACKDATE
        };
        if not_after >= self.not_after {
            not_after = self.not_after;
        }
        let ca_end = crate::compat::timefmt::rfc3339(self.not_after);
        if not_before >= self.not_after {
            return Err(format!("the signer has expired: NotAfter={ca_end}"));
        }
        if now >= self.not_after {
            return Err(format!(
                "refusing to sign a certificate that expired in the past: NotAfter={ca_end}"
            ));
        }
        let subject = go_name(req);
        let mut exts = Vec::new();
        if key_usage != 0 {
            exts.push(extension(OID_KEY_USAGE, true, &key_usage_bits(key_usage)));
        }
        if !ext_key_usages.is_empty() {
            let oids: Vec<u8> = ext_key_usages
                .iter()
                .flat_map(|o| der::write(OID, o))
                .collect();
            exts.push(extension(
                OID_EXT_KEY_USAGE,
                false,
                &der::write(SEQUENCE, &oids),
            ));
        }
        exts.push(extension(
            OID_BASIC_CONSTRAINTS,
            true,
            &der::write(SEQUENCE, &[]),
        ));
        if let Some(id) = self
            .subject_key_id
            .as_ref()
            .filter(|_| subject != self.subject)
        {
            exts.push(extension(
                OID_AUTHORITY_KEY_ID,
                false,
                &der::write(SEQUENCE, &der::write(0x80, id)),
            ));
        }
        if let Some(names) = subject_alt_names(req) {
            // Critical when the subject is empty (RFC 5280 4.2.1.6), as Go marks it.
            let empty = subject == der::write(SEQUENCE, &[]);
            exts.push(extension(OID_SUBJECT_ALT_NAME, empty, &names));
        }
        let alg = self.key.algorithm();
        let tbs = der::write(
            SEQUENCE,
            &[
                der::write(0xa0, &der::write(INTEGER, &[2])),
                der::write(INTEGER, &serial()),
                alg.clone(),
                self.subject.clone(),
                der::write(SEQUENCE, &[time(not_before), time(not_after)].concat()),
                subject,
                req.spki.clone(),
                der::write(0xa3, &der::write(SEQUENCE, &exts.concat())),
            ]
            .concat(),
        );
        let signature = self.key.sign(&tbs)?;
        let mut bits = vec![0];
        bits.extend_from_slice(&signature);
        Ok(der::write(
            SEQUENCE,
            &[tbs, alg, der::write(BIT_STRING, &bits)].concat(),
        ))
    }
}

fn extension(oid: &[u8], critical: bool, value: &[u8]) -> Vec<u8> {
    let mut body = der::write(OID, oid);
    if critical {
        body.extend(der::write(BOOLEAN, &[0xff]));
    }
    body.extend(der::write(OCTET_STRING, value));
    der::write(SEQUENCE, &body)
}

/// Go's `marshalKeyUsage`: the bits of x509.KeyUsage (bit 0 = digitalSignature) as a DER
/// BIT STRING without trailing zero bits.
fn key_usage_bits(ku: u16) -> Vec<u8> {
    let a = [(ku as u8).reverse_bits(), ((ku >> 8) as u8).reverse_bits()];
    let bytes = if a[1] != 0 { &a[..] } else { &a[..1] };
    let last = bytes[bytes.len() - 1];
    let unused = if last == 0 {
        0
    } else {
        last.trailing_zeros() as u8
    };
    let mut content = vec![unused];
    content.extend_from_slice(bytes);
    der::write(BIT_STRING, &content)
}

/// 128 random bits as a positive DER INTEGER (Go's `rand.Int(rand.Reader, 1<<128)`).
fn serial() -> Vec<u8> {
    let mut b = [0u8; 16];
    if SystemRandom::new().fill(&mut b).is_err() {
        b.iter_mut().for_each(|x| *x = fastrand::u8(..));
    }
    let start = b.iter().position(|&x| x != 0).unwrap_or(15);
    let mut out = Vec::with_capacity(17);
    if b[start] & 0x80 != 0 {
        out.push(0);
    }
    out.extend_from_slice(&b[start..]);
    out
}

/// UTCTime for 1950-2049, GeneralizedTime otherwise (encoding/asn1's choice), to the second.
fn time(t: SystemTime) -> Vec<u8> {
    let s = crate::compat::timefmt::rfc3339(t);
    let digits: String = s.chars().filter(char::is_ascii_digit).collect();
    let year: u32 = digits.get(..4).and_then(|y| y.parse().ok()).unwrap_or(0);
    if (1950..2050).contains(&year) {
        der::write(0x17, format!("{}Z", &digits[2..14]).as_bytes())
    } else {
        der::write(0x18, format!("{}Z", &digits[..14]).as_bytes())
    }
}

/// encoding/asn1's PrintableString alphabet, without '*' and '&' (what it writes).
fn printable(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b" '()+,-./:=?".contains(&b))
}

/// The request's subject as Go re-encodes the parsed `pkix.Name` (`ToRDNSequence`): country,
/// province, locality, street, postal code, organization, organizational unit, the (last)
/// common name, the (last) serial number; each type one RDN holding all its values (a DER
/// SET, sorted); other attribute types are dropped, as Go drops them.
fn go_name(req: &Request) -> Vec<u8> {
    const ORDER: [(u8, bool); 9] = [
        (6, true),  // C
        (8, true),  // ST
        (7, true),  // L
        (9, true),  // street
        (17, true), // postalCode
        (10, true), // O
        (11, true), // OU
        (3, false), // CN
        (5, false), // serialNumber
    ];
    let mut rdns = Vec::new();
    for (arc, many) in ORDER {
        let oid = [0x55, 0x04, arc];
        let values: Vec<&str> = req
            .subject
            .iter()
            .filter(|(o, _)| o.as_slice() == oid)
            .map(|(_, v)| v.as_str())
            .collect();
        let values: Vec<&str> = match (many, values.last()) {
            (true, _) => values,
            (false, Some(v)) if !v.is_empty() => vec![*v],
            _ => vec![],
        };
        if values.is_empty() {
            continue;
        }
        let mut atvs: Vec<Vec<u8>> = values
            .iter()
            .map(|v| {
                let tag = if printable(v) { 0x13 } else { 0x0c };
                der::write(
                    SEQUENCE,
                    &[der::write(OID, &oid), der::write(tag, v.as_bytes())].concat(),
                )
            })
            .collect();
        crate::sort::sort(&mut atvs[..]);
        rdns.extend(der::write(SET, &atvs.concat()));
    }
    der::write(SEQUENCE, &rdns)
}

/// Go's `marshalSANs`: DNS names, emails, IP addresses (IPv4 in 4 bytes), URIs.
fn subject_alt_names(req: &Request) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    for d in &req.dns_names {
        out.extend(der::write(0x82, d.as_bytes()));
    }
    for e in &req.email_addresses {
        out.extend(der::write(0x81, e.as_bytes()));
    }
    for ip in &req.ip_addresses {
        let v4 = match ip.as_slice() {
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, rest @ ..] => rest,
            other => other,
        };
        out.extend(der::write(0x87, v4));
    }
    for u in &req.uris {
        out.extend(der::write(0x86, u.as_bytes()));
    }
    (!out.is_empty()).then(|| der::write(SEQUENCE, &out))
}

/// Go's `CertificateRequest.CheckSignature` for the algorithms ring verifies: RSA PKCS#1 v1.5
/// with SHA-1 (allowed for requests), SHA-256, -384, -512; ECDSA P-256 and P-384 with SHA-256
/// or SHA-384; Ed25519.
pub fn verify_request(req: &Request) -> Result<(), String> {
    let alg = der::read_exact(&req.signature_algorithm, SEQUENCE)
        .and_then(|t| der::children(t.content))
        .and_then(|c| {
            c.first()
                .filter(|t| t.tag == OID)
                .map(|t| t.content.to_vec())
        })
        .ok_or("x509: malformed signature algorithm")?;
    let spki = der::read_exact(&req.spki, SEQUENCE)
        .and_then(|t| der::children(t.content))
        .ok_or("x509: malformed public key")?;
    let key_alg = spki
        .first()
        .and_then(|a| der::children(a.content))
        .ok_or("x509: malformed public key")?;
    let curve = key_alg.get(1).filter(|t| t.tag == OID).map(|t| t.content);
    let key = spki
        .get(1)
        .filter(|t| t.tag == BIT_STRING)
        .and_then(|b| b.content.strip_prefix(&[0u8]))
        .ok_or("x509: malformed public key")?;
    let p256 = curve == Some(der::OID_P256);
    let p384 = curve == Some(der::OID_P384);
    let verifier: &dyn sig::VerificationAlgorithm = match alg.as_slice() {
        OID_SHA1_RSA => &sig::RSA_PKCS1_1024_8192_SHA1_FOR_LEGACY_USE_ONLY,
        OID_SHA256_RSA => &sig::RSA_PKCS1_1024_8192_SHA256_FOR_LEGACY_USE_ONLY,
        OID_SHA384_RSA => &sig::RSA_PKCS1_2048_8192_SHA384,
        OID_SHA512_RSA => &sig::RSA_PKCS1_1024_8192_SHA512_FOR_LEGACY_USE_ONLY,
        OID_ECDSA_SHA256 if p256 => &sig::ECDSA_P256_SHA256_ASN1,
        OID_ECDSA_SHA256 if p384 => &sig::ECDSA_P384_SHA256_ASN1,
        OID_ECDSA_SHA384 if p256 => &sig::ECDSA_P256_SHA384_ASN1,
        OID_ECDSA_SHA384 if p384 => &sig::ECDSA_P384_SHA384_ASN1,
        OID_ED25519 => &sig::ED25519,
        OID_ECDSA_SHA512 => return Err("x509: ECDSA with SHA-512 is not supported".into()),
        _ => return Err("x509: cannot verify signature: algorithm unimplemented".into()),
    };
    let failure = match alg.as_slice() {
        OID_ED25519 => "x509: Ed25519 verification failure",
        OID_ECDSA_SHA256 | OID_ECDSA_SHA384 => "x509: ECDSA verification failure",
        _ => "crypto/rsa: verification error",
    };
    sig::UnparsedPublicKey::new(verifier, key)
        .verify(&req.info, &req.signature)
        .map_err(|_| failure.to_string())
}

/// The files of one signer, re-read when they change on disk (upstream's
/// `dynamiccertificates` loader and `caProvider`): a change that does not make a usable pair
/// is logged and the CA in use is kept.
pub struct CaFiles {
    cert: PathBuf,
    key: PathBuf,
    state: Mutex<(Stamp, Arc<Ca>)>,
}

/// What tells a file changed without reading it: modification time, length, inode.
type Stamp = [(Option<SystemTime>, u64, u64); 2];

fn stamp(paths: [&Path; 2]) -> Stamp {
    paths.map(|p| match std::fs::metadata(p) {
        Ok(m) => {
            #[cfg(unix)]
            let ino = std::os::unix::fs::MetadataExt::ino(&m);
            #[cfg(not(unix))]
            let ino = 0;
            (m.modified().ok(), m.len(), ino)
        }
        Err(_) => (None, 0, 0),
    })
}

fn read_pair(cert: &Path, key: &Path) -> Result<(Vec<u8>, Vec<u8>), String> {
    let r = |p: &Path| std::fs::read(p).map_err(|e| crate::config::files::go_read_error(p, &e));
    Ok((r(cert)?, r(key)?))
}

impl CaFiles {
    pub fn load(cert: &Path, key: &Path) -> Result<CaFiles, String> {
        let st = stamp([cert, key]);
        let (c, k) = read_pair(cert, key)?;
        let ca = Ca::from_pem(&c, &k)?;
        Ok(CaFiles {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            state: Mutex::new((st, Arc::new(ca))),
        })
    }

    /// The CA to sign with now: re-read when either file changed since last looked at.
    pub fn current(&self) -> Arc<Ca> {
        let mut state = match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let st = stamp([&self.cert, &self.key]);
        if st == state.0 {
            return state.1.clone();
        }
        state.0 = st;
        match read_pair(&self.cert, &self.key) {
            Ok((c, k)) if c == state.1.cert_pem && k == state.1.key_pem => {}
            Ok((c, k)) => match Ca::from_pem(&c, &k) {
                Ok(ca) => {
                    log::info!(
                        "loaded a new CA for signing from {} and {}",
                        self.cert.display(),
                        self.key.display()
                    );
                    state.1 = Arc::new(ca);
                }
                Err(e) => log::warn!(
                    "keeping the CA in use: {} and {} do not make a CA: {e}",
                    self.cert.display(),
                    self.key.display()
                ),
            },
            Err(e) => log::warn!("keeping the CA in use: {e}"),
        }
        state.1.clone()
    }
}
