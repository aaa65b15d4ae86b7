//! Lists in two steps: the objects a list may return are taken from the
//! store under its lock (a snapshot of shared objects), then matched
//! against the selectors and cut into a page without the lock, on a
//! blocking thread when the matching is long, so that a list with a huge
//! selector holds up no other client, whatever runtime serves it. A page
//! with nothing to match is cut under the lock: its objects are taken,
//! the rest only counted (`remainingItemCount`), so that paging through a
//! large list does not copy what follows each page.

use std::sync::Arc;

use serde_json::Value;

use crate::conversion;
use crate::failures::ApiError;
use crate::objects;
use crate::selectors::Selectors;

/// One page of a list.
#[derive(Debug)]
pub(crate) struct ListPage {
    /// Matching objects of this page.
    pub items: Vec<Arc<Value>>,
    /// The list's resourceVersion.
    pub rv: u64,
    /// Token for the next page.
    pub continue_token: Option<String>,
    /// Objects left after this page.
    pub remaining: Option<usize>,
}

/// The objects a list may return, in key order, before its selectors.
#[derive(Debug)]
pub(crate) struct ListSnapshot {
    /// The candidates, in (namespace, name) order.
    pub(crate) objects: Vec<Arc<Value>>,
    /// How many objects follow `objects`, when the store cut the page
    /// already (a limit and no selectors): `objects` is the page.
    pub(crate) rest: Option<usize>,
    /// The resourceVersion every page of the list reports.
    pub(crate) rv: u64,
    /// The version the selectors see the objects in.
    pub(crate) api_version: String,
}

/// Candidates matched against selectors on an async thread at most; more
/// are matched on a blocking thread, so that the runtime's threads (one in
/// a current-thread runtime) go on serving other clients meanwhile.
const MATCHED_INLINE: usize = 256;

impl ListSnapshot {
    /// [`page`](Self::page), on a blocking thread when there are selectors
    /// and more than [`MATCHED_INLINE`] candidates.
    pub(crate) async fn page_apart(
        self,
        selectors: &Selectors,
        limit: Option<usize>,
    ) -> Result<ListPage, ApiError> {
        if selectors.is_empty() || self.objects.len() <= MATCHED_INLINE {
            return Ok(self.page(selectors, limit));
        }
        let selectors = selectors.clone();
        tokio::task::spawn_blocking(move || self.page(&selectors, limit))
            .await
            .map_err(|e| ApiError::internal(format!("matching a list's selectors failed: {e}")))
    }

    /// The objects that match `selectors`, at most `limit` of them, with
    /// a continue token if some are left, and how many are left when
    /// there are no selectors (the API server's `remainingItemCount`: with
    /// selectors it cannot tell without matching them all, and gives none).
    pub(crate) fn page(self, selectors: &Selectors, limit: Option<usize>) -> ListPage {
        if let Some(rest) = self.rest {
            let continue_token = self
                .objects
                .last()
                .filter(|_| rest > 0)
                .map(|last| encode_continue(ContinueAt::Version(self.rv), &key(last)));
            return ListPage {
                items: self.objects,
                rv: self.rv,
                continue_token,
                remaining: (rest > 0).then_some(rest),
            };
        }
        let api_version = self.api_version;
        let mut items = Vec::new();
        let mut continue_token = None;
        let mut remaining = None;
        let mut matching = self.objects.into_iter().filter(|obj| {
            selectors.is_empty() || selectors.matches(&conversion::present(obj, &api_version))
        });
        while let Some(obj) = matching.next() {
            items.push(obj);
            if limit.is_some_and(|l| items.len() >= l) {
                let rest = matching.count();
                if rest > 0 {
                    let last = items.last().map(|last| key(last)).unwrap_or_default();
                    continue_token = Some(encode_continue(ContinueAt::Version(self.rv), &last));
                    remaining = selectors.is_empty().then_some(rest);
                }
                break;
            }
        }
        ListPage {
            items,
            rv: self.rv,
            continue_token,
            remaining,
        }
    }
}

/// An object's key in the store, which a continue token names.
fn key(obj: &Value) -> (String, String) {
    (
        objects::namespace(obj).to_owned(),
        objects::name(obj).to_owned(),
    )
}

/// Where a continued list reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ContinueAt {
    /// The version of the list's first page: a consistent list.
    Version(u64),
    /// The latest version (a negative version in the token): what the
    /// `410` for a compacted token hands out, as the API server does. The
    /// list goes on, but changes made since its first page may be missed.
    Latest,
}

/// A continue token: where the list reads and the last key sent.
pub(crate) fn encode_continue(at: ContinueAt, after: &(String, String)) -> String {
    let rv = match at {
        ContinueAt::Version(rv) => rv.to_string(),
        ContinueAt::Latest => "-1".to_string(),
    };
    objects::hex(format!("{rv}|{}|{}", after.0, after.1).as_bytes())
}

/// The version and last key of a continue token, if it decodes.
pub(crate) fn decode_continue(token: &str) -> Option<(i64, (String, String))> {
    let text = String::from_utf8(objects::unhex(token)?).ok()?;
    let mut parts = text.splitn(3, '|');
    let rv = parts.next()?.parse().ok()?;
    Some((rv, (parts.next()?.to_string(), parts.next()?.to_string())))
}
