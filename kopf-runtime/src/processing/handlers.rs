//! [`ResourceHandlers`]: the handlers of one resource, by what they react to.

use crate::model::handlers::{Handler, HandlerKind};
use crate::model::kwargs::{Indexes, MemoBase};

/// The handlers of one resource, split by what they react to.
#[derive(Clone, Default)]
pub(crate) struct ResourceHandlers {
    /// `on_create`, `on_update`, `on_delete`, `on_resume`, `on_field`.
    pub changing: Vec<Handler>,
    /// `on_event`.
    pub watching: Vec<Handler>,
    /// `daemon` and `timer`.
    pub spawning: Vec<Handler>,
    /// `index` (run by the watch loop: see the runtime's `indexing` module).
    pub indexing: Vec<Handler>,
    /// The operator's indexes, which the handlers take by id.
    pub indexes: Indexes,
    /// The operator's memo as the start-up handlers left it: what each
    /// object's memo starts as.
    pub memo: MemoBase,
}

impl ResourceHandlers {
    /// Splits `handlers` (all of one resource) by kind.
    pub(crate) fn new<'a>(handlers: impl IntoIterator<Item = &'a Handler>) -> Self {
        let mut split = Self::default();
        for handler in handlers {
            if handler.kind().is_changing() {
                split.changing.push(handler.clone());
            } else if handler.kind() == HandlerKind::OnEvent {
                split.watching.push(handler.clone());
            } else if handler.kind().is_spawning() {
                split.spawning.push(handler.clone());
            } else if handler.kind() == HandlerKind::Index {
                split.indexing.push(handler.clone());
            }
        }
        split
    }

    /// The same handlers, taking `indexes` by id.
    #[must_use]
    pub(crate) fn with_indexes(mut self, indexes: Indexes) -> Self {
        self.indexes = indexes;
        self
    }

    /// The same handlers, their objects' memos starting as forks of `memo`.
    #[must_use]
    pub(crate) fn with_memo(mut self, memo: MemoBase) -> Self {
        self.memo = memo;
        self
    }
}
