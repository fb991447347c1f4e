use super::authority::{verify_request, Ca, CaFiles, BACKDATE};
use super::policy::*;
use super::*;
use crate::controllers::certificates::request::{parse_pem, request_pem};
use crate::controllers::testing::Harness;
use crate::pki::der::{self, SEQUENCE};
use std::time::SystemTime;

const RSA_PKCS1: &str = include_str!("../../../../tests/fixtures/rsa-pkcs1.key");
const YEAR: Duration = Duration::from_secs(8760 * 3600);

/// A CA certificate (PEM) for `key` valid for `days`, named CN=edgekcm-test-ca.
fn ca_cert(key: &rcgen::KeyPair, days: u64) -> String {
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name
        .push(rcgen::DnType::CommonName, "edgekcm-test-ca");
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let now = SystemTime::now();
    p.not_before = (now - Duration::from_secs(3600)).into();
    p.not_after = (now + Duration::from_secs(days * 86_400)).into();
    p.self_signed(key).unwrap().pem()
}

/// The SEC1 form (`EC PRIVATE KEY`) of a P-256 PKCS#8 key made by rcgen, with its curve.
fn sec1_pem(pkcs8: &[u8]) -> String {
    let outer = der::read_exact(pkcs8, SEQUENCE).unwrap();
    let parts = der::children(outer.content).unwrap();
    let inner = der::read_exact(parts[2].content, SEQUENCE).unwrap();
    let items = der::children(inner.content).unwrap();
    let public = items.iter().find(|t| t.tag == 0xa1).unwrap();
    let body = [
        items[0].raw,
        items[1].raw,
        &der::write(0xa0, &der::write(der::OID, der::OID_P256)),
        public.raw,
    ]
    .concat();
    crate::certs::pem_encode("EC PRIVATE KEY", &der::write(SEQUENCE, &body))
}

/// (certificate PEM, key PEM) pairs of one CA key in each form edgekcm reads.
fn cas() -> Vec<(&'static str, String, String)> {
    let ec = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let ec_cert = ca_cert(&ec, 365);
    let p384 = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384).unwrap();
    let rsa = crate::certs::load_key(RSA_PKCS1.as_bytes()).unwrap();
    let rsa_cert = ca_cert(&rsa, 365);
    let rsa_der = crate::pki::gopem::first_block(RSA_PKCS1.as_bytes())
        .unwrap()
        .der;
    vec![
        ("ec pkcs8", ec_cert.clone(), ec.serialize_pem()),
        ("ec sec1", ec_cert, sec1_pem(&ec.serialize_der())),
        ("p384 pkcs8", ca_cert(&p384, 365), p384.serialize_pem()),
        ("rsa pkcs1", rsa_cert.clone(), RSA_PKCS1.to_string()),
        (
            "rsa pkcs8",
            rsa_cert,
            crate::certs::pem_encode("PRIVATE KEY", &der::pkcs1_to_pkcs8(&rsa_der)),
        ),
    ]
}

fn ec_ca() -> Ca {
    let (_, c, k) = cas().remove(0);
    Ca::from_pem(c.as_bytes(), k.as_bytes()).unwrap()
}

fn cert_der(pem: &str) -> Vec<u8> {
    crate::pki::gopem::first_block(pem.as_bytes()).unwrap().der
}

/// Whether `cert` is signed by the key of `ca_pem`.
fn signed_by(cert: &[u8], ca_pem: &str) -> bool {
    let ca = cert_der(ca_pem);
    let ca_info = der::parse_cert(&ca).unwrap();
    let spki = der::read_exact(ca_info.spki, SEQUENCE).unwrap();
    let alg = der::children(spki.content).unwrap()[0];
    let rsa = der::children(alg.content).unwrap()[0].content == der::OID_RSA_ENCRYPTION;
    let top = der::children(der::read_exact(cert, SEQUENCE).unwrap().content).unwrap();
    let sig_alg = der::children(top[1].content).unwrap()[0].content.to_vec();
    let signature = &top[2].content[1..];
    use ring::signature as s;
    let v: &dyn s::VerificationAlgorithm = match (rsa, sig_alg.last()) {
        (true, _) => &s::RSA_PKCS1_2048_8192_SHA256,
        (false, Some(3)) => &s::ECDSA_P384_SHA384_ASN1,
        _ => &s::ECDSA_P256_SHA256_ASN1,
    };
    s::UnparsedPublicKey::new(v, ca_info.public_key)
        .verify(top[0].raw, signature)
        .is_ok()
}

/// The extensions of a certificate: (OID arcs as text, critical, value).
fn extensions(cert: &[u8]) -> Vec<(String, bool, Vec<u8>)> {
    let top = der::children(der::read_exact(cert, SEQUENCE).unwrap().content).unwrap();
    let tbs = der::children(top[0].content).unwrap();
    let exts = tbs.iter().find(|t| t.tag == 0xa3).unwrap();
    let list = der::read_exact(exts.content, SEQUENCE).unwrap();
    der::children(list.content)
        .unwrap()
        .iter()
        .map(|e| {
            let items = der::children(e.content).unwrap();
            let arcs = der::oid_arcs(items[0].content).unwrap();
            let oid = arcs
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(".");
            let critical = items.len() == 3;
            (oid, critical, items.last().unwrap().content.to_vec())
        })
        .collect()
}

fn node_request() -> crate::controllers::certificates::request::Request {
    parse_pem(request_pem("system:node:n1", &["system:nodes"], &[]).as_bytes()).unwrap()
}

#[test]
fn every_ca_key_form_signs() {
    let req = node_request();
    for (form, cert, key) in cas() {
        let ca =
            Ca::from_pem(cert.as_bytes(), key.as_bytes()).unwrap_or_else(|e| panic!("{form}: {e}"));
        let der = ca
            .sign(
                &req,
                &["digital signature", "client auth"],
                YEAR,
                SystemTime::now(),
            )
            .unwrap();
        assert!(signed_by(&der, &cert), "{form}: signature does not verify");
        let info = der::parse_cert(&der).unwrap();
        let ca_info_der = cert_der(&cert);
        let ca_info = der::parse_cert(&ca_info_der).unwrap();
        assert_eq!(info.issuer, ca_info.subject, "{form}");
        assert!(!info.is_ca);
        assert_eq!(info.common_name.as_deref(), Some("system:node:n1"));
    }
    // A key that is not the certificate's, and no key at all.
    let (_, c1, _) = cas().remove(0);
    let other = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    assert!(Ca::from_pem(c1.as_bytes(), other.serialize_pem().as_bytes()).is_err());
    assert!(Ca::from_pem(c1.as_bytes(), c1.as_bytes()).is_err());
    let e = Ca::from_pem(format!("{c1}{c1}").as_bytes(), b"")
        .err()
        .unwrap();
    assert!(e.contains("expected 1 certificate, found 2"), "{e}");
}

#[test]
fn certificate_shape_is_upstreams() {
    let ca = ec_ca();
    let req = parse_pem(
        request_pem(
            "system:node:n1",
            &["system:nodes"],
            &["n1.example", "10.0.0.1"],
        )
        .as_bytes(),
    )
    .unwrap();
    let now = SystemTime::UNIX_EPOCH
        + Duration::from_secs(crate::compat::timefmt::unix_seconds(SystemTime::now()) as u64);
    let usages = ["server auth", "digital signature", "key encipherment"];
    let der = ca.sign(&req, &usages, YEAR, now).unwrap();
    let exts = extensions(&der);
    let oids: Vec<(&str, bool)> = exts.iter().map(|(o, c, _)| (o.as_str(), *c)).collect();
    // Go's order: key usage, EKU, basic constraints, AKI, SAN; no SKI on a leaf.
    assert_eq!(
        oids,
        [
            ("2.5.29.15", true),
            ("2.5.29.37", false),
            ("2.5.29.19", true),
            ("2.5.29.35", false),
            ("2.5.29.17", false)
        ]
    );
    // digitalSignature | keyEncipherment: 101 -> 03 02 05 a0
    assert_eq!(exts[0].2, [0x03, 0x02, 0x05, 0xa0]);
    assert_eq!(
        exts[1].2,
        der::write(
            SEQUENCE,
            &der::write(der::OID, &[0x2b, 6, 1, 5, 5, 7, 3, 1])
        )
    );
    assert_eq!(exts[2].2, [0x30, 0x00]);
    let info = der::parse_cert(&der).unwrap();
    assert_eq!(info.not_before, now - BACKDATE);
    assert_eq!(info.not_after, now + YEAR - BACKDATE);
    // The subject re-encoded as Go does: O before CN, PrintableString.
    let expect = der::write(
        SEQUENCE,
        &[
            der::write(
                der::SET,
                &der::write(
                    SEQUENCE,
                    &[
                        der::write(der::OID, &[0x55, 4, 10]),
                        der::write(0x13, b"system:nodes"),
                    ]
                    .concat(),
                ),
            ),
            der::write(
                der::SET,
                &der::write(
                    SEQUENCE,
                    &[
                        der::write(der::OID, &[0x55, 4, 3]),
                        der::write(0x13, b"system:node:n1"),
                    ]
                    .concat(),
                ),
            ),
        ]
        .concat(),
    );
    assert_eq!(info.subject, expect.as_slice());
    // Short lifetimes are not backdated at the end; never past the CA's end.
    let der = ca
        .sign(&req, &usages, Duration::from_secs(3600), now)
        .unwrap();
    assert_eq!(
        der::parse_cert(&der).unwrap().not_after,
        now + Duration::from_secs(3600)
    );
    let der = ca.sign(&req, &usages, 20 * YEAR, now).unwrap();
    assert_eq!(der::parse_cert(&der).unwrap().not_after, ca.not_after);
    // A CA that ended refuses.
    let later = ca.not_after + Duration::from_secs(1);
    let e = ca.sign(&req, &usages, YEAR, later).unwrap_err();
    assert!(
        e.starts_with("refusing to sign a certificate that expired in the past"),
        "{e}"
    );
    let later = ca.not_after + BACKDATE;
    let e = ca.sign(&req, &usages, YEAR, later).unwrap_err();
    assert!(e.starts_with("the signer has expired: NotAfter="), "{e}");
}

#[test]
fn go_subject_encoding() {
    // Several organizations: one RDN, values sorted; a non-printable value is UTF8String.
    let req = parse_pem(request_pem("a_b", &["zz", "aa"], &[]).as_bytes()).unwrap();
    let der = ec_ca()
        .sign(&req, &["client auth"], YEAR, SystemTime::now())
        .unwrap();
    let info = der::parse_cert(&der).unwrap();
    let subject = der::read_exact(info.subject, SEQUENCE).unwrap();
    let rdns = der::children(subject.content).unwrap();
    assert_eq!(rdns.len(), 2);
    let orgs = der::children(rdns[0].content).unwrap();
    assert_eq!(orgs.len(), 2);
    assert!(orgs[0].raw < orgs[1].raw);
    let cn = der::children(der::children(rdns[1].content).unwrap()[0].content).unwrap();
    assert_eq!((cn[1].tag, cn[1].content), (0x0c, &b"a_b"[..]));
    // No key usage bits: no key usage extension; SAN absent without names.
    let oids: Vec<String> = extensions(&der).into_iter().map(|e| e.0).collect();
    assert_eq!(oids, ["2.5.29.37", "2.5.29.19", "2.5.29.35"]);
}

#[test]
fn usages_map_as_upstream() {
    let (bits, ext) = key_usages(&[
        "client auth",
        "signing",
        "server auth",
        "s/mime",
        "email protection",
        "any",
        "decipher only",
    ])
    .unwrap();
    assert_eq!(bits, 1 | (1 << 8));
    assert_eq!(ext.len(), 4);
    assert_eq!(ext[0], &[0x55, 0x1d, 0x25, 0x00]);
    assert_eq!(ext[3], &[0x2b, 6, 1, 5, 5, 7, 3, 4]);
    assert_eq!(
        key_usages(&["client auth", "bogus", "x"]).unwrap_err(),
        r#"unrecognized usage values: ["bogus" "x"]"#
    );
    // decipherOnly (bit 8) needs a second byte: 03 03 07 80 80 for digitalSignature too.
    let req = node_request();
    let der = ec_ca()
        .sign(
            &req,
            &["digital signature", "decipher only"],
            YEAR,
            SystemTime::now(),
        )
        .unwrap();
    assert_eq!(extensions(&der)[0].2, [0x03, 0x03, 0x07, 0x80, 0x80]);
}

#[test]
fn durations() {
    assert_eq!(duration(YEAR, None), YEAR);
    assert_eq!(duration(YEAR, Some(3600)), Duration::from_secs(3600));
    assert_eq!(duration(YEAR, Some(60)), MIN_DURATION);
    assert_eq!(duration(YEAR, Some(10 * 8760 * 3600)), YEAR);
    // A maximum below 10 minutes wins over a longer request, as upstream.
    let short = Duration::from_secs(300);
    assert_eq!(duration(short, Some(3600)), short);
}

fn req_with(
    cn: &str,
    orgs: &[&str],
    sans: &[&str],
) -> crate::controllers::certificates::request::Request {
    parse_pem(request_pem(cn, orgs, sans).as_bytes()).unwrap()
}

#[test]
fn per_signer_validation() {
    let node = ["system:nodes"];
    let client = ["digital signature", "key encipherment", "client auth"];
    let serving = ["digital signature", "key encipherment", "server auth"];
    let ok = req_with("system:node:n1", &node, &[]);
    let with_dns = req_with("system:node:n1", &node, &["n1.example"]);
    let with_ip = req_with("system:node:n1", &node, &["10.1.2.3"]);
    // kubelet client
    assert_eq!(validate(KUBELET_CLIENT, &ok, &client), Ok(()));
    assert_eq!(
        validate(KUBELET_CLIENT, &ok, &["client auth", "digital signature"]),
        Ok(())
    );
    let cases: [(
        &crate::controllers::certificates::request::Request,
        &[&str],
        &str,
    ); 5] = [
        (
            &req_with("system:node:n1", &["other"], &[]),
            &client,
            "subject organization is not system:nodes",
        ),
        (&with_dns, &client, "DNS subjectAltNames are not allowed"),
        (&with_ip, &client, "IP subjectAltNames are not allowed"),
        (
            &req_with("node:n1", &node, &[]),
            &client,
            "subject common name does not begin with system:node:",
        ),
        (
            &ok,
            &serving,
            "usages did not match [client auth digital signature key encipherment]",
        ),
    ];
    for (r, u, want) in cases {
        assert_eq!(validate(KUBELET_CLIENT, r, u), Err(want.to_string()));
    }
    // kubelet serving: names required; the usages before the common name.
    assert_eq!(validate(KUBELET_SERVING, &with_dns, &serving), Ok(()));
    assert_eq!(
        validate(
            KUBELET_SERVING,
            &with_ip,
            &["digital signature", "server auth"]
        ),
        Ok(())
    );
    assert_eq!(
        validate(KUBELET_SERVING, &ok, &serving),
        Err("DNS or IP subjectAltName is required".into())
    );
    assert_eq!(
        validate(KUBELET_SERVING, &req_with("x", &node, &["n"]), &client),
        Err("usages did not match [digital signature key encipherment server auth]".into())
    );
    assert_eq!(
        validate(KUBELET_SERVING, &req_with("x", &node, &["n"]), &serving),
        Err("subject common name does not begin with system:node:".into())
    );
    // kube-apiserver-client: usages only, in the request's order.
    let any = req_with("anyone", &["any"], &["x.example"]);
    assert_eq!(
        validate(KUBE_APISERVER_CLIENT, &any, &["client auth"]),
        Ok(())
    );
    assert_eq!(
        validate(KUBE_APISERVER_CLIENT, &any, &["server auth", "bogus"]),
        Err("invalid usage for client certificate: server auth".into())
    );
    assert_eq!(
        validate(KUBE_APISERVER_CLIENT, &any, &["digital signature"]),
        Err("missing required usage for client certificate: client auth".into())
    );
    // legacy-unknown: anything.
    assert_eq!(
        validate(LEGACY_UNKNOWN, &any, &["server auth", "code signing"]),
        Ok(())
    );
}

#[test]
fn request_signature_is_checked() {
    let mut req = node_request();
    assert_eq!(verify_request(&req), Ok(()));
    let last = req.signature.len() - 1;
    req.signature[last] ^= 1;
    assert!(verify_request(&req).is_err());
    let err = ec_ca()
        .sign(&req, &["client auth"], YEAR, SystemTime::now())
        .unwrap_err();
    assert!(
        err.starts_with("unable to verify certificate request signature"),
        "{err}"
    );
    // RSA and P-384 requests.
    for alg in [&rcgen::PKCS_ECDSA_P384_SHA384, &rcgen::PKCS_ED25519] {
        let key = rcgen::KeyPair::generate_for(alg).unwrap();
        let pem = rcgen::CertificateParams::new(Vec::<String>::new())
            .unwrap()
            .serialize_request(&key)
            .unwrap()
            .pem()
            .unwrap();
        let r = parse_pem(pem.as_bytes()).unwrap();
        assert_eq!(verify_request(&r), Ok(()));
        assert!(ec_ca()
            .sign(&r, &["client auth"], YEAR, SystemTime::now())
            .is_ok());
    }
    let rsa = crate::certs::load_key(RSA_PKCS1.as_bytes()).unwrap();
    let pem = rcgen::CertificateParams::new(Vec::<String>::new())
        .unwrap()
        .serialize_request(&rsa)
        .unwrap()
        .pem()
        .unwrap();
    assert_eq!(verify_request(&parse_pem(pem.as_bytes()).unwrap()), Ok(()));
}

struct Files(std::path::PathBuf);
impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
fn files() -> Files {
    let d = std::env::temp_dir().join(format!(
        "edgekcm-signer-{}-{}",
        std::process::id(),
        fastrand::u64(..)
    ));
    std::fs::create_dir_all(&d).unwrap();
    Files(d)
}

#[test]
fn ca_files_reload_when_changed() {
    let dir = files();
    let (c, k) = (dir.0.join("ca.crt"), dir.0.join("ca.key"));
    let all = cas();
    std::fs::write(&c, &all[0].1).unwrap();
    std::fs::write(&k, &all[0].2).unwrap();
    let ca = CaFiles::load(&c, &k).unwrap();
    let req = node_request();
    let sign = |ca: &CaFiles| {
        ca.current()
            .sign(&req, &["client auth"], YEAR, SystemTime::now())
            .unwrap()
    };
    assert!(signed_by(&sign(&ca), &all[0].1));
    // Replaced by the RSA CA: the next signature is the new CA's.
    std::fs::write(&c, &all[3].1).unwrap();
    std::fs::write(&k, &all[3].2).unwrap();
    assert!(signed_by(&sign(&ca), &all[3].1));
    // A broken pair keeps the CA in use.
    std::fs::write(&k, "garbage").unwrap();
    assert!(signed_by(&sign(&ca), &all[3].1));
    // Missing files at start: Go's words.
    let e = CaFiles::load(&dir.0.join("none"), &k).err().unwrap();
    assert!(e.contains("no such file or directory"), "{e}");
}

fn csr(name: &str, signer: &str, pem: &str, usages: &[&str], conds: Value) -> Value {
    json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name, "resourceVersion": "3"},
        "spec": {"request": base64::engine::general_purpose::STANDARD.encode(pem),
                 "signerName": signer, "usages": usages, "expirationSeconds": 3600},
        "status": {"conditions": conds}})
}

fn cond(t: &str, s: &str) -> Value {
    json!({"type": t, "status": s, "reason": "R", "message": "m"})
}

fn signer() -> (Files, CsrSigner, String) {
    let dir = files();
    let (c, k) = (dir.0.join("ca.crt"), dir.0.join("ca.key"));
    let (_, cert, key) = cas().remove(0);
    std::fs::write(&c, &cert).unwrap();
    std::fs::write(&k, &key).unwrap();
    let s = CsrSigner::with_files(KUBELET_CLIENT, &c, &k, YEAR).unwrap();
    (dir, s, cert)
}

#[test]
fn signs_only_approved_requests_of_its_signers() {
    let (_d, s, ca) = signer();
    let pem = request_pem("system:node:n1", &["system:nodes"], &[]);
    let usages = ["digital signature", "client auth"];
    let approved = json!([cond("Approved", "True")]);
    let now = SystemTime::now();
    let nothing = [
        csr("pending", KUBELET_CLIENT, &pem, &usages, json!([])),
        csr(
            "denied",
            KUBELET_CLIENT,
            &pem,
            &usages,
            json!([cond("Approved", "True"), cond("Denied", "True")]),
        ),
        csr(
            "failed",
            KUBELET_CLIENT,
            &pem,
            &usages,
            json!([cond("Approved", "True"), cond("Failed", "True")]),
        ),
        csr("other", KUBELET_SERVING, &pem, &usages, approved.clone()),
    ];
    for c in &nothing {
        assert_eq!(
            s.decide(c, now).unwrap(),
            Decision::Nothing,
            "{}",
            c["metadata"]["name"]
        );
    }
    let mut issued_csr = csr("issued", KUBELET_CLIENT, &pem, &usages, approved.clone());
    issued_csr["status"]["certificate"] = json!("eA==");
    assert_eq!(s.decide(&issued_csr, now).unwrap(), Decision::Nothing);
    // A Failed condition that is not True does not stop it.
    let c = csr(
        "ok",
        KUBELET_CLIENT,
        &pem,
        &usages,
        json!([cond("Approved", "True"), cond("Failed", "False")]),
    );
    let Decision::Issue(cert) = s.decide(&c, now).unwrap() else {
        panic!("not issued")
    };
    let der = cert_der(&cert);
    assert!(signed_by(&der, &ca));
    // expirationSeconds: one hour, not backdated at the end.
    let info = der::parse_cert(&der).unwrap();
    let life = info.not_after.duration_since(info.not_before).unwrap();
    assert!(
        (Duration::from_secs(3900)..Duration::from_secs(3902)).contains(&life),
        "{life:?}"
    );
    // Refused by the signer: Failed; unparsable: an error (retried).
    let bad = csr(
        "bad",
        KUBELET_CLIENT,
        &pem,
        &["server auth"],
        approved.clone(),
    );
    assert_eq!(
        s.decide(&bad, now).unwrap(),
        Decision::Fail(
            "usages did not match [client auth digital signature key encipherment]".into()
        )
    );
    let junk = csr("junk", KUBELET_CLIENT, "nope", &usages, approved);
    let e = s.decide(&junk, now).unwrap_err().to_string();
    assert!(e.contains("unable to parse csr \"junk\""), "{e}");
}

#[test]
fn writes_status_through_the_subresource() {
    let (_d, s, _) = signer();
    let pem = request_pem("system:node:n1", &["system:nodes"], &[]);
    let approved = json!([cond("Approved", "True")]);
    let mut h = Harness::new(s).at("2026-01-02T03:04:05Z");
    h.add(
        CSRS,
        csr(
            "good",
            KUBELET_CLIENT,
            &pem,
            &["client auth", "digital signature"],
            approved.clone(),
        ),
    );
    h.add(
        CSRS,
        csr("bad", KUBELET_CLIENT, &pem, &["server auth"], approved),
    );
    h.add(
        CSRS,
        csr("pending", KUBELET_CLIENT, &pem, &["client auth"], json!([])),
    );
    let mut queued = h.take_queued();
    queued.sort();
    assert_eq!(queued, ["bad", "good"]);
    let w = h.sync("good");
    assert_eq!(w.updates.len(), 1);
    let (_, sub, o) = &w.updates[0];
    assert_eq!(*sub, Some("status"));
    let cert = base64::engine::general_purpose::STANDARD
        .decode(o["status"]["certificate"].as_str().unwrap())
        .unwrap();
    assert!(cert.starts_with(b"-----BEGIN CERTIFICATE-----\n"));
    assert_eq!(o["status"]["conditions"].as_array().unwrap().len(), 1);
    let w = h.sync("bad");
    let (_, sub, o) = &w.updates[0];
    assert_eq!(*sub, Some("status"));
    let c = &o["status"]["conditions"][1];
    assert_eq!(
        (&c["type"], &c["status"], &c["reason"], &c["lastUpdateTime"]),
        (
            &json!("Failed"),
            &json!("True"),
            &json!("SignerValidationFailure"),
            &json!("2026-01-02T03:04:05Z")
        )
    );
    assert!(o["status"].get("certificate").is_none());
}
