//! Where the authentication settings come from: the `extension-apiserver-authentication`
//! ConfigMap (re-read when stale) and `--client-ca-file` (re-read when it changes).

use super::*;

// ---------------------------------------------------------------------------------------------
// The authentication ConfigMap

/// `kube-system/extension-apiserver-authentication`, read through a reviewer client and kept
/// for [`CONFIGMAP_REFRESH`].
pub struct AuthConfigMap {
    pub(super) client: Arc<dyn Reviewer>,
    pub(super) refresh: Duration,
    pub(super) state: Mutex<ConfigMapState>,
}

#[derive(Default)]
pub(super) struct ConfigMapState {
    pub(super) data: Arc<BTreeMap<String, String>>,
    pub(super) fetched: Option<Instant>,
}

pub(super) fn configmap_data(cm: &Value) -> BTreeMap<String, String> {
    cm.get("data")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

impl AuthConfigMap {
    pub fn new(client: Arc<dyn Reviewer>, refresh: Duration) -> Arc<Self> {
        Arc::new(AuthConfigMap {
            client,
            refresh,
            state: Mutex::new(ConfigMapState::default()),
        })
    }

    /// Read it now; Ok(false) when it does not exist (then its settings are empty).
    pub fn load(&self) -> Result<bool> {
        let mut st = lock(&self.state);
        self.load_locked(&mut st)
    }

    pub(super) fn load_locked(&self, st: &mut ConfigMapState) -> Result<bool> {
        st.fetched = Some(Instant::now());
        let cm = self
            .client
            .get_configmap(AUTH_CONFIGMAP_NAMESPACE, AUTH_CONFIGMAP_NAME)?;
        st.data = Arc::new(cm.as_ref().map(configmap_data).unwrap_or_default());
        Ok(cm.is_some())
    }

    /// The current data, re-read first when older than the refresh period (a failed re-read
    /// keeps the last data).
    pub fn data(&self) -> Arc<BTreeMap<String, String>> {
        let mut st = lock(&self.state);
        let stale = st.fetched.is_none_or(|t| t.elapsed() >= self.refresh);
        if stale {
            if let Err(e) = self.load_locked(&mut st) {
                log::warn!(
                    "unable to read configmap/{AUTH_CONFIGMAP_NAME} in {AUTH_CONFIGMAP_NAMESPACE}: {e}"
                );
            }
        }
        st.data.clone()
    }
}

/// Where a CA bundle comes from.
pub enum CaSource {
    /// A PEM file, re-read when its modification time or size changes.
    File(PathBuf),
    /// A key of the authentication ConfigMap.
    ConfigMap(Arc<AuthConfigMap>, &'static str),
}

pub(super) struct CaProvider {
    pub(super) source: CaSource,
    /// (what it was built from, the bundle).
    pub(super) cached: Mutex<Option<(String, Option<CaBundle>)>>,
}

pub(super) fn file_stamp(p: &Path) -> String {
    match std::fs::metadata(p) {
        Ok(m) => format!(
            "{:?}/{}",
            m.modified()
                .ok()
                .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok()),
            m.len()
        ),
        Err(e) => format!("error {e}"),
    }
}

impl CaProvider {
    pub(super) fn new(source: CaSource) -> Self {
        CaProvider {
            source,
            cached: Mutex::new(None),
        }
    }

    /// The bundle now; None when there is none (no verification possible).
    pub(super) fn bundle(&self) -> Option<CaBundle> {
        let (stamp, pem) = match &self.source {
            CaSource::File(p) => (file_stamp(p), None),
            CaSource::ConfigMap(cm, key) => {
                let data = cm.data();
                let pem = data.get(*key).cloned().unwrap_or_default();
                (pem.clone(), Some(pem))
            }
        };
        let mut cached = lock(&self.cached);
        if let Some((s, b)) = cached.as_ref() {
            if *s == stamp {
                return b.clone();
            }
        }
        let bundle = match (&self.source, pem) {
            (CaSource::File(p), _) => match std::fs::read(p) {
                Ok(bytes) => CaBundle::from_pem(&bytes)
                    .map_err(|e| log::error!("{}: {e}", p.display()))
                    .ok(),
                Err(e) => {
                    log::error!("unable to read {}: {e}", p.display());
                    None
                }
            },
            (_, Some(pem)) if pem.trim().is_empty() => None,
            (CaSource::ConfigMap(_, key), Some(pem)) => CaBundle::from_pem(pem.as_bytes())
                .map_err(|e| log::error!("configmap key {key}: {e}"))
                .ok(),
            _ => None,
        };
        *cached = Some((stamp, bundle.clone()));
        bundle
    }
}
