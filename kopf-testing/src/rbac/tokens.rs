//! ServiceAccount tokens minted by the TokenRequest API
//! (`serviceaccounts/token`), and who they authenticate.
//!
//! A token is bound to its ServiceAccount's UID, as the API server's bound
//! tokens are: once the ServiceAccount is deleted (or replaced by another of
//! the same name), its tokens no longer authenticate.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime};

/// How many tokens are kept; the oldest expiring go first beyond it.
const MAX_TOKENS: usize = 100_000;

/// Whom a token was minted for, and until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Minted {
    pub(crate) namespace: String,
    pub(crate) name: String,
    pub(crate) uid: String,
    pub(crate) expires: SystemTime,
}

/// The tokens minted so far.
#[derive(Debug, Default)]
pub(crate) struct Tokens {
    minted: Mutex<HashMap<String, Minted>>,
}

impl Tokens {
    /// Mints a token for the ServiceAccount `namespace/name` of UID `uid`,
    /// valid for `valid`.
    pub(crate) fn mint(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        valid: Duration,
    ) -> (String, SystemTime) {
        let token = format!(
            "kopf-sa.{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        let expires = SystemTime::now() + valid;
        let mut minted = self.minted.lock().unwrap_or_else(PoisonError::into_inner);
        let now = SystemTime::now();
        minted.retain(|_, m| m.expires > now);
        if minted.len() >= MAX_TOKENS
            && let Some(oldest) = minted
                .iter()
                .min_by_key(|(_, m)| m.expires)
                .map(|(t, _)| t.clone())
        {
            minted.remove(&oldest);
        }
        minted.insert(
            token.clone(),
            Minted {
                namespace: namespace.into(),
                name: name.into(),
                uid: uid.into(),
                expires,
            },
        );
        (token, expires)
    }

    /// The ServiceAccount a token was minted for, if it is one of ours and
    /// has not expired.
    pub(crate) fn lookup(&self, token: &[u8]) -> Option<Minted> {
        let token = std::str::from_utf8(token).ok()?;
        let minted = self.minted.lock().unwrap_or_else(PoisonError::into_inner);
        minted
            .get(token)
            .filter(|m| m.expires > SystemTime::now())
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_tokens_are_looked_up_until_they_expire() {
        let tokens = Tokens::default();
        let (token, _) = tokens.mint("ns", "sa", "u1", Duration::from_secs(600));
        let found = tokens.lookup(token.as_bytes()).expect("minted");
        assert_eq!(
            (
                found.namespace.as_str(),
                found.name.as_str(),
                found.uid.as_str()
            ),
            ("ns", "sa", "u1")
        );
        assert!(tokens.lookup(b"other").is_none());
        let (expired, _) = tokens.mint("ns", "sa", "u1", Duration::ZERO);
        assert!(tokens.lookup(expired.as_bytes()).is_none());
    }
}
