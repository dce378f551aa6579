//! AFL target over [`tollgate_fuzz::admin::check`]: `cargo afl fuzz -i corpus/admin -o OUT
//! target/afl/debug/fuzz_admin` (see `smoke.sh`).

fn main() {
    afl::fuzz!(|data: &[u8]| {
        tollgate_fuzz::admin::check(data);
    });
}
