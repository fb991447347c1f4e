//! The shared watch cache.

