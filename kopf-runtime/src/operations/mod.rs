//! What an operator shows and answers about itself while it runs: the
//! `--liveness` and `--metrics` listeners ([`endpoints`], on the accept loop
//! they share with the webhook server, [`listening`]), the `on_probe`
//! handlers ([`probing`]), what the watches report ([`health`]), and the
//! Prometheus registry ([`metrics`]) with the gauges read at scrape time
//! ([`scraping`]).

pub(crate) mod endpoints;
pub(crate) mod health;
pub(crate) mod listening;
pub(crate) mod metrics;
pub(crate) mod probing;
pub(crate) mod scraping;
