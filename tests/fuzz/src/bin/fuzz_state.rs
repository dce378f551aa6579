//! AFL target over [`tollgate_fuzz::state::check`]: `cargo afl fuzz -i corpus/state -o OUT
//! target/afl/debug/fuzz_state` (see `smoke.sh`).

fn main() {
    afl::fuzz!(|data: &[u8]| {
        tollgate_fuzz::state::check(data);
    });
}
