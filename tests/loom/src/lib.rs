//! Loom models of the sketch’s lock-free races live in `tests/`.
