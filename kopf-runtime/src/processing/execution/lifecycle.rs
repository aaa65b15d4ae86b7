//! Which of a cause's due handlers run in one step: Kopf's lifecycles.

/// The order and number of due handlers that run in one step (Kopf's
/// lifecycles, `kopf.lifecycles.*`).
///
/// A handler is due when it has not finished and is not waiting for a
/// retry. Handlers that are not run in a step run in a later one; an
/// operator stopped in between resumes from the progress stored on the
/// object. Change handlers run [`Asap`](Lifecycle::Asap), as in Kopf;
/// sub-handlers can be run with any lifecycle
/// ([`Subhandlers::execute_with`](crate::Subhandlers::execute_with)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Lifecycle {
    /// One handler per step: the due one with the fewest attempts, the
    /// first registered among equals (Kopf's default).
    #[default]
    Asap,
    /// Every due handler, in the order registered.
    AllAtOnce,
    /// The first due handler in the order registered.
    OneByOne,
    /// One due handler chosen at random.
    Randomized,
    /// Every due handler, in a random order.
    Shuffled,
}

impl Lifecycle {
    /// Kopf's name of the lifecycle (`asap`, `all_at_once`, …).
    pub fn name(self) -> &'static str {
        match self {
            Lifecycle::Asap => "asap",
            Lifecycle::AllAtOnce => "all_at_once",
            Lifecycle::OneByOne => "one_by_one",
            Lifecycle::Randomized => "randomized",
            Lifecycle::Shuffled => "shuffled",
        }
    }

    /// Which of the `due` handlers (indexes in registration order) run now,
    /// in the order they run; `attempts` tells how many attempts a handler
    /// has had.
    pub(crate) fn plan(self, mut due: Vec<usize>, attempts: impl Fn(usize) -> u32) -> Vec<usize> {
        match self {
            Lifecycle::Asap => {
                // `min_by_key` keeps the first of equals: the first registered.
                due.iter()
                    .copied()
                    .min_by_key(|i| attempts(*i))
                    .into_iter()
                    .collect()
            }
            Lifecycle::AllAtOnce => due,
            Lifecycle::OneByOne => {
                due.truncate(1);
                due
            }
            Lifecycle::Randomized => {
                if due.is_empty() {
                    due
                } else {
                    vec![due[fastrand::usize(..due.len())]]
                }
            }
            Lifecycle::Shuffled => {
                fastrand::shuffle(&mut due);
                due
            }
        }
    }
}

impl std::fmt::Display for Lifecycle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ATTEMPTS: [u32; 4] = [2, 0, 1, 0];

    fn plan(lifecycle: Lifecycle, due: &[usize]) -> Vec<usize> {
        lifecycle.plan(due.to_vec(), |i| ATTEMPTS[i])
    }

    #[test]
    fn asap_runs_the_first_of_the_least_attempted() {
        assert_eq!(plan(Lifecycle::Asap, &[0, 1, 2, 3]), [1]);
        assert_eq!(plan(Lifecycle::Asap, &[0, 2]), [2]);
        assert_eq!(plan(Lifecycle::Asap, &[]), [] as [usize; 0]);
    }

    #[test]
    fn all_at_once_and_one_by_one_keep_the_registration_order() {
        assert_eq!(plan(Lifecycle::AllAtOnce, &[0, 2, 3]), [0, 2, 3]);
        assert_eq!(plan(Lifecycle::OneByOne, &[2, 3]), [2]);
        assert_eq!(plan(Lifecycle::OneByOne, &[]), [] as [usize; 0]);
    }

    #[test]
    fn random_lifecycles_choose_among_the_due_only() {
        for _ in 0..50 {
            let one = plan(Lifecycle::Randomized, &[1, 3]);
            assert!(one == [1] || one == [3], "{one:?}");
            let mut all = plan(Lifecycle::Shuffled, &[0, 1, 3]);
            all.sort_unstable();
            assert_eq!(all, [0, 1, 3]);
        }
        assert_eq!(plan(Lifecycle::Randomized, &[]), [] as [usize; 0]);
    }

    #[test]
    fn names_are_kopfs() {
        assert_eq!(Lifecycle::AllAtOnce.to_string(), "all_at_once");
        assert_eq!(Lifecycle::default(), Lifecycle::Asap);
    }
}
