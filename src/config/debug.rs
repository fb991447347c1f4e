//! `/configz` and `/debug/flags/v`, as kube-controller-manager v1.28 serves them behind its
//! authentication and authorization (and, installed from here, `/flagz` and `/statusz`:
//! `config::zpages`):
//!
//! - `/configz`, any method: the configuration (`config::componentconfig`) as
//!   `application/json`; 500 with Go's marshalling error when a float flag is NaN or infinite.
//! - `/debug/flags/v`, only with `--profiling` (the default): `PUT` with a verbosity as the
//!   body sets the log's verbosity at once (`logging::set_verbosity`); any other method is 406.
//!   The authorization verb is the lower-case method (`put`), as for every non-resource path.
//!   Answers are `text/plain` without a charset, as upstream's handler writes them.

use std::sync::Arc;

use super::{componentconfig, Config};
use crate::compat::parse::{go_quote, parse_go_bool, parse_go_int10, parse_go_uint10};
use crate::server::{Handler, Request, Response, Server};

pub const CONFIGZ_PATH: &str = "/configz";
pub const FLAGS_V_PATH: &str = "/debug/flags/v";

/// Serve `/configz`, and `/debug/flags/v` unless `--profiling=false`.
pub fn install(s: &mut Server, cfg: &Config) {
    s.route(CONFIGZ_PATH, configz_handler(cfg));
    let mut paths = vec!["/configz"];
    if profiling(cfg) {
        s.route_body(FLAGS_V_PATH, Arc::new(flags_v));
        paths.push("/debug");
    }
    paths.extend(["/flagz", "/healthz", "/livez", "/metrics", "/readyz"]);
    super::zpages::install(s, cfg, paths);
}

/// `--profiling` (default true; checked at start).
fn profiling(cfg: &Config) -> bool {
    cfg.given
        .get("profiling")
        .is_none_or(|v| parse_go_bool(v).unwrap_or(true))
}

/// The `/configz` handler: the document is made once, the configuration does not change.
pub fn configz_handler(cfg: &Config) -> Handler {
    let answer = match componentconfig::document(cfg) {
        Ok(body) => Response::json(200, body).with_nosniff(),
        Err(e) => Response::error(500, &e),
    };
    Arc::new(move |_| answer.clone())
}

/// The text answers of upstream's flag handler: `text/plain`, `nosniff`, a newline added.
fn plain(status: u16, text: &str) -> Response {
    Response {
        content_type: "text/plain".to_string(),
        ..Response::text(status, format!("{text}\n"))
    }
}

/// `/debug/flags/v`.
pub fn flags_v(req: &Request) -> Response {
    if req.method != "PUT" {
        return plain(406, "unsupported http method");
    }
    match set_verbosity(&req.body) {
        Ok(msg) => plain(200, &msg),
        Err(e) => plain(400, &e),
    }
}

/// Read a verbosity as upstream does (a 32-bit unsigned decimal number that also fits klog's
/// int32 level) and make it the log's.
fn set_verbosity(body: &[u8]) -> Result<String, String> {
    let Ok(val) = std::str::from_utf8(body) else {
        return Err(format!(
            "strconv.ParseUint: parsing {}: invalid syntax",
            go_quote(body)
        ));
    };
    parse_go_uint10(val, 32)?;
    let level = parse_go_int10(val, 32)
        .map_err(|e| format!("failed set klog.logging.verbosity {val}: {e}"))?;
    crate::runtime::logging::set_verbosity(u32::try_from(level).unwrap_or(0));
    Ok(format!("successfully set klog.logging.verbosity to {val}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(body: &[u8]) -> Request {
        Request {
            method: "PUT".into(),
            path: FLAGS_V_PATH.into(),
            body: body.to_vec(),
            ..Default::default()
        }
    }

    fn answer(r: &Response) -> (u16, &str, String) {
        (
            r.status,
            r.content_type.as_str(),
            String::from_utf8_lossy(&r.body).into_owned(),
        )
    }

    /// Every case as kube-controller-manager v1.28.4 answered it.
    #[test]
    fn flags_v_as_upstream_answers() {
        let _serial = crate::runtime::logging::VERBOSITY_TEST_LOCK
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for (body, status, text) in [
            (&b"3"[..], 200, "successfully set klog.logging.verbosity to 3\n"),
            (b"03", 200, "successfully set klog.logging.verbosity to 03\n"),
            (
                b"2147483647",
                200,
                "successfully set klog.logging.verbosity to 2147483647\n",
            ),
            (
                b"abc",
                400,
                "strconv.ParseUint: parsing \"abc\": invalid syntax\n",
            ),
            (b"", 400, "strconv.ParseUint: parsing \"\": invalid syntax\n"),
            (b"-1", 400, "strconv.ParseUint: parsing \"-1\": invalid syntax\n"),
            (b"+3", 400, "strconv.ParseUint: parsing \"+3\": invalid syntax\n"),
            (b" 3", 400, "strconv.ParseUint: parsing \" 3\": invalid syntax\n"),
            (
                b"0x10",
                400,
                "strconv.ParseUint: parsing \"0x10\": invalid syntax\n",
            ),
            (
                b"3\n",
                400,
                "strconv.ParseUint: parsing \"3\\n\": invalid syntax\n",
            ),
            (
                b"99999999999",
                400,
                "strconv.ParseUint: parsing \"99999999999\": value out of range\n",
            ),
            (
                b"4294967296",
                400,
                "strconv.ParseUint: parsing \"4294967296\": value out of range\n",
            ),
            (
                b"2147483648",
                400,
                "failed set klog.logging.verbosity 2147483648: strconv.ParseInt: parsing \"2147483648\": value out of range\n",
            ),
            (
                b"4294967295",
                400,
                "failed set klog.logging.verbosity 4294967295: strconv.ParseInt: parsing \"4294967295\": value out of range\n",
            ),
            (
                b"\xff",
                400,
                "strconv.ParseUint: parsing \"\\xff\": invalid syntax\n",
            ),
            (b"0", 200, "successfully set klog.logging.verbosity to 0\n"),
        ] {
            let r = flags_v(&put(body));
            assert_eq!(answer(&r), (status, "text/plain", text.to_string()));
            if body == b"3" {
                assert_eq!(crate::runtime::logging::verbosity(), 3);
                assert_eq!(log::max_level(), log::LevelFilter::Debug);
            }
            assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
        }
        assert_eq!(crate::runtime::logging::verbosity(), 0);
        for method in ["GET", "POST", "HEAD", "DELETE", "PATCH", "OPTIONS"] {
            let r = flags_v(&Request {
                method: method.into(),
                ..put(b"5")
            });
            assert_eq!(
                answer(&r),
                (406, "text/plain", "unsupported http method\n".to_string())
            );
        }
        assert_eq!(crate::runtime::logging::verbosity(), 0);
    }

    #[test]
    fn routes() {
        let server = |args: &[&str]| {
            let cfg =
                match crate::cli::parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>()) {
                    Ok(crate::cli::Command::Run(c)) => *c,
                    other => panic!("{other:?}"),
                };
            let mut s = Server::new(
                crate::server::ServeConfig {
                    bind_address: "127.0.0.1".parse().unwrap(),
                    port: 0,
                    cert_dir: None,
                    tls_cert_file: None,
                    tls_private_key_file: None,
                },
                crate::server::Health::new(),
            );
            install(&mut s, &cfg);
            s
        };
        let s = server(&[]);
        assert!(s.reads_body(FLAGS_V_PATH));
        assert!(!s.reads_body(CONFIGZ_PATH));
        let r = s.dispatch(&Request::get(CONFIGZ_PATH));
        assert_eq!(r.status, 200);
        assert_eq!(r.content_type, "application/json");
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
        assert!(r
            .body
            .starts_with(b"{\"kubecontrollermanager.config.k8s.io\":{\"kind\":\"KubeControllerManagerConfiguration\",\"apiVersion\":"));
        // Any method, as upstream's handler.
        let post = Request {
            method: "POST".into(),
            ..Request::get(CONFIGZ_PATH)
        };
        assert_eq!(s.dispatch(&post).status, 200);
        assert_eq!(s.dispatch(&Request::get("/configz/")).status, 404);
        assert_eq!(s.dispatch(&Request::get(FLAGS_V_PATH)).status, 406);

        let s = server(&["--profiling=false"]);
        assert_eq!(s.dispatch(&Request::get(FLAGS_V_PATH)).status, 404);
        assert_eq!(s.dispatch(&Request::get(CONFIGZ_PATH)).status, 200);

        // A float JSON cannot hold: upstream's 500.
        let s = server(&["--unhealthy-zone-threshold=NaN"]);
        let r = s.dispatch(&Request::get(CONFIGZ_PATH));
        assert_eq!(
            answer(&r),
            (
                500,
                "text/plain; charset=utf-8",
                "error marshaling json: json: error calling MarshalJSON for type *configz.Config: json: unsupported value: NaN\n".to_string()
            )
        );
    }
}
