//! AFL target over [`tollgate_fuzz::capture::check`]: `cargo afl fuzz -i corpus/capture -o OUT
//! target/afl/debug/fuzz_capture` (see `smoke.sh`).

fn main() {
    afl::fuzz!(|data: &[u8]| {
        tollgate_fuzz::capture::check(data);
    });
}
