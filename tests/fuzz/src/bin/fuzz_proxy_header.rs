//! AFL target over [`tollgate_fuzz::proxy_header::check`]: `cargo afl fuzz -i corpus/proxy_header -o OUT
//! target/afl/debug/fuzz_proxy_header` (see `smoke.sh`).

fn main() {
    afl::fuzz!(|data: &[u8]| {
        tollgate_fuzz::proxy_header::check(data);
    });
}
