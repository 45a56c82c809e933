//! A gpuboard endpoint's recorded history (`/v1/snapshot?at=`, `/v1/history/*`) as the
//! console's `History`.

use std::sync::Arc;

use futures::future::BoxFuture;

use super::Failure;
use super::history::{AtTime, Sample, SourceHistory};
use crate::accounting::{Ask, Parts};
use crate::client::{Client, ClientError, ReportAt, SnapshotAt};
use crate::clock::Timestamp;
use crate::wire::history::{Direction, GpuRef, Target};

/// How a client error reads to the console (the endpoint source's words).
pub type Words = Arc<dyn Fn(ClientError) -> Failure + Send + Sync>;

/// An endpoint's history, read over its API.
pub struct EndpointHistory {
    client: Client,
    words: Words,
}

impl EndpointHistory {
    /// The history behind `client`, its errors worded by `words`.
    pub fn new(client: Client, words: Words) -> EndpointHistory {
        EndpointHistory { client, words }
    }
}

impl SourceHistory for EndpointHistory {
    fn snapshot_at(&self, at: Timestamp) -> BoxFuture<'static, Result<AtTime, Failure>> {
        let (client, words) = (self.client.clone(), Arc::clone(&self.words));
        Box::pin(async move {
            match client.snapshot_at(at).await.map_err(|e| words(e))? {
                SnapshotAt::Shown { snapshot, at, .. } => Ok(AtTime::Shown { snapshot, at }),
                SnapshotAt::BeforeHistory {
                    history_from: Some(from),
                } => Ok(AtTime::Before { from }),
                SnapshotAt::BeforeHistory { history_from: None } => {
                    Err(Failure::Refused("nothing is recorded yet".to_string()))
                }
            }
        })
    }

    fn seek(
        &self,
        at: Timestamp,
        dir: Direction,
        target: Option<Target>,
    ) -> BoxFuture<'static, Result<Option<Timestamp>, Failure>> {
        let (client, words) = (self.client.clone(), Arc::clone(&self.words));
        Box::pin(async move {
            let found = client
                .history_seek(at, dir, target.as_ref())
                .await
                .map_err(|e| words(e))?;
            Ok(found.map(|s| s.at))
        })
    }

    fn telemetry(
        &self,
        node: String,
        index: u32,
        from: Timestamp,
        to: Timestamp,
    ) -> BoxFuture<'static, Result<Vec<Sample>, Failure>> {
        let (client, words) = (self.client.clone(), Arc::clone(&self.words));
        Box::pin(async move {
            let series = client
                .history_telemetry(&GpuRef { node, index }, from, to)
                .await
                .map_err(|e| words(e))?;
            Ok(series.samples)
        })
    }

    fn report(&self, ask: Ask) -> BoxFuture<'static, Result<ReportAt, Failure>> {
        let (client, words) = (self.client.clone(), Arc::clone(&self.words));
        Box::pin(async move {
            // The usage table alone: whole hours from the endpoint's roll-ups.
            match client.history_report_parts(&ask, Parts::Usage).await {
                // The route's own 404s (no history, before it) are answers: any other is
                // a gpuboard from before the route.
                Err(ClientError::NotFound { .. }) => Err(Failure::Refused(
                    "no usage report: this endpoint's gpuboard is older than the report \
                     route (upgrade it)"
                        .to_string(),
                )),
                other => other.map_err(|e| words(e)),
            }
        })
    }
}
