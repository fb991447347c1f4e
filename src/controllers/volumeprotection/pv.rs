//! persistentvolume-protection-controller: the `kubernetes.io/pv-protection` finalizer.

use super::{is_deletion_candidate, need_to_add_finalizer, with_finalizer, without_finalizer};
use crate::api::resources::PERSISTENTVOLUMES;
use crate::cache::{Cache, Delta, DeltaKind};
use crate::controllers::kit::volume::PV_PROTECTION_FINALIZER;
use crate::controllers::{Action, Controller, Cx, Outcome, Watch};
use crate::error::Result;

/// Volumes, whole (they are written back).
pub const VOLUME_WATCH: Watch = Watch::full(PERSISTENTVOLUMES);

/// Its row in the controller table.
pub fn build(
    _: &crate::controller::BuildCx<'_, crate::config::Config>,
) -> Result<Option<crate::controllers::Runnable>> {
    Ok(Some(crate::controllers::Runnable::reconciles(PvProtection)))
}

pub struct PvProtection;

impl Controller for PvProtection {
    fn watches(&self) -> Vec<Watch> {
        vec![VOLUME_WATCH]
    }

    fn keys_for(&self, _: &Watch, d: &Delta, _: &Cache) -> Vec<String> {
        match (d.kind, &d.new) {
            (DeltaKind::Added | DeltaKind::Updated, Some(pv))
                if need_to_add_finalizer(pv, PV_PROTECTION_FINALIZER)
                    || is_deletion_candidate(pv, PV_PROTECTION_FINALIZER) =>
            {
                vec![crate::obj::name(pv).to_string()]
            }
            _ => vec![],
        }
    }

    fn reconcile(&self, cx: &Cx, key: &str) -> Result<Outcome> {
        let Some(pv) = cx.cache.store_for(&VOLUME_WATCH).get(key) else {
            return Ok(Outcome::none());
        };
        if is_deletion_candidate(&pv, PV_PROTECTION_FINALIZER)
            && pv["status"]["phase"].as_str() != Some("Bound")
        {
            return Ok(Outcome::with(vec![Action::Update {
                kind: PERSISTENTVOLUMES,
                object: without_finalizer(&pv, PV_PROTECTION_FINALIZER),
            }]));
        }
        if need_to_add_finalizer(&pv, PV_PROTECTION_FINALIZER) {
            return Ok(Outcome::with(vec![Action::Update {
                kind: PERSISTENTVOLUMES,
                object: with_finalizer(&pv, PV_PROTECTION_FINALIZER),
            }]));
        }
        Ok(Outcome::none())
    }
}
