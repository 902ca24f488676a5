//! The nameserver's Prometheus metrics (`metrics_listen`): registrations and route queries
//! counted as they are served, the registry's size and the process read at each scrape.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::service::SharedRegistry;
use rocketraft_server_kit::process_metrics::ProcessMetrics;

/// How a call ended: `accepted` / `refused` (registrations), `found` / `not_found` (routes).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Outcome {
    pub outcome: &'static str,
}

pub struct NameServerMetrics {
    registry: Registry,
    pub registrations: Family<Outcome, Counter>,
    pub route_queries: Family<Outcome, Counter>,
    groups: Gauge,
    nodes: Gauge,
    topics: Gauge,
    process: ProcessMetrics,
}

impl Default for NameServerMetrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("rocketraft_nameserver");
        let registrations = Family::<Outcome, Counter>::default();
        let route_queries = Family::<Outcome, Counter>::default();
        let (groups, nodes, topics) = (Gauge::default(), Gauge::default(), Gauge::default());
        registry.register(
            "registrations",
            "Broker registrations served",
            registrations.clone(),
        );
        registry.register(
            "route_queries",
            "Topic route queries served",
            route_queries.clone(),
        );
        registry.register("groups", "Broker groups with a live node", groups.clone());
        registry.register("nodes", "Live broker nodes", nodes.clone());
        registry.register("topics", "Topics some group serves", topics.clone());
        let process = ProcessMetrics::register(&mut registry);
        NameServerMetrics {
            registry,
            registrations,
            route_queries,
            groups,
            nodes,
            topics,
            process,
        }
    }
}

impl NameServerMetrics {
    /// Counts one call that ended as `outcome`.
    pub fn count(family: &Family<Outcome, Counter>, outcome: &'static str) {
        family.get_or_create(&Outcome { outcome }).inc();
    }

    /// The text of one scrape, with `routes` read now.
    pub fn render(&self, routes: &SharedRegistry) -> String {
        let (groups, nodes, topics) = {
            let routes = routes.lock();
            let info = routes.cluster_info();
            let nodes: usize = info.groups.iter().map(|group| group.nodes.len()).sum();
            (info.groups.len(), nodes, routes.topic_list().topics.len())
        };
        self.groups.set(groups as i64);
        self.nodes.set(nodes as i64);
        self.topics.set(topics as i64);
        self.process.refresh();
        let mut text = String::new();
        if let Err(error) = prometheus_client::encoding::text::encode(&mut text, &self.registry) {
            tracing::warn!(%error, "metrics could not be encoded");
        }
        text
    }
}
