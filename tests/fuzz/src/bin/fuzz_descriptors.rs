//! AFL target over [`tollgate_fuzz::descriptors::check`]: `cargo afl fuzz -i corpus/descriptors
//! -o OUT target/afl/release/fuzz_descriptors` (see `smoke.sh`).

fn main() {
    afl::fuzz!(|data: &[u8]| {
        tollgate_fuzz::descriptors::check(data);
    });
}
