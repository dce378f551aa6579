//! AFL target over [`tollgate_fuzz::frame::check`]: `cargo afl fuzz -i corpus/frame -o OUT
//! target/afl/debug/fuzz_frame` (see `smoke.sh`).

fn main() {
    afl::fuzz!(|data: &[u8]| {
        tollgate_fuzz::frame::check(data);
    });
}
