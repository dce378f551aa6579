//! The reply buffer: one per worker thread, shared by every session whose replies that thread
//! relays, instead of one per session (64 KiB each, 4 GiB at 65,536 sessions). A reply is read
//! into it and sent on without an `.await` in between, so no two tasks ever use it at once.

use std::cell::Cell;

/// The largest datagram relayed.
pub(super) const MAX_DATAGRAM: usize = 65_535;

thread_local! {
    static BUFFER: Cell<Option<Box<[u8]>>> = const { Cell::new(None) };
}

/// Runs `use_it` on this thread's buffer (allocated on the thread's first use). `use_it` must
/// not keep the buffer across an `.await`: it is a plain closure, so it cannot.
pub(super) fn with<T>(use_it: impl FnOnce(&mut [u8]) -> T) -> T {
    let mut buffer = BUFFER
        .take()
        .unwrap_or_else(|| vec![0; MAX_DATAGRAM].into_boxed_slice());
    let result = use_it(&mut buffer);
    BUFFER.set(Some(buffer));
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_reuses_one_buffer() {
        let first = with(|buffer| buffer.as_ptr() as usize);
        let second = with(|buffer| {
            assert_eq!(buffer.len(), MAX_DATAGRAM);
            buffer.as_ptr() as usize
        });
        assert_eq!(first, second);
    }
}
