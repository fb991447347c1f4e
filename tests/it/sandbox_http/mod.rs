//! What the sandbox API tests share: a plain ureq client of the sandbox over real HTTP,
//! watch streams read line by line, and small object builders.

pub use edgekcm::api::resources::{CONFIGMAPS, DEPLOYMENTS, NAMESPACES, PODS};
pub use edgekcm_sandbox::{Sandbox, SandboxOptions};
pub use serde_json::{json, Value};
pub use std::io::{BufRead, BufReader, Read, Write};
pub use std::net::TcpStream;
pub use std::time::{Duration, Instant};

pub struct Client {
    pub agent: ureq::Agent,
    pub base: String,
    pub token: Option<String>,
}

pub struct Resp {
    pub code: u16,
    pub body: Value,
    pub retry_after: Option<String>,
}

pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .timeout_connect(Some(Duration::from_secs(5)))
        .timeout_per_read(Some(Duration::from_secs(10)))
        .user_agent("sandbox-test/1")
        .build()
        .new_agent()
}

pub fn start(opts: SandboxOptions) -> (Sandbox, Client) {
    let sb = Sandbox::start(opts).expect("start sandbox");
    let c = Client {
        agent: agent(),
        base: sb.url(),
        token: None,
    };
    (sb, c)
}

pub fn sandbox() -> (Sandbox, Client) {
    start(SandboxOptions::default())
}

impl Client {
    pub fn with_token(&self, t: &str) -> Client {
        Client {
            agent: agent(),
            base: self.base.clone(),
            token: Some(t.to_string()),
        }
    }

    pub fn try_call(
        &self,
        method: &str,
        path: &str,
        ctype: &str,
        body: Option<&Value>,
    ) -> Result<Resp, ureq::Error> {
        let url = format!("{}{}", self.base, path);
        let auth = self.token.as_ref().map(|t| format!("Bearer {t}"));
        macro_rules! with_auth {
            ($b:expr) => {{
                let b = $b;
                match &auth {
                    Some(a) => b.header("Authorization", a),
                    None => b,
                }
            }};
        }
        let text = body.map(|b| b.to_string()).unwrap_or_default();
        let r = match (method, body) {
            ("GET", _) => with_auth!(self.agent.get(&url)).call(),
            ("DELETE", None) => with_auth!(self.agent.delete(&url)).call(),
            ("DELETE", Some(_)) => with_auth!(self.agent.delete(&url))
                .force_send_body()
                .content_type(ctype)
                .send(&text),
            ("POST", _) => with_auth!(self.agent.post(&url))
                .content_type(ctype)
                .send(&text),
            ("PUT", _) => with_auth!(self.agent.put(&url))
                .content_type(ctype)
                .send(&text),
            ("PATCH", _) => with_auth!(self.agent.patch(&url))
                .content_type(ctype)
                .send(&text),
            _ => panic!("method {method}"),
        }?;
        let code = r.status().as_u16();
        let retry_after = r
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let mut r = r;
        let s = r.body_mut().read_to_string()?;
        let body = serde_json::from_str(&s).unwrap_or(Value::String(s));
        Ok(Resp {
            code,
            body,
            retry_after,
        })
    }

    pub fn call(&self, method: &str, path: &str, ctype: &str, body: Option<&Value>) -> Resp {
        self.try_call(method, path, ctype, body)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    pub fn get(&self, path: &str) -> Resp {
        self.call("GET", path, "", None)
    }
    pub fn post(&self, path: &str, body: Value) -> Resp {
        self.call("POST", path, "application/json", Some(&body))
    }
    pub fn put(&self, path: &str, body: Value) -> Resp {
        self.call("PUT", path, "application/json", Some(&body))
    }
    pub fn patch(&self, path: &str, ctype: &str, body: Value) -> Resp {
        self.call("PATCH", path, ctype, Some(&body))
    }
    pub fn delete(&self, path: &str, opts: Option<Value>) -> Resp {
        self.call("DELETE", path, "application/json", opts.as_ref())
    }

    pub fn watch(&self, path: &str) -> Watch {
        let url = format!("{}{}", self.base, path);
        let mut b = self.agent.get(&url);
        if let Some(t) = &self.token {
            b = b.header("Authorization", &format!("Bearer {t}"));
        }
        let r = b.call().expect("watch");
        assert_eq!(r.status().as_u16(), 200, "watch {path}");
        let reader: Box<dyn Read + Send> = Box::new(r.into_body().into_reader());
        Watch {
            lines: BufReader::new(reader),
        }
    }
}

pub struct Watch {
    pub lines: BufReader<Box<dyn Read + Send>>,
}

impl Watch {
    /// The next event, or None at the end of the stream.
    pub fn next(&mut self) -> Option<Value> {
        let mut line = String::new();
        match self.lines.read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(serde_json::from_str(&line).expect("event is JSON")),
        }
    }

    /// The next event that is not a BOOKMARK.
    pub fn next_event(&mut self) -> Option<Value> {
        loop {
            let e = self.next()?;
            if e["type"] != "BOOKMARK" {
                return Some(e);
            }
        }
    }
}

pub fn cm(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "labels": labels}, "data": {"k": "v"}})
}

pub const CMS: &str = "/api/v1/namespaces/default/configmaps";
pub const DEPLOYS: &str = "/apis/apps/v1/namespaces/default/deployments";

pub fn deployment(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
           "spec": {"selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}},
                                 "spec": {"containers": [{"name": "c", "image": "nginx:1.25"}]}}}})
}

pub fn rv(o: &Value) -> u64 {
    o["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("resourceVersion")
}

pub fn poll<F: FnMut() -> bool>(mut f: F) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}
