//! AFL target over [`tollgate_fuzz::cluster_lists::check`]: `cargo afl fuzz -i corpus/cluster_lists -o OUT
//! target/afl/debug/fuzz_cluster_lists` (see `smoke.sh`).

fn main() {
    afl::fuzz!(|data: &[u8]| {
        tollgate_fuzz::cluster_lists::check(data);
    });
}
