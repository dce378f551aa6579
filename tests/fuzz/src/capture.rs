//! Capture files: [`for_each_frame`] on any bytes, pcap or pcapng.

use tollgate::tools::capture::for_each_frame;
use tollgate_filter::parse_frame;

/// Reads `data` as a capture and parses every frame in it.
///
/// # Panics
/// When an invariant breaks: the count returned (or the count in the error) is not the
/// number of frames handed over, or an error names an offset past the end of the input.
pub fn check(data: &[u8]) {
    let mut handed = 0u64;
    let result = for_each_frame(data, |_, frame| {
        handed += 1;
        // A frame is outside input too; the frame target checks it in depth.
        let _ = parse_frame(frame);
    });
    match result {
        Ok(frames) => assert_eq!(frames, handed, "frames counted"),
        Err(err) => {
            assert_eq!(err.frames, handed, "frames before the error: {err}");
            assert!(err.offset <= data.len(), "offset past the end: {err}");
        }
    }
}
