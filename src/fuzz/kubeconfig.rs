//! Kubeconfig YAML (`api::kubeconfig`, `api::yaml`): valid kubeconfigs written in many YAML
//! styles must give the same settings; mutated ones and random YAML give settings or an error
//! naming the file, never a panic; and the bounded loader agrees with yaml-rust2's own
//! wherever that one can run.

use std::path::Path;
use std::sync::OnceLock;

use base64::Engine as _;
use serde_json::{json, Map, Value};

use super::Gen;
use crate::api::kubeconfig::{from_kubeconfig_str, RestConfig};
use crate::api::yaml;

const DICT: &[&[u8]] = &[
    b": ",
    b"- ",
    b"\n",
    b"\n  ",
    b"\n    - ",
    b"&a ",
    b"*a",
    b"&b [*a, *a, *a, *a]",
    b"!!str ",
    b"!!int ",
    b"!!bool ",
    b"!!binary ",
    b"!e!x ",
    b"? ",
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b"'",
    b"|",
    b">-",
    b"#",
    b"---\n",
    b"...\n",
    b"%YAML 1.2\n",
    b"%TAG !e! tag:e,2000:\n",
    b"\t",
    b"\\",
    b"\\x41",
    b"\\u00e9",
    b"~",
    b"null",
    b"true",
    b"0x7fffffffffffffff",
    b".inf",
    b"current-context",
    b"contexts",
    b"clusters",
    b"users",
    b"cluster",
    b"user",
    b"server",
    b"certificate-authority-data",
    b"certificate-authority",
    b"client-certificate-data",
    b"client-key-data",
    b"token",
    b"tokenFile",
    b"insecure-skip-tls-verify",
    b"tls-server-name",
    b"exec",
    b"https://",
    b"\xef\xbb\xbf",
];

/// PEM of a CA certificate, a client certificate and its key, made once.
struct Pems {
    ca: String,
    cert: String,
    key: String,
}

fn pems() -> &'static Pems {
    static P: OnceLock<Pems> = OnceLock::new();
    P.get_or_init(|| {
        let ca_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let ca = rcgen::CertificateParams::new(vec!["ca".to_string()])
            .unwrap()
            .self_signed(&ca_key)
            .unwrap();
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let cert = rcgen::CertificateParams::new(vec!["client".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        Pems {
            ca: ca.pem(),
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    })
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// A kubeconfig as a tree, and the settings it must give.
fn kubeconfig(g: &mut Gen) -> (Value, RestConfig) {
    let p = pems();
    let host = g.pick(&[
        "10.0.0.1:6443",
        "[fd00::1]:6443",
        "api.example.test",
        "localhost:1",
    ]);
    let server = format!("https://{host}{}", if g.one_in(2) { "/" } else { "" });
    let mut want = RestConfig {
        server: format!("https://{host}"),
        source: "kubeconfig fuzz".into(),
        ..Default::default()
    };
    let mut cluster = json!({"server": server});
    if g.one_in(4) {
        cluster["insecure-skip-tls-verify"] = json!(true);
        want.insecure_skip_tls_verify = true;
    } else if !g.one_in(4) {
        cluster["certificate-authority-data"] = json!(b64(&p.ca));
        want.ca_pem = Some(p.ca.clone().into_bytes());
        want.ca_inline = want.ca_pem.clone();
    }
    if g.one_in(3) {
        cluster["tls-server-name"] = json!("api.local");
        want.tls_server_name = Some("api.local".into());
    }
    let mut user = json!({});
    if g.one_in(2) {
        user["client-certificate-data"] = json!(b64(&p.cert));
        user["client-key-data"] = json!(b64(&p.key));
        want.client_cert_pem = Some(p.cert.clone().into_bytes());
        want.client_key_pem = Some(p.key.clone().into_bytes());
    }
    if g.one_in(2) {
        let token = format!("tok-{}", g.rng.u32(..));
        user["token"] = json!(token);
        want.token = Some(token);
    }
    // Other clusters, contexts and users around the current ones, in any order.
    let mut clusters = vec![json!({"name": "c", "cluster": cluster})];
    let mut contexts = vec![json!({"name": "ctx", "context": {"cluster": "c", "user": "u"}})];
    let mut users = vec![json!({"name": "u", "user": user})];
    for i in 0..g.below(3) {
        clusters
            .push(json!({"name": format!("other{i}"), "cluster": {"server": "https://1.1.1.1"}}));
        contexts
            .push(json!({"name": format!("o{i}"), "context": {"cluster": format!("other{i}")}}));
        users.push(json!({"name": format!("ou{i}"), "user": {"token": "other"}}));
    }
    for list in [&mut clusters, &mut contexts, &mut users] {
        g.rng.shuffle(list);
    }
    let mut doc = json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "ctx",
        "clusters": clusters, "contexts": contexts, "users": users,
    });
    if g.one_in(3) {
        doc["preferences"] = json!({});
        doc["extensions"] = json!([{"name": "x", "extension": {"a": [1, 2.5, null]}}]);
    }
    (doc, want)
}

/// A scalar in one of YAML's spellings that reads back as the same string.
fn emit_str(g: &mut Gen, s: &str, out: &mut String) {
    let plain_safe = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "./_-+=".contains(c))
        && !s.starts_with(['-', '.'])
        && matches!(yaml_rust2::Yaml::from_str(s), yaml_rust2::Yaml::String(_));
    match g.below(3) {
        0 if plain_safe => out.push_str(s),
        1 => {
            out.push('\'');
            out.push_str(&s.replace('\'', "''"));
            out.push('\'');
        }
        _ => out.push_str(&Value::String(s.to_string()).to_string()),
    }
}

/// `v` as YAML: block or flow collections, plain or quoted scalars, comments.
fn emit(g: &mut Gen, v: &Value, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match v {
        Value::String(s) => emit_str(g, s, out),
        Value::Null => out.push_str(g.pick(&["null", "~", ""])),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::Array(a) if a.is_empty() || g.one_in(4) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                emit_flow(g, x, out);
            }
            out.push(']');
        }
        Value::Object(m) if m.is_empty() || g.one_in(4) => emit_flow(g, v, out),
        Value::Array(a) => {
            for x in a {
                out.push('\n');
                out.push_str(&pad);
                out.push_str("- ");
                if x.is_object() && !g.one_in(3) {
                    // The mapping's first key on the dash's line.
                    emit_block_map(g, x.as_object().unwrap(), indent + 2, true, out);
                } else {
                    emit(g, x, indent + 2, out);
                }
            }
        }
        Value::Object(m) => emit_block_map(g, m, indent, false, out),
    }
}

fn emit_block_map(
    g: &mut Gen,
    m: &Map<String, Value>,
    indent: usize,
    inline: bool,
    out: &mut String,
) {
    let pad = " ".repeat(indent);
    let mut keys: Vec<&String> = m.keys().collect();
    g.rng.shuffle(&mut keys);
    for (i, k) in keys.into_iter().enumerate() {
        if !(inline && i == 0) {
            if g.one_in(6) {
                out.push('\n');
                out.push_str(&pad);
                out.push_str("# a comment: with - odd { chars");
            }
            out.push('\n');
            out.push_str(&pad);
        }
        emit_str(g, k, out);
        out.push_str(": ");
        emit(g, &m[k], indent + 2, out);
    }
}

fn emit_flow(g: &mut Gen, v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            out.push('{');
            for (i, (k, x)) in m.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                emit_str(g, k, out);
                out.push_str(": ");
                emit_flow(g, x, out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                emit_flow(g, x, out);
            }
            out.push(']');
        }
        Value::String(s) => out.push_str(&Value::String(s.clone()).to_string()),
        other => out.push_str(&other.to_string()),
    }
}

fn text_of(g: &mut Gen, doc: &Value) -> String {
    let mut text = String::new();
    match g.below(6) {
        0 => text = doc.to_string(),
        1 => {
            text.push_str("--- ");
            emit(g, doc, 0, &mut text);
            text.push_str("\n...\n");
        }
        _ => {
            emit(g, doc, 0, &mut text);
            text.push('\n');
        }
    }
    text
}

/// A parse: settings, or an error that names the file.
fn parse(text: &str) -> Result<RestConfig, String> {
    let named = |e: crate::Error| {
        let msg = e.to_string();
        assert!(
            msg.starts_with("kubeconfig fuzz: ") && msg.len() > 18,
            "{msg}"
        );
        msg
    };
    let cfg = from_kubeconfig_str(
        text,
        Path::new("/nonexistent-edgekcm-fuzz"),
        "kubeconfig fuzz",
    )
    .map_err(named)?;
    cfg.validate().map_err(named)?;
    Ok(cfg)
}

/// The bounded loader against yaml-rust2's, unless the bounds stopped ours first (then
/// yaml-rust2's could overflow the stack).
fn same_as_yaml_rust2(text: &str) {
    let ours = yaml::first_document(text);
    if let Err(e) = &ours {
        assert!(!e.is_empty());
        if e.starts_with("nested more than") || e.starts_with("more than") {
            return;
        }
    }
    let theirs = yaml_rust2::YamlLoader::load_from_str(text)
        .map_err(|e| e.to_string())
        .map(|docs| {
            docs.first()
                .map(crate::api::yaml::yaml_to_json)
                .unwrap_or(Value::Null)
        });
    assert_eq!(ours, theirs);
}

/// Random YAML from tokens: anchors, aliases, tags, flow and block collections, odd scalars.
fn random_yaml(g: &mut Gen) -> String {
    const TOKENS: &[&str] = &[
        "a",
        "b",
        "- ",
        "-",
        ": ",
        ":",
        "? ",
        "\n",
        "\n  ",
        "\n    ",
        "  ",
        "{",
        "}",
        "[",
        "]",
        ", ",
        "&x ",
        "&y ",
        "*x",
        "*y",
        "!!str ",
        "!!int ",
        "!!float ",
        "!!null ",
        "!!map ",
        "!t ",
        "'q''s'",
        "\"d\\\"\\u263a\"",
        "|\n  lit\n",
        ">\n  fold\n",
        "# c\n",
        "---\n",
        "...\n",
        "%YAML 1.2\n---\n",
        "1",
        "-1.5e3",
        "0x1F",
        "0o17",
        "+12",
        ".nan",
        "~",
        "null",
        "True",
        "\t",
        "\u{feff}",
        "é",
        "\"",
        "'",
        "%",
        "@",
        "`",
    ];
    let n = g.size(60);
    (0..n).map(|_| g.pick(TOKENS)).collect()
}

fn case(g: &mut Gen) {
    match g.below(4) {
        0 => {
            // Valid, in some style: the same settings every time.
            let (doc, want) = kubeconfig(g);
            let text = text_of(g, &doc);
            g.note(&text);
            let got = parse(&text).unwrap_or_else(|e| panic!("a valid kubeconfig: {e}"));
            assert_eq!(got, want);
            same_as_yaml_rust2(&text);
        }
        1 | 2 => {
            let (doc, _) = kubeconfig(g);
            let text = text_of(g, &doc);
            let bad = g.mutate_str(&text, DICT);
            g.note(&bad);
            let _ = parse(&bad);
            same_as_yaml_rust2(&bad);
        }
        _ => {
            let text = random_yaml(g);
            g.note(&text);
            let _ = parse(&text);
            same_as_yaml_rust2(&text);
        }
    }
}

#[test]
fn fuzz_kubeconfig_yaml() {
    super::run("kubeconfig-yaml", 300, case);
}
