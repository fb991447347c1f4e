//! Talking to the API server: configuration, the HTTP client, watch framing, the kind table.

pub mod client;
pub mod discovery;
pub mod echo;
pub mod fence;
pub mod kubeconfig;
pub mod labels;
pub mod resources;
mod tls;
pub mod trim;
pub mod watch;
pub mod yaml;

pub use resources::Kind;
