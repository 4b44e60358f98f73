//! The `versioned` test guest at the version in Cargo.toml.
include!("../../versioned.rs");
