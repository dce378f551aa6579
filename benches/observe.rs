#[path = "workload.rs"]
mod workload;
fn main() { let _ = workload::zipf_stream(1000, 1.1, 10, 1); }
