//! Entry points for coverage-guided fuzzing (`fuzz/`, cargo-fuzz and libFuzzer; `just
//! fuzz-cov`): each takes the fuzzer's bytes, runs one reader of input edgekcm does not
//! control, and checks what must hold whatever the input (no panic, and where a value can be
//! written back, that it reads back the same). Not part of the program: nothing else calls
//! them. The property tests of the same readers (`src/fuzz/`) stay in `cargo test`.

use crate::api::trim::Trim;
use crate::api::watch;
use serde_json::Value;

fn text(data: &[u8]) -> &str {
    std::str::from_utf8(data).unwrap_or("")
}

/// One watch line, whole and trimmed to a cache shape.
pub fn watch_frame(data: &[u8]) {
    let _ = watch::parse_frame(data);
    let shape = Trim {
        fields: Some(&["/spec/nodeName", "/status", "/spec/containers/*/ports"]),
    };
    let _ = watch::parse_frame_as(data, Some(shape));
}

/// A watch stream cut into pieces where the input says: every byte is taken once, and the
/// decoder ends.
pub fn watch_stream(data: &[u8]) {
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let mut d = watch::Decoder::new("fuzz");
    d.max_line = 64 + usize::from(cut) * 16;
    for piece in rest.chunks(1 + usize::from(cut % 32)) {
        let mut at = 0;
        while at < piece.len() {
            let (took, _) = d.push(&piece[at..]);
            assert!(took > 0 && at + took <= piece.len());
            at += took;
        }
    }
    let _ = d.finish();
}

/// The cache's JSON trimming, on an object as the body of an ADDED event.
pub fn trim(data: &[u8]) {
    let t = text(data);
    if t.contains('\n') {
        return;
    }
    let line = format!("{{\"type\":\"ADDED\",\"object\":{t}}}");
    for fields in [&["/spec"][..], &["/status", "/x/*/y"], &[]] {
        let _ = watch::parse_frame_as(
            line.as_bytes(),
            Some(Trim {
                fields: Some(fields),
            }),
        );
    }
}

/// A kubeconfig file (files it names are not read: the base directory does not exist).
pub fn kubeconfig(data: &[u8]) {
    let base = std::path::Path::new("/nonexistent-edgekcm-fuzz");
    let _ = crate::api::kubeconfig::from_kubeconfig_str(text(data), base, "fuzz");
    let _ = crate::api::yaml::first_document(text(data));
}

/// PEM certificates and keys, and DER certificates.
pub fn pem_der(data: &[u8]) {
    let _ = crate::pki::gopem::parse_certs_pem(data);
    let _ = crate::pki::gopem::parse_private_key_pem(data);
    let _ = crate::pki::der::parse_cert(data);
}

/// A PKCS#10 certificate request, as PEM and as DER.
pub fn csr(data: &[u8]) {
    let _ = crate::controllers::certificates::request::parse_pem(data);
    let _ = crate::controllers::certificates::request::parse_der(data);
}

/// The secure port's request head, and the client's response head.
pub fn http_head(data: &[u8]) {
    let _ = crate::http_head::request(data, 32);
    let _ = crate::http_head::response(data, 32);
    let _ = crate::http_head::end(data);
    let _ = crate::server::http::parse_head(data, 32);
}

/// A CronJob schedule, and its next runs from a few instants.
pub fn cron(data: &[u8]) {
    if let Ok(s) = crate::controllers::cronjob::schedule::parse(text(data)) {
        for t in [0i64, 1_700_000_000, 4_102_444_800] {
            if let Some(n) = s.next(t) {
                assert!(n > t, "next {n} not after {t}");
            }
        }
    }
}

/// A resource quantity: its canonical form reads back as the same amount.
pub fn quantity(data: &[u8]) {
    use crate::compat::quantity::Quantity;
    let Some(q) = Quantity::parse(text(data)) else {
        return;
    };
    let shown = q.to_string();
    let back = Quantity::parse(&shown).unwrap_or_else(|| panic!("{shown:?} does not read back"));
    assert_eq!(
        back.cmp_value(&q),
        std::cmp::Ordering::Equal,
        "{shown:?} is not {:?}",
        text(data)
    );
}

/// The command line (arguments separated by NUL bytes), and Go's value readers.
pub fn command_line(data: &[u8]) {
    let args: Vec<String> = text(data).split('\0').map(str::to_string).collect();
    let _ = crate::cli::parse(&args);
    let t = text(data);
    use crate::compat::parse::*;
    if let Ok(d) = parse_go_duration(t) {
        let shown = format_go_duration(d);
        assert_eq!(parse_go_duration(&shown).ok(), Some(d), "{shown:?}");
    }
    let _ = parse_go_int(t, 32);
    let _ = parse_go_float(t, 64);
    let _ = parse_go_bool(t);
}

/// A bootstrap token's detached JWS signature check (signature, content, id, secret
/// separated by NUL bytes).
pub fn jws(data: &[u8]) {
    let mut p = text(data).splitn(4, '\0');
    let (sig, content, id, secret) = (
        p.next().unwrap_or(""),
        p.next().unwrap_or(""),
        p.next().unwrap_or(""),
        p.next().unwrap_or(""),
    );
    let _ = crate::compat::jws::detached_is_valid(sig, content, id, secret);
    let made = crate::compat::jws::detached_hs256(content, id, secret);
    assert!(crate::compat::jws::detached_is_valid(
        &made, content, id, secret
    ));
}

/// A label selector (JSON) against an object's labels.
pub fn label_selector(data: &[u8]) {
    let Ok(v) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let sel = v.get("selector").cloned().unwrap_or(Value::Null);
    let obj = serde_json::json!({"metadata": {"labels": v.get("labels").cloned().unwrap_or(Value::Null)}});
    let _ = crate::controllers::kit::selector::is_valid(&sel);
    let _ = crate::controllers::kit::selector::is_empty(&sel);
    let _ = crate::obj::selector_matches(&sel, &obj);
}
