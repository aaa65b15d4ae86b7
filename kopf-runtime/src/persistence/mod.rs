//! What the engine keeps on the objects themselves, in Kopf's formats, so
//! that a restarted operator resumes from the cluster: handlers' progress
//! ([`progress`]), the last handled essence ([`diffbase`]), the finalizer
//! ([`finalizers`]), and the merge patches that write them ([`patching`]).

pub(crate) mod diffbase;
pub(crate) mod finalizers;
pub(crate) mod patching;
pub(crate) mod progress;
