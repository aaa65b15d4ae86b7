//! The handler model, as operator authors see it: [`Handler`](handlers::Handler)s
//! and their options ([`handlers`]), the [`Registry`](registry::Registry) of an
//! operator, the records the macros emit ([`records`]), the values a call
//! receives ([`kwargs`]) and how each parameter is taken out of them
//! ([`injection`]), [`filters`], the errors a handler returns ([`errors`]), the
//! retry policy its options make ([`retrying`]), resource selectors
//! ([`resources`]) and `adopt` ([`hierarchies`]).
//!
//! Nothing here talks to the cluster: the engine (watching, processing,
//! spawning) uses the model, never the other way round.

pub(crate) mod errors;
pub(crate) mod filters;
pub(crate) mod handlers;
pub(crate) mod hierarchies;
pub(crate) mod injection;
pub(crate) mod kwargs;
pub(crate) mod records;
pub(crate) mod registry;
pub(crate) mod resources;
pub(crate) mod retrying;
