//! Open counts go up and down: the estimate never falls below the true open count of any key,
//! however acquires and releases of colliding keys interleave, and everything released reads 0.

use std::collections::HashMap;

use proptest::prelude::*;
use tollgate_sketch::ConcurrencySketch;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn open_counts_are_never_underestimated(
        ops in prop::collection::vec((0u8..40, any::<bool>()), 1..400),
        depth in 1usize..=8,
    ) {
        // 16 counters per row: 40 keys collide constantly.
        let sketch = ConcurrencySketch::new(16 * 4 * depth, depth, 5).expect("valid");
        let mut open: HashMap<u8, u64> = HashMap::new();
        for (key, acquire) in ops {
            let held = open.entry(key).or_default();
            if acquire || *held == 0 {
                *held += 1;
                let estimate = sketch.acquire(&[key]);
                prop_assert!(estimate >= *held, "acquire {key}: {estimate} < {held}");
            } else {
                *held -= 1;
                sketch.release(&[key]);
            }
            for (k, n) in &open {
                prop_assert!(sketch.estimate(&[*k]) >= *n);
            }
        }
        for (key, n) in open {
            (0..n).for_each(|_| sketch.release(&[key]));
        }
        for key in 0..40u8 {
            prop_assert_eq!(sketch.estimate(&[key]), 0);
        }
    }
}

#[test]
fn bad_sizes_are_errors() {
    assert!(ConcurrencySketch::new(1 << 20, 0, 1).is_err());
    assert!(ConcurrencySketch::new(1 << 20, 9, 1).is_err());
    assert!(ConcurrencySketch::new(63, 1, 1).is_err());
    let sketch = ConcurrencySketch::new(64, 1, 1).expect("16 counters");
    assert_eq!(
        sketch.memory_bytes(),
        std::mem::size_of::<ConcurrencySketch>() + 64
    );
}
