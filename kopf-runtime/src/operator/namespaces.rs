//! Which namespaces an operator serves: [`NamespaceSelector`], from `-n`
//! patterns and `-A`, with Kopf's syntax (see its docs).

use std::collections::BTreeSet;

/// A failure to build a [`NamespaceSelector`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SelectorError {
    /// `-A` was combined with an inclusive `-n` pattern.
    #[error(
        "either `--namespace` or `--all-namespaces` can be used, not both (got `-n {0}`); with `-A`, only exclusions like `-n '!{0}'` are allowed"
    )]
    AllNamespacesWithInclusion(String),
    /// A pattern (or one of its comma-separated globs) is empty.
    #[error("empty namespace pattern in `{0}`")]
    EmptyPattern(String),
    /// A glob has an unclosed `[` character class.
    #[error("unclosed `[` in namespace glob `{0}`")]
    UnclosedClass(String),
}

/// The namespaces to serve, parsed from `-n` patterns and `-A`; give it to
/// [`Operator::namespaces`](crate::Operator::namespaces) (or let [`run`](crate::run)
/// parse the command line).
///
/// Each `-n` pattern has Kopf's syntax: comma-separated globs (`*`, `?`,
/// `[abc]`, `[!abc]`) where a glob starting with `!` excludes; a pattern
/// starting with an exclusion implies a leading `*`. Within one pattern the
/// globs are applied left to right exactly as Kopf's `match_namespace()` does.
///
/// # Combining several `-n`
///
/// Kopf ORs the patterns, so `-n 'dev-*' -n '!dev-skip'` would serve every
/// namespace (the second pattern alone means "all but `dev-skip`"). That is
/// never what is meant, so here a pattern made only of exclusions is a
/// *global* exclusion instead: `-n 'dev-*' -n '!dev-skip'` serves `dev-*` but
/// not `dev-skip`, the same as Kopf's single pattern `-n 'dev-*,!dev-skip'`.
/// Inclusive patterns are ORed, as in Kopf.
///
/// With `-A`, inclusive patterns are an error (as in Kopf), and exclusive ones
/// narrow the cluster-wide scope: `-A -n '!kube-*'`. With neither `-A` nor
/// `-n`, the operator is cluster-wide (Kopf does the same, with a warning).
///
/// ```
/// use kopf_runtime::NamespaceSelector;
///
/// let selector = NamespaceSelector::new(["dev-*", "!dev-skip"], false)?;
/// assert!(selector.matches("dev-1"));
/// assert!(!selector.matches("dev-skip"));
/// assert!(!selector.matches("prod"));
/// # Ok::<(), kopf_runtime::SelectorError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NamespaceSelector {
    /// Inclusive patterns, ORed; empty means "all namespaces".
    includes: Vec<Pattern>,
    /// Exclusion-only patterns, each applied to whatever the includes matched.
    excludes: Vec<Glob>,
}

impl NamespaceSelector {
    /// Parse the `-n` patterns (in command-line order) and the `-A` flag.
    ///
    /// # Errors
    ///
    /// [`SelectorError`] for `-A` with an inclusive pattern, empty patterns and
    /// malformed globs.
    pub fn new<I, S>(patterns: I, all_namespaces: bool) -> Result<Self, SelectorError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut selector = Self::default();
        for raw in patterns {
            let raw = raw.as_ref();
            let pattern = Pattern::parse(raw)?;
            if pattern.is_exclusion_only() {
                selector
                    .excludes
                    .extend(pattern.globs.into_iter().skip(1).map(|(_, glob)| glob));
            } else if all_namespaces {
                return Err(SelectorError::AllNamespacesWithInclusion(raw.to_owned()));
            } else {
                selector.includes.push(pattern);
            }
        }
        Ok(selector)
    }

    /// A selector that serves every namespace (`-A`).
    pub fn all() -> Self {
        Self::default()
    }

    /// Whether the operator serves objects in namespace `ns`.
    pub fn matches(&self, ns: &str) -> bool {
        let included = self.includes.is_empty() || self.includes.iter().any(|p| p.matches(ns));
        included && !self.excludes.iter().any(|g| g.matches(ns))
    }

    /// Whether the scope is the whole cluster (possibly minus exclusions):
    /// one cluster-wide watch per resource, filtered by [`Self::matches`].
    pub(crate) fn is_cluster_wide(&self) -> bool {
        self.includes.is_empty()
    }

    /// Whether some namespaces are excluded from the scope.
    pub(crate) fn has_exclusions(&self) -> bool {
        !self.excludes.is_empty()
    }

    /// The exact namespace names when every pattern is a plain name (no
    /// globs, no exclusions): one watch per namespace, no need to watch
    /// Namespace objects. `None` when the scope needs matching.
    pub(crate) fn exact_names(&self) -> Option<BTreeSet<String>> {
        if self.includes.is_empty() || !self.excludes.is_empty() {
            return None;
        }
        self.includes.iter().map(Pattern::exact_name).collect()
    }

    /// The plain names among the patterns that the selector serves (Kopf's
    /// `select_specific_namespaces`): the fallback when Namespace objects
    /// cannot be watched. Globbed patterns are ignored.
    pub(crate) fn literal_names(&self) -> BTreeSet<String> {
        self.includes
            .iter()
            .filter_map(Pattern::exact_name)
            .filter(|name| self.matches(name))
            .collect()
    }
}

/// One `-n` pattern: comma-separated globs, each inclusive or exclusive.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pattern {
    /// `(exclusive, glob)` in order; the first one is always inclusive.
    globs: Vec<(bool, Glob)>,
}

impl Pattern {
    fn parse(raw: &str) -> Result<Self, SelectorError> {
        let mut globs = Vec::new();
        for part in raw.split(',').map(str::trim) {
            let (exclusive, text) = match part.strip_prefix('!') {
                Some(rest) => (true, rest.trim()),
                None => (false, part),
            };
            if text.is_empty() {
                return Err(SelectorError::EmptyPattern(raw.to_owned()));
            }
            globs.push((exclusive, Glob::parse(text)?));
        }
        if globs.first().is_some_and(|(exclusive, _)| *exclusive) {
            globs.insert(0, (false, Glob::any()));
        }
        Ok(Self { globs })
    }

    /// Kopf's `match_namespace()` for one pattern.
    fn matches(&self, ns: &str) -> bool {
        let mut globs = self.globs.iter();
        let Some((_, first)) = globs.next() else {
            return false;
        };
        let first_match = first.matches(ns);
        let mut matches = first_match;
        for (exclusive, glob) in globs {
            if *exclusive {
                matches = matches && !glob.matches(ns);
            } else {
                matches = matches || (first_match && glob.matches(ns));
            }
        }
        matches
    }

    /// `*,!a,!b` — made only of exclusions (the `*` was implied).
    fn is_exclusion_only(&self) -> bool {
        self.globs.len() > 1
            && self.globs[0].1 == Glob::any()
            && self.globs[1..].iter().all(|(exclusive, _)| *exclusive)
    }

    fn exact_name(&self) -> Option<String> {
        match self.globs.as_slice() {
            [(false, glob)] => glob.literal(),
            _ => None,
        }
    }
}

/// A shell glob as Python's `fnmatch`: `*`, `?`, `[abc]`, `[a-z]`, `[!abc]`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Glob(Vec<Token>);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Char(char),
    Any,
    AnyMany,
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

impl Glob {
    fn any() -> Self {
        Self(vec![Token::AnyMany])
    }

    fn parse(text: &str) -> Result<Self, SelectorError> {
        let chars: Vec<char> = text.chars().collect();
        let mut tokens = Vec::new();
        let mut i = 0;
        while i < chars.len() {
            match chars[i] {
                '*' => tokens.push(Token::AnyMany),
                '?' => tokens.push(Token::Any),
                '[' => {
                    let mut j = i + 1;
                    let negated = chars.get(j) == Some(&'!');
                    if negated {
                        j += 1;
                    }
                    let mut ranges = Vec::new();
                    let start = j;
                    loop {
                        let Some(&c) = chars.get(j) else {
                            return Err(SelectorError::UnclosedClass(text.to_owned()));
                        };
                        if c == ']' && j > start {
                            break;
                        }
                        if chars.get(j + 1) == Some(&'-')
                            && chars.get(j + 2).is_some_and(|&e| e != ']')
                        {
                            ranges.push((c, chars[j + 2]));
                            j += 3;
                        } else {
                            ranges.push((c, c));
                            j += 1;
                        }
                    }
                    tokens.push(Token::Class { negated, ranges });
                    i = j;
                }
                c => tokens.push(Token::Char(c)),
            }
            i += 1;
        }
        Ok(Self(tokens))
    }

    fn literal(&self) -> Option<String> {
        self.0
            .iter()
            .map(|t| match t {
                Token::Char(c) => Some(*c),
                _ => None,
            })
            .collect()
    }

    fn matches(&self, text: &str) -> bool {
        let text: Vec<char> = text.chars().collect();
        // Iterative wildcard matching with single-star backtracking.
        let (mut t, mut p) = (0usize, 0usize);
        let mut star: Option<(usize, usize)> = None;
        while t < text.len() {
            match self.0.get(p) {
                Some(Token::AnyMany) => {
                    star = Some((p, t));
                    p += 1;
                }
                Some(token) if token.matches_char(text[t]) => {
                    p += 1;
                    t += 1;
                }
                _ => match star {
                    Some((sp, st)) => {
                        p = sp + 1;
                        t = st + 1;
                        star = Some((sp, st + 1));
                    }
                    None => return false,
                },
            }
        }
        self.0[p..].iter().all(|token| *token == Token::AnyMany)
    }
}

impl Token {
    fn matches_char(&self, c: char) -> bool {
        match self {
            Token::Char(x) => *x == c,
            Token::Any => true,
            Token::AnyMany => false,
            Token::Class { negated, ranges } => {
                ranges.iter().any(|(lo, hi)| (*lo..=*hi).contains(&c)) != *negated
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(patterns: &[&str], all: bool) -> NamespaceSelector {
        NamespaceSelector::new(patterns, all).expect("valid patterns")
    }

    #[test]
    fn globs_with_an_exclusion_are_neither_cluster_wide_nor_exact() {
        let selector = sel(&["dev-*", "!dev-skip"], false);
        assert!(!selector.is_cluster_wide());
        assert_eq!(selector.exact_names(), None);
    }

    #[test]
    fn globs_follow_fnmatch() {
        let glob = |g: &str| Glob::parse(g).expect("valid glob");
        assert!(glob("dev-*").matches("dev-"));
        assert!(glob("dev-*").matches("dev-123"));
        assert!(!glob("dev-*").matches("prod-dev-1"));
        assert!(glob("*-pr-*").matches("app-pr-1"));
        assert!(glob("ns-?").matches("ns-1"));
        assert!(!glob("ns-?").matches("ns-12"));
        assert!(glob("ns-[0-9]").matches("ns-7"));
        assert!(!glob("ns-[!0-9]").matches("ns-7"));
        assert!(glob("ns-[!0-9]").matches("ns-x"));
        assert!(glob("*a*b*c").matches("xxaxxbxxbxc"));
        assert!(!glob("*a*b*c").matches("xxaxxbxxbx"));
        assert!(glob("*").matches(""));
        assert_eq!(
            Glob::parse("ns-[ab"),
            Err(SelectorError::UnclosedClass("ns-[ab".into()))
        );
    }

    #[test]
    fn no_patterns_means_cluster_wide() {
        let s = sel(&[], false);
        assert!(s.is_cluster_wide());
        assert!(s.matches("anything"));
        assert_eq!(s.exact_names(), None);
        assert_eq!(s, NamespaceSelector::all());
    }

    #[test]
    fn exact_names_are_listed_when_no_globs() {
        let s = sel(&["ns1", "ns2"], false);
        assert!(!s.is_cluster_wide());
        assert_eq!(
            s.exact_names(),
            Some(["ns1".to_string(), "ns2".to_string()].into())
        );
        assert!(s.matches("ns1"));
        assert!(!s.matches("ns3"));
    }

    #[test]
    fn any_glob_disables_exact_names() {
        assert_eq!(sel(&["ns1", "dev-*"], false).exact_names(), None);
        assert_eq!(sel(&["ns1", "!x"], false).exact_names(), None);
    }

    #[test]
    fn separate_exclusion_narrows_inclusions() {
        // Kopf would OR these and serve everything; we treat `!x` as global.
        let s = sel(&["dev-*", "!dev-skip"], false);
        assert!(s.matches("dev-1"));
        assert!(!s.matches("dev-skip"));
        assert!(!s.matches("prod"));
        assert!(!s.is_cluster_wide());
        assert!(s.has_exclusions());
    }

    #[test]
    fn in_pattern_exclusion_is_kopf_semantics() {
        // Kopf's docstring example.
        let s = sel(&["myapp-*, !*-pr-*, *pr-123"], false);
        assert!(s.matches("myapp-test"));
        assert!(s.matches("myapp-pr-123"));
        assert!(!s.matches("myapp-pr-456"));
        assert!(!s.matches("otherapp-pr-123"));

        let s = sel(&["!*-pr-*, *pr-123"], false);
        assert!(s.matches("anyapp-anything"));
        assert!(s.matches("otherapp-pr-123"));
        assert!(!s.matches("myapp-pr-456"));
    }

    #[test]
    fn exclusions_only_are_cluster_wide_minus_them() {
        let s = sel(&["!kube-*", "!default"], false);
        assert!(s.is_cluster_wide());
        assert!(s.matches("team-a"));
        assert!(!s.matches("kube-system"));
        assert!(!s.matches("default"));
    }

    #[test]
    fn all_namespaces_accepts_exclusions() {
        let s = sel(&["!kube-system"], true);
        assert!(s.is_cluster_wide());
        assert!(!s.matches("kube-system"));
        assert!(s.matches("x"));
    }

    #[test]
    fn all_namespaces_rejects_inclusions() {
        assert_eq!(
            NamespaceSelector::new(["dev-*"], true),
            Err(SelectorError::AllNamespacesWithInclusion("dev-*".into()))
        );
        assert!(NamespaceSelector::new(["dev-*,!dev-1"], true).is_err());
    }

    #[test]
    fn literal_names_are_the_fallback() {
        let s = sel(&["dev-*", "ops", "dev-x", "!dev-x"], false);
        assert_eq!(s.literal_names(), ["ops".to_string()].into());
        assert!(sel(&["!kube-*"], false).literal_names().is_empty());
    }

    #[test]
    fn inclusive_patterns_are_ored() {
        let s = sel(&["a-*", "b-*"], false);
        assert!(s.matches("a-1"));
        assert!(s.matches("b-1"));
        assert!(!s.matches("c-1"));
    }

    #[test]
    fn empty_patterns_are_rejected() {
        assert_eq!(
            NamespaceSelector::new([""], false),
            Err(SelectorError::EmptyPattern("".into()))
        );
        assert!(NamespaceSelector::new(["a,,b"], false).is_err());
        assert!(NamespaceSelector::new(["!"], false).is_err());
    }
}
