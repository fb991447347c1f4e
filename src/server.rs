//! (stand-in until the secure server lands)
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
type Check = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;
pub struct ServeConfig { pub bind_address: IpAddr, pub port: u16, pub cert_dir: Option<PathBuf>, pub tls_cert_file: Option<PathBuf>, pub tls_private_key_file: Option<PathBuf> }
#[derive(Default)]
pub struct Health { checks: Mutex<Vec<(String, Check)>>, ready: Mutex<Option<Check>> }
impl Health {
    pub fn new() -> Arc<Self> { Arc::new(Health::default()) }
    pub fn add_check(&self, name: &str, c: Check) { self.checks.lock().unwrap_or_else(|p| p.into_inner()).push((name.into(), c)); }
    pub fn set_ready_check(&self, c: Check) { *self.ready.lock().unwrap_or_else(|p| p.into_inner()) = Some(c); }
}
pub struct Server;
pub struct RunningServer;
impl Server { pub fn new(_c: ServeConfig, _h: Arc<Health>) -> Self { Server } pub fn start(self) -> crate::Result<RunningServer> { Err(crate::Error::Config("secure serving not built yet".into())) } }
impl RunningServer { pub fn addr(&self) -> SocketAddr { SocketAddr::from(([127, 0, 0, 1], 0)) } pub fn stop(&self) {} }
