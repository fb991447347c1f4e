//! edgekcm: the Kubernetes kube-controller-manager as one small static binary.

pub mod api;
pub mod auth;
pub mod cache;
pub mod certs;
pub mod cli;
pub mod config;
pub mod controller;
pub mod controllers;
pub mod credentials;
pub mod error;
pub mod events;
#[cfg(test)]
mod fuzz;
pub mod gofmt;
pub mod heap;
pub mod leader;
pub mod logging;
pub mod manager;
pub mod memops;
pub mod metrics;
pub mod notify;
pub mod obj;
pub mod pool;
pub mod queue;
pub mod reactor;
pub mod run;
#[cfg(test)]
mod sandbox;
pub mod server;
pub mod startup;
pub mod timefmt;
pub mod timer;
pub mod workers;

pub use error::{Error, Result};
