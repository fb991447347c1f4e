//! The API client's own requests (`src/api/client/exchange.rs`, `src/api/client/direct.rs`) against
//! an in-process TLS server: bodies of any size, keep-alive, pooled connections the server
//! closed or sent more on, and the request timeout.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use edgekcm::api::client::Client;
use edgekcm::api::kubeconfig::RestConfig;

struct TestServer {
    url: String,
    ca_pem: String,
}

/// A TLS 1.3 server on 127.0.0.1. Each answer tells the connection's number, the request's
/// number on it and the length of the body it got. `/close` closes the connection after the
/// answer, `/extra` sends bytes after it, `/slow` answers after 3 s.
fn serve() -> TestServer {
    let (config, ca_pem) = crate::common::loopback_tls_server(None);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    let conns = Arc::new(AtomicUsize::new(0));
    std::thread::spawn(move || {
        for sock in listener.incoming() {
            let Ok(sock) = sock else { return };
            let config = config.clone();
            let conn_no = conns.fetch_add(1, Ordering::SeqCst) + 1;
            std::thread::spawn(move || {
                let conn = rustls::ServerConnection::new(config).unwrap();
                let mut tls = BufReader::new(rustls::StreamOwned::new(conn, sock));
                for n in 1.. {
                    let (mut path, mut length) = (String::new(), 0usize);
                    loop {
                        let mut line = String::new();
                        match tls.read_line(&mut line) {
                            Ok(0) | Err(_) => return,
                            Ok(_) if line == "\r\n" => break,
                            Ok(_) => {}
                        }
                        if path.is_empty() {
                            path = line.split(' ').nth(1).unwrap_or("").to_string();
                        }
                        let lower = line.to_ascii_lowercase();
                        if let Some(v) = lower.strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap();
                        }
                    }
                    let mut body = vec![0; length];
                    if tls.read_exact(&mut body).is_err() {
                        return;
                    }
                    if path == "/slow" {
                        std::thread::sleep(Duration::from_secs(3));
                    }
                    let answer = format!(r#"{{"conn":{conn_no},"n":{n},"len":{length}}}"#);
                    let resp = match path.as_str() {
                        // In chunks, with an extension and a trailer.
                        "/chunked" => {
                            let (a, b) = answer.split_at(5);
                            format!(
                                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x};x=y\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\nT: 1\r\n\r\n",
                                a.len(),
                                b.len()
                            )
                        }
                        "/close-header" => format!(
                            "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{answer}",
                            answer.len()
                        ),
                        _ => format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{answer}",
                            answer.len()
                        ),
                    };
                    let w = tls.get_mut();
                    if w.write_all(resp.as_bytes())
                        .and_then(|_| w.flush())
                        .is_err()
                    {
                        return;
                    }
                    match path.as_str() {
                        "/close" => return,
                        "/extra" => {
                            let _ = w.write_all(b"unexpected");
                            let _ = w.flush();
                        }
                        _ => {}
                    }
                }
            });
        }
    });
    TestServer { url, ca_pem }
}

fn client(srv: &TestServer, timeout: Duration) -> Client {
    edgekcm::api::client::install_crypto_provider();
    let cfg = RestConfig {
        server: srv.url.clone(),
        ca_pem: Some(srv.ca_pem.as_bytes().to_vec()),
        source: "kubeconfig /test/tls.kubeconfig".into(),
        ..RestConfig::default()
    };
    Client::new_with_timeout(&cfg, 0.0, 1, "edgekcm-test", timeout).unwrap()
}

/// (connection, request on it, body length) of an answer.
fn call(c: &Client, method: &str, path: &str, body: Option<&str>) -> (u64, u64, u64) {
    let v = c
        .request(
            method,
            path,
            body.map(|b| ("application/json", b)),
            "application/json",
        )
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
    (n("conn"), n("n"), n("len"))
}

#[test]
fn bodies_of_any_size_go_over_one_kept_connection() {
    let srv = serve();
    let c = client(&srv, Duration::from_secs(10));
    let (conn, n, len) = call(&c, "GET", "/a", None);
    assert_eq!((n, len), (1, 0));
    // Around the output buffer (4 KiB), the piece a large request is sent in (16 KiB) and a TLS
    // record (16 KiB), and well past them.
    let sizes = [
        10,
        4095,
        4096,
        4097,
        16 * 1024 - 1,
        16 * 1024,
        16 * 1024 + 1,
        300_000,
    ];
    for (at, size) in (2..).zip(sizes) {
        let body = format!("\"{}\"", "x".repeat(size - 2));
        assert_eq!(
            call(&c, "PUT", "/b", Some(&body)),
            (conn, at, size as u64),
            "a body of {size} bytes"
        );
    }
}

#[test]
fn a_connection_the_server_closed_or_sent_more_on_is_not_used_again() {
    let srv = serve();
    let c = client(&srv, Duration::from_secs(10));
    let (first, _, _) = call(&c, "GET", "/close", None);
    std::thread::sleep(Duration::from_millis(100));
    let (second, n, _) = call(&c, "POST", "/extra", Some("{}"));
    assert_ne!(second, first, "the closed connection was not taken again");
    assert_eq!(n, 1);
    std::thread::sleep(Duration::from_millis(100));
    let (third, n, _) = call(&c, "GET", "/a", None);
    assert_ne!(
        third, second,
        "a connection with unread bytes was not taken again"
    );
    assert_eq!(n, 1);
    assert_eq!(call(&c, "GET", "/a", None), (third, 2, 0));
}

#[test]
fn chunked_answers_and_connection_close() {
    let srv = serve();
    let c = client(&srv, Duration::from_secs(10));
    let (conn, n, _) = call(&c, "GET", "/chunked", None);
    assert_eq!(n, 1);
    // Read to its end: the connection is taken again.
    assert_eq!(call(&c, "POST", "/chunked", Some("{}")), (conn, 2, 2));
    assert_eq!(call(&c, "GET", "/close-header", None), (conn, 3, 0));
    let (next, n, _) = call(&c, "GET", "/a", None);
    assert_ne!(
        next, conn,
        "a connection the answer said was closing was not taken again"
    );
    assert_eq!(n, 1);
}

#[test]
fn an_answer_later_than_the_timeout_fails_in_time() {
    let srv = serve();
    let c = client(&srv, Duration::from_secs(1));
    let started = std::time::Instant::now();
    let err = c
        .request(
            "PUT",
            "/slow",
            Some(("application/json", "{}")),
            "application/json",
        )
        .unwrap_err();
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(2900),
        "failed after {took:?}: {err}"
    );
    assert!(err.to_string().contains("imeout"), "{err}");
}
