//! AFL target over [`tollgate_fuzz::config::check`]: `cargo afl fuzz -i corpus/config -o OUT
//! target/afl/debug/fuzz_config` (see `smoke.sh`).

fn main() {
    afl::fuzz!(|data: &[u8]| {
        tollgate_fuzz::config::check(data);
    });
}
