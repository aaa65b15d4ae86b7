//! When a table that a burst grew gives its memory back.
//!
//! A table (the watch's expected echoes, the spawner's objects) can grow to
//! hold every listed object at once, then drain. Kept at its peak, it
//! holds its largest size for the rest of the operator's life. It shrinks
//! once it is an eighth full, to twice what it holds, so that each shrink
//! (a copy of what is left) is paid for by the removals before it, and a
//! table that fills again does not shrink and grow by turns.

/// Below this capacity a table is never shrunk: a shrink would give back
/// too little to be worth its copy.
pub(crate) const KEPT_CAPACITY: usize = 64;

/// The capacity to shrink to, if a table of `capacity` that holds `len`
/// should shrink.
pub(crate) fn shrunk(len: usize, capacity: usize) -> Option<usize> {
    (capacity > KEPT_CAPACITY && len * 8 <= capacity).then_some(len * 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shrinks_an_eighth_full_table_to_twice_its_contents() {
        assert_eq!(shrunk(16, 128), Some(32));
        assert_eq!(shrunk(17, 128), None, "more than an eighth full");
        assert_eq!(shrunk(0, KEPT_CAPACITY), None, "small enough to keep");
        assert_eq!(shrunk(0, KEPT_CAPACITY + 1), Some(0));
    }
}
