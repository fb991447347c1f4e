//! The sandbox API server (the `edgekcm-sandbox` crate, `sandbox/`) as the unit tests in this
//! crate use it.
//!
//! That crate is built on the `edgekcm` library, which in a unit-test build is a second copy of
//! the crate under test: its `Kind` and `Client` are not this crate's types. This wrapper takes
//! this crate's kinds and hands out this crate's client; everything else is the sandbox's own
//! (through `Deref`), and the two copies only ever talk over HTTP.

use crate::api::client::Client;
use crate::api::kubeconfig::RestConfig;
use crate::api::resources::Kind;
use serde_json::Value;

pub use edgekcm_sandbox::SandboxOptions;

pub struct Sandbox(edgekcm_sandbox::Sandbox);

impl std::ops::Deref for Sandbox {
    type Target = edgekcm_sandbox::Sandbox;
    fn deref(&self) -> &edgekcm_sandbox::Sandbox {
        &self.0
    }
}

/// The sandbox crate's copy of `kind`.
fn theirs(kind: &Kind) -> edgekcm_sandbox::Kind {
    edgekcm_sandbox::Kind::new(
        kind.group,
        kind.version,
        kind.kind,
        kind.plural,
        kind.namespaced,
    )
}

impl Sandbox {
    pub fn start(opts: SandboxOptions) -> std::io::Result<Sandbox> {
        edgekcm_sandbox::Sandbox::start(opts).map(Sandbox)
    }

    /// A client of this server without QPS limit (`user_agent` names the caller).
    pub fn client(&self, user_agent: &str) -> Client {
        let cfg = RestConfig {
            server: self.url(),
            source: "test".into(),
            ..Default::default()
        };
        Client::new(&cfg, 0.0, 1, user_agent).expect("a sandbox client")
    }

    pub fn get(&self, kind: &Kind, ns: Option<&str>, name: &str) -> Option<Value> {
        self.0.get(&theirs(kind), ns, name)
    }

    pub fn list(&self, kind: &Kind, ns: Option<&str>) -> Vec<Value> {
        self.0.list(&theirs(kind), ns)
    }

    pub fn create(&self, kind: &Kind, obj: Value) -> Result<Value, String> {
        self.0.create(&theirs(kind), obj)
    }

    pub fn delete(&self, kind: &Kind, ns: Option<&str>, name: &str) -> Result<(), String> {
        self.0.delete(&theirs(kind), ns, name)
    }
}
