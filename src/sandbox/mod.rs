//! The sandbox API server: an in-repo test double speaking real HTTP on loopback.
