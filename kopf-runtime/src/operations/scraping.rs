//! What the metrics read from the engine's own state when they are
//! scraped, rather than count as it happens: objects tracked, queue depth
//! and the last event's time per resource (from [`Health`]), daemons and
//! timers running and their exits (from the spawner's [`TaskCounters`]),
//! leadership and shard slots (from [`Health`]), and the placeholders of
//! families that later features fill.
//!
//! It is a [`Collector`] that [`Metrics`](crate::operations::metrics::Metrics)
//! registers, kept apart from `metrics`, which the engine's modules use
//! to count, so that those modules are not imported back.

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use tokio::time::Instant;

use crate::operations::health::Health;
use crate::spawning::TaskCounters;

/// What is read from the engine's state at scrape time.
#[derive(Debug)]
pub(crate) struct ScrapeTime {
    health: Arc<Health>,
    tasks: TaskCounters,
    /// The wall clock and Tokio's clock, read once: the time of an event
    /// is derived from its monotonic instant.
    epoch: (jiff::Timestamp, Instant),
}

impl ScrapeTime {
    fn unix_seconds(&self, at: Instant) -> f64 {
        let (wall, mono) = self.epoch;
        let since = at.saturating_duration_since(mono);
        wall.as_millisecond() as f64 / 1e3 + since.as_secs_f64()
    }
}

/// Encodes one gauge family of one sample per resource.
fn per_resource<T: prometheus_client::encoding::EncodeGaugeValue>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: &[(String, T)],
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(
        name,
        help,
        None,
        prometheus_client::metrics::MetricType::Gauge,
    )?;
    for (resource, value) in samples {
        let labels = [("resource", resource.as_str())];
        family.encode_family(&labels)?.encode_gauge(value)?;
    }
    Ok(())
}

impl Collector for ScrapeTime {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let resources = self.health.resources();
        let objects: Vec<(String, u64)> = resources
            .iter()
            .map(|r| (r.label().to_owned(), r.objects() as u64))
            .collect();
        per_resource(
            &mut encoder,
            "kopf_objects_tracked",
            "Objects the watches know of",
            &objects,
        )?;
        let depth: Vec<(String, u64)> = resources
            .iter()
            .map(|r| (r.label().to_owned(), r.queue_depth() as u64))
            .collect();
        per_resource(
            &mut encoder,
            "kopf_queue_depth",
            "Objects with an event waiting in their queue or being processed",
            &depth,
        )?;
        let last: Vec<(String, f64)> = resources
            .iter()
            .filter_map(|r| Some((r.label().to_owned(), self.unix_seconds(r.last_event()?))))
            .collect();
        per_resource(
            &mut encoder,
            "kopf_watch_last_event_timestamp_seconds",
            "When the last watch event (not a bookmark) of a resource arrived, as a Unix time",
            &last,
        )?;

        let tasks = self.tasks.snapshot();
        let ended = tasks.finished + tasks.stopped + tasks.cancelled + tasks.abandoned;
        let running = ConstGauge::new(tasks.spawned.saturating_sub(ended) as i64);
        running.encode(encoder.encode_descriptor(
            "kopf_tasks_running",
            "Daemons and timers running",
            None,
            running.metric_type(),
        )?)?;
        let mut exits = encoder.encode_descriptor(
            "kopf_task_exits",
            "Daemons and timers ended, by how: finished on their own, stopped, cancelled, or abandoned (still running, forgotten)",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        for (reason, count) in [
            ("finished", tasks.finished),
            ("stopped", tasks.stopped),
            ("cancelled", tasks.cancelled),
            ("abandoned", tasks.abandoned),
        ] {
            ConstCounter::new(count).encode(exits.encode_family(&[("reason", reason)])?)?;
        }

        let leader = ConstGauge::new(i64::from(self.health.leading()));
        leader.encode(encoder.encode_descriptor(
            "kopf_leader",
            "Whether this replica acts on objects: 0 while another replica leads on the Lease",
            None,
            leader.metric_type(),
        )?)?;
        let slots = ConstGauge::new(i64::from(self.health.slots()));
        slots.encode(encoder.encode_descriptor(
            "kopf_shard_slots_held",
            "Shard slots this replica holds (0 without --shards)",
            None,
            slots.metric_type(),
        )?)?;
        Ok(())
    }
}

impl ScrapeTime {
    /// Reads the served resources from `health` and the tasks from
    /// `tasks`, from now on.
    pub(crate) fn new(health: Arc<Health>, tasks: TaskCounters) -> Self {
        Self {
            health,
            tasks,
            epoch: (jiff::Timestamp::now(), Instant::now()),
        }
    }
}
