//! PROXY protocol v1 and v2 (being written).
