//! What each built-in signer accepts (upstream's `isKubeletServing`, `isKubeletClient`,
//! `isKubeAPIServerClient`, `isLegacyUnknown` with `ValidateKubeletServingCSR` and
//! `ValidateKubeletClientCSR`), how usages become key usage bits and extended key usages, and
//! how long a certificate lives (`--cluster-signing-duration`, `spec.expirationSeconds`).

use std::collections::BTreeSet;
use std::time::Duration;

use super::super::request::Request;

pub const KUBELET_SERVING: &str = "kubernetes.io/kubelet-serving";
pub const KUBELET_CLIENT: &str = "kubernetes.io/kube-apiserver-client-kubelet";
pub const KUBE_APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";
pub const LEGACY_UNKNOWN: &str = "kubernetes.io/legacy-unknown";

/// The shortest certificate a request may ask for with `spec.expirationSeconds`.
pub const MIN_DURATION: Duration = Duration::from_secs(600);

/// upstream's check for `signer` (one of the four above): Ok when it may be signed, the
/// message of the `Failed` condition otherwise.
pub fn validate(signer: &str, req: &Request, usages: &[&str]) -> Result<(), String> {
    let set: BTreeSet<&str> = usages.iter().copied().collect();
    match signer {
        KUBELET_SERVING => kubelet_serving(req, &set),
        KUBELET_CLIENT => kubelet_client(req, &set),
        KUBE_APISERVER_CLIENT => apiserver_client_usages(usages),
        _ => Ok(()),
    }
}

fn same(set: &BTreeSet<&str>, want: &[&str]) -> bool {
    set.iter().eq(want.iter())
}

const SERVING: [&str; 3] = ["digital signature", "key encipherment", "server auth"];
const SERVING_NO_RSA: [&str; 2] = ["digital signature", "server auth"];
const CLIENT: [&str; 3] = ["client auth", "digital signature", "key encipherment"];
const CLIENT_NO_RSA: [&str; 2] = ["client auth", "digital signature"];

const NOT_SYSTEM_NODES: &str = "subject organization is not system:nodes";
const NOT_SYSTEM_NODE: &str = "subject common name does not begin with system:node:";

/// upstream's `ValidateKubeletServingCSR`, in its order.
fn kubelet_serving(req: &Request, usages: &BTreeSet<&str>) -> Result<(), String> {
    if req.organizations != ["system:nodes"] {
        return Err(NOT_SYSTEM_NODES.into());
    }
    if req.dns_names.is_empty() && req.ip_addresses.is_empty() {
        return Err("DNS or IP subjectAltName is required".into());
    }
    if !req.email_addresses.is_empty() {
        return Err("Email subjectAltNames are not allowed".into());
    }
    if !req.uris.is_empty() {
        return Err("URI subjectAltNames are not allowed".into());
    }
    if !same(usages, &SERVING) && !same(usages, &SERVING_NO_RSA) {
        return Err(format!("usages did not match [{}]", SERVING.join(" ")));
    }
    if !req.common_name.starts_with("system:node:") {
        return Err(NOT_SYSTEM_NODE.into());
    }
    Ok(())
}

/// upstream's `ValidateKubeletClientCSR`, in its order.
fn kubelet_client(req: &Request, usages: &BTreeSet<&str>) -> Result<(), String> {
    if req.organizations != ["system:nodes"] {
        return Err(NOT_SYSTEM_NODES.into());
    }
    let sans = [
        (!req.dns_names.is_empty(), "DNS"),
        (!req.email_addresses.is_empty(), "Email"),
        (!req.ip_addresses.is_empty(), "IP"),
        (!req.uris.is_empty(), "URI"),
    ];
    if let Some((_, kind)) = sans.iter().find(|(has, _)| *has) {
        return Err(format!("{kind} subjectAltNames are not allowed"));
    }
    if !req.common_name.starts_with("system:node:") {
        return Err(NOT_SYSTEM_NODE.into());
    }
    if !same(usages, &CLIENT) && !same(usages, &CLIENT_NO_RSA) {
        return Err(format!("usages did not match [{}]", CLIENT.join(" ")));
    }
    Ok(())
}

/// upstream's `validAPIServerClientUsages`: in the request's order, only digital signature,
/// key encipherment and client auth; client auth required.
fn apiserver_client_usages(usages: &[&str]) -> Result<(), String> {
    let mut client_auth = false;
    for u in usages {
        match *u {
            "digital signature" | "key encipherment" => {}
            "client auth" => client_auth = true,
            other => return Err(format!("invalid usage for client certificate: {other}")),
        }
    }
    if !client_auth {
        return Err("missing required usage for client certificate: client auth".into());
    }
    Ok(())
}

/// x509.KeyUsage bits (digitalSignature = 1).
fn key_usage_bit(u: &str) -> Option<u16> {
    Some(match u {
        "signing" | "digital signature" => 1,
        "content commitment" => 1 << 1,
        "key encipherment" => 1 << 2,
        "data encipherment" => 1 << 3,
        "key agreement" => 1 << 4,
        "cert sign" => 1 << 5,
        "crl sign" => 1 << 6,
        "encipher only" => 1 << 7,
        "decipher only" => 1 << 8,
        _ => return None,
    })
}

/// Extended key usages in Go's `x509.ExtKeyUsage` order (the order they are written in).
const EXT_KEY_USAGES: [(&[&str], &[u8]); 12] = [
    (&["any"], &[0x55, 0x1d, 0x25, 0x00]),
    (&["server auth"], &[0x2b, 6, 1, 5, 5, 7, 3, 1]),
    (&["client auth"], &[0x2b, 6, 1, 5, 5, 7, 3, 2]),
    (&["code signing"], &[0x2b, 6, 1, 5, 5, 7, 3, 3]),
    (
        &["email protection", "s/mime"],
        &[0x2b, 6, 1, 5, 5, 7, 3, 4],
    ),
    (&["ipsec end system"], &[0x2b, 6, 1, 5, 5, 7, 3, 5]),
    (&["ipsec tunnel"], &[0x2b, 6, 1, 5, 5, 7, 3, 6]),
    (&["ipsec user"], &[0x2b, 6, 1, 5, 5, 7, 3, 7]),
    (&["timestamping"], &[0x2b, 6, 1, 5, 5, 7, 3, 8]),
    (&["ocsp signing"], &[0x2b, 6, 1, 5, 5, 7, 3, 9]),
    (
        &["microsoft sgc"],
        &[0x2b, 6, 1, 4, 1, 0x82, 0x37, 10, 3, 3],
    ),
    (
        &["netscape sgc"],
        &[0x60, 0x86, 0x48, 1, 0x86, 0xf8, 0x42, 4, 1],
    ),
];

/// upstream's `keyUsagesFromStrings`: the key usage bits and the extended key usage OIDs
/// (each once, in Go's order); unknown usages are an error naming them all.
pub fn key_usages(usages: &[&str]) -> Result<(u16, Vec<&'static [u8]>), String> {
    let mut bits = 0;
    let mut ext = [false; EXT_KEY_USAGES.len()];
    let mut unknown = Vec::new();
    for u in usages {
        if let Some(b) = key_usage_bit(u) {
            bits |= b;
        } else if let Some(i) = EXT_KEY_USAGES.iter().position(|(n, _)| n.contains(u)) {
            ext[i] = true;
        } else {
            unknown.push(format!("{u:?}"));
        }
    }
    if !unknown.is_empty() {
        return Err(format!(
            "unrecognized usage values: [{}]",
            unknown.join(" ")
        ));
    }
    let oids = EXT_KEY_USAGES
        .iter()
        .zip(ext)
        .filter(|(_, on)| *on)
        .map(|((_, oid), _)| *oid)
        .collect();
    Ok((bits, oids))
}

/// upstream's `signer.duration`: `--cluster-signing-duration`, or `spec.expirationSeconds`
/// kept between 10 minutes and it.
pub fn duration(max: Duration, expiration_seconds: Option<i64>) -> Duration {
    match expiration_seconds {
        None => max,
        Some(s) => {
            let asked = Duration::from_secs(s.max(0).unsigned_abs());
            if asked > max {
                max
            } else {
                asked.max(MIN_DURATION)
            }
        }
    }
}
