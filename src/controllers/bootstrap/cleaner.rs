//! token-cleaner-controller (upstream's `bootstrap/tokencleaner.go`): a bootstrap token Secret
//! in `kube-system` whose `expiration` (RFC 3339) has passed, or does not parse, is deleted
//! with its UID as precondition (404 and 409 ignored). One that has not expired yet is looked
//! at again when it does (the queue's `AddAfter`, no polling). Keys come from additions and
//! changes of token Secrets, as upstream. Queue `token_cleaner`, one worker, identity
//! `token-cleaner`. Unlike upstream (which logs it at `-v 3` and waits for the next change), a
//! failed delete other than 404 or 409 is retried with the queue's backoff.

use super::{expiration, is_token_secret, Expiration, TOKEN_WATCH};
use crate::api::client::DeleteOptions;
use crate::api::resources::SECRETS;
use crate::cache::{Cache, Delta, DeltaKind};
use crate::controller::{Action, Controller, Cx, OnError, Outcome, Watch};
use crate::error::Result;
use crate::obj;

pub fn build(
    _: &crate::controller::BuildCx<'_, crate::config::Config>,
) -> Result<Option<crate::controller::Runnable>> {
    Ok(Some(crate::controller::Runnable::reconciles(TokenCleaner)))
}

pub struct TokenCleaner;

impl Controller for TokenCleaner {
    fn watches(&self) -> Vec<Watch> {
        vec![TOKEN_WATCH]
    }

    fn keys_for(&self, _w: &Watch, d: &Delta, _cache: &Cache) -> Vec<String> {
        let o = d.object();
        if d.kind == DeltaKind::Deleted || !is_token_secret(o) {
            return vec![];
        }
        vec![obj::key(o)]
    }

    fn reconcile(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        let Some(secret) = cx.cache.store_for(&TOKEN_WATCH).get(key) else {
            log::debug!("Secret has been deleted secret=\"{key}\"");
            return Ok(Outcome::none());
        };
        if !is_token_secret(&secret) {
            return Ok(Outcome::none());
        }
        match expiration(&secret, cx.now) {
            Expiration::Never => Ok(Outcome::none()),
            Expiration::In(d) => Ok(Outcome {
                requeue_after: Some(d),
                ..Outcome::default()
            }),
            Expiration::Expired => {
                log::debug!("Deleting expired secret secret=\"{key}\"");
                let uid = obj::uid(&secret);
                Ok(Outcome::with(vec![Action::Delete {
                    kind: SECRETS,
                    namespace: obj::namespace(&secret).to_string(),
                    name: obj::name(&secret).to_string(),
                    options: DeleteOptions {
                        precondition_uid: (!uid.is_empty()).then(|| uid.to_string()),
                        ..DeleteOptions::default()
                    },
                }]))
            }
        }
    }

    fn on_error(&self, _a: &Action, err: &crate::Error) -> OnError {
        if err.is_not_found() || err.is_conflict() {
            OnError::Ignore
        } else {
            OnError::Retry
        }
    }
}
