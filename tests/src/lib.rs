//! Harness helpers.
