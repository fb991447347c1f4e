//! edgekcm: the Kubernetes kube-controller-manager as one small static binary.

pub mod api;
pub mod auth;
pub mod cache;
pub mod certs;
pub mod cli;
pub mod compat;
pub mod config;
pub mod controller;
pub mod controllers;
pub mod credentials;
pub mod error;
pub mod events;
#[cfg(test)]
mod fuzz;
#[doc(hidden)]
pub mod fuzzing;
pub mod http_head;
pub mod leader;
pub mod manager;
pub mod metrics;
pub mod obj;
pub mod pki;
pub mod queue;
pub mod run;
pub mod runtime;
#[cfg(test)]
mod sandbox;
pub mod server;
pub mod sort;
pub mod startup;

pub use error::{Error, Result};
