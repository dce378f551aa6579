//! The sketch's errors: bad sizes at build time, mismatched shapes at merge time. The hot path
//! has none.

use std::fmt;

/// Why a [`crate::Builder`] refused to build a sketch.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum BuildError {
    /// The window length was zero.
    ZeroWindow,
    /// The memory budget cannot hold the smallest useful sketch of the requested depth.
    MemoryTooSmall {
        /// The budget given, in bytes.
        requested: usize,
        /// The smallest budget that works with the other settings, in bytes.
        minimum: usize,
    },
    /// The depth (rows of counters) was outside `1..=8`.
    DepthOutOfRange {
        /// The depth given.
        requested: usize,
    },
    /// The front's share of memory was not a number in `0.0..=0.5`.
    FrontShareOutOfRange {
        /// The share given.
        requested: f64,
    },
    /// The front weight was zero (a front that absorbs nothing: disable it instead).
    ZeroFrontWeight,
    /// The lag tolerance was over half the window.
    LagToleranceOutOfRange {
        /// The tolerance given.
        requested: std::time::Duration,
        /// The window it was given for.
        window: std::time::Duration,
    },
    /// The reserve shift was over [`crate::Builder::MAX_RESERVE_SHIFT`].
    ReserveShiftOutOfRange {
        /// The shift given.
        requested: u32,
    },
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::ZeroWindow => write!(f, "the window length must be greater than zero"),
            BuildError::MemoryTooSmall { requested, minimum } => write!(
                f,
                "a memory budget of {requested} bytes is too small: this shape needs at least \
                 {minimum} bytes"
            ),
            BuildError::DepthOutOfRange { requested } => {
                write!(
                    f,
                    "depth {requested} is out of range: it must be 1 to 8 rows"
                )
            }
            BuildError::FrontShareOutOfRange { requested } => write!(
                f,
                "front share {requested} is out of range: it must be from 0.0 (no front) to 0.5"
            ),
            BuildError::ZeroFrontWeight => write!(
                f,
                "the front weight must be at least 1 (use front_share(0.0) to disable the front)"
            ),
            BuildError::LagToleranceOutOfRange { requested, window } => write!(
                f,
                "lag tolerance {requested:?} is out of range: it must be at most half the \
                 window ({window:?} / 2)"
            ),
            BuildError::ReserveShiftOutOfRange { requested } => write!(
                f,
                "reserve shift {requested} is out of range: it must be 1 to {} (0 or None: no \
                 reservations)",
                crate::Builder::MAX_RESERVE_SHIFT
            ),
        }
    }
}

impl std::error::Error for BuildError {}

/// Why a window snapshot could not be merged into a sketch.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MergeError {
    /// The snapshot was taken from a sketch of another shape; counters would not line up.
    ShapeMismatch {
        /// Which part of the shape differs.
        field: &'static str,
        /// This sketch's value.
        ours: u64,
        /// The snapshot's value.
        theirs: u64,
    },
    /// The snapshot's window is neither the current nor the previous one here.
    WindowOutOfRange {
        /// The snapshot's window index.
        window: u64,
        /// This sketch's current window index at the time of the merge.
        current: u64,
    },
    /// The snapshot's data does not match the shape it claims (a corrupt snapshot).
    Corrupt {
        /// What is wrong.
        what: &'static str,
    },
}

impl fmt::Display for MergeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MergeError::ShapeMismatch {
                field,
                ours,
                theirs,
            } => write!(
                f,
                "cannot merge a window from a sketch of another shape: {field} is {theirs} \
                 there and {ours} here"
            ),
            MergeError::WindowOutOfRange { window, current } => write!(
                f,
                "cannot merge window {window}: only the current window ({current}) and the one \
                 before it can be merged"
            ),
            MergeError::Corrupt { what } => write!(f, "corrupt window snapshot: {what}"),
        }
    }
}

impl std::error::Error for MergeError {}
