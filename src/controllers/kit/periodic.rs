//! A pass over the cache run now and then every `every` on the shared pool, never two at a
//! time (a pass still running when the next is due, against a slow server, makes the next one
//! unnecessary), until the controller is stopped or the cache is gone: the periodic cleaners'
//! loop (upstream's `wait.Until`).

use crate::api::client::Client;
use crate::cache::Cache;
use crate::controller::RunEnv;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Starts the passes; `pass` gets the cache, the controller's client and `stopped`.
pub fn start<F>(env: &RunEnv, every: Duration, stopped: Arc<AtomicBool>, pass: F)
where
    F: Fn(&Cache, &Client, &AtomicBool) + Send + Sync + 'static,
{
    let (cache, client) = (Arc::downgrade(&env.cache), env.client.clone());
    let (running, pass) = (Arc::new(Mutex::new(())), Arc::new(pass));
    let run = move || {
        if stopped.load(Ordering::SeqCst) {
            return false;
        }
        let Some(cache) = cache.upgrade() else {
            return false;
        };
        let (client, stopped, running, pass) = (
            client.clone(),
            stopped.clone(),
            running.clone(),
            pass.clone(),
        );
        crate::runtime::pool::spawn(move || {
            if let Ok(_held) = running.try_lock() {
                pass(&cache, &client, &stopped);
            }
        });
        true
    };
    run();
    crate::runtime::timer::every(every, run);
}
