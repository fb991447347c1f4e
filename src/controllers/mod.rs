//! Controllers.

pub mod registry;
