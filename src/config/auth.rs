//! The secure port's delegated authentication and authorization, as the flags set them.

use super::Config;
use crate::auth::{
    delegated_client, AuthOptions, RequestHeaderOptions, RequestHeaderSettings, Reviewer,
};
use crate::error::Result;
use std::sync::Arc;

impl AuthOptions {
    /// The options kube-controller-manager's flags give.
    pub fn from_config(cfg: &Config) -> Result<AuthOptions> {
        let authn = delegated_client(cfg.authentication_kubeconfig.as_deref(), "authentication")?;
        let authz = delegated_client(cfg.authorization_kubeconfig.as_deref(), "authorization")?;
        Ok(AuthOptions {
            authentication: authn.map(|c| Arc::new(c) as Arc<dyn Reviewer>),
            authorization: authz.map(|c| Arc::new(c) as Arc<dyn Reviewer>),
            client_ca_file: cfg.client_ca_file.clone(),
            request_header: cfg
                .requestheader_client_ca_file
                .clone()
                .map(|client_ca_file| RequestHeaderOptions {
                    client_ca_file,
                    settings: RequestHeaderSettings {
                        username_headers: cfg.requestheader_username_headers.clone(),
                        group_headers: cfg.requestheader_group_headers.clone(),
                        extra_headers_prefixes: cfg.requestheader_extra_headers_prefix.clone(),
                        allowed_names: cfg.requestheader_allowed_names.clone(),
                    },
                }),
            skip_lookup: cfg.authentication_skip_lookup,
            tolerate_lookup_failure: cfg.authentication_tolerate_lookup_failure,
            token_cache_ttl: cfg.authentication_token_webhook_cache_ttl,
            authorized_ttl: cfg.authorization_webhook_cache_authorized_ttl,
            unauthorized_ttl: cfg.authorization_webhook_cache_unauthorized_ttl,
            always_allow_paths: cfg.authorization_always_allow_paths.clone(),
            ..AuthOptions::default()
        })
    }
}
