//! (temporary stand-in; replaced by the kubeconfig module)
use std::path::PathBuf;
#[derive(Clone, Default)]
pub struct RestConfig {
    pub server: String,
    pub ca_pem: Option<Vec<u8>>,
    pub ca_inline: Option<Vec<u8>>,
    pub client_cert_pem: Option<Vec<u8>>,
    pub client_key_pem: Option<Vec<u8>>,
    pub token: Option<String>,
    pub token_file: Option<PathBuf>,
    pub insecure_skip_tls_verify: bool,
    pub tls_server_name: Option<String>,
    pub source: String,
}
