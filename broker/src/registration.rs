//! Registers this node with every nameserver: at start, every interval, and at
//! once when its role or term changes, so clients find a new leader without waiting for the
//! next interval. A leader also sends its group's topic configs, and registers again at once
//! when they change.
//!
//! A node that stops leading first lets its leader-only schedule service stop (bounded
//! wait), then registers as a follower. Each nameserver has a sender of its own that always
//! sends the newest registration: a call still waiting on a vanished nameserver is dropped
//! the moment a newer registration is made, and delays no other nameserver, so a new leader
//! reaches every reachable nameserver at once. A nameserver that cannot be reached is
//! retried after a pause that doubles up to the interval; registration never blocks the
//! node. Only a member of the group's Raft membership registers (at once when it joins): a
//! removed node's route expires.

use rocketraft_domain::secrets::CLUSTER_SECRET_HEADER;
use std::sync::Arc;
use std::time::Duration;

use rocketraft_proto::nameserver as pb;
use rocketraft_proto::nameserver::name_server_client::NameServerClient;
use tokio_util::sync::CancellationToken;

use crate::group_state::GroupState;
use crate::raft::control::role::Role;
use crate::raft::control::role::RoleWatch;
use crate::raft::transport::faults::FaultPlan;
use crate::raft::types::Raft;
use crate::schedule::service::ScheduleStatus;
use crate::tls::PeerConnector;

/// Default interval between registrations.
pub const REGISTER_INTERVAL_DEFAULT: Duration = Duration::from_secs(30);
/// How long connecting to a nameserver may take: a vanished host never answers.
const REGISTER_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long one registration call may take.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(3);
/// First pause before a failed registration is sent again; it doubles up to the interval.
const REGISTER_RETRY_MIN: Duration = Duration::from_millis(500);
/// How long a node that lost leadership waits for its schedule service to stop before it
/// registers as a follower anyway.
const SERVICES_STOP_WAIT: Duration = Duration::from_secs(2);

/// Who this node is, as it tells the nameservers.
#[derive(Debug, Clone)]
pub struct Identity {
    pub cluster: String,
    pub group: String,
    pub node_id: u64,
    pub addr: String,
    /// Queues of a topic this group creates on first send; 0 if auto-creation is off.
    pub auto_create_queue_count: u32,
    /// Sent with every registration, for nameservers that require it.
    pub cluster_secret: Option<String>,
    /// How the nameservers are reached: plain, or TLS as the node's peers are.
    pub connector: PeerConnector,
    /// The node's own fault plan (drills): a blackholed node registers nowhere until healed,
    /// as a host that dropped off the network reaches no nameserver.
    pub fault_injection: Option<Arc<FaultPlan>>,
}

/// Registers until `shutdown` or until Raft stops.
pub async fn run_registration(
    raft: Raft,
    group: Arc<GroupState>,
    schedule: Arc<ScheduleStatus>,
    identity: Identity,
    nameservers: Vec<String>,
    interval: Duration,
    shutdown: CancellationToken,
) {
    let mut roles = RoleWatch::new(&raft);
    let mut role = roles.current();
    let mut member = roles.is_member();
    let mut topics = group.watch_topics();
    let (latest, _) = tokio::sync::watch::channel(None);
    let identity = Arc::new(identity);
    // Dropped (and every sender aborted) when this loop returns.
    let mut senders = tokio::task::JoinSet::new();
    for nameserver in nameservers {
        senders.spawn(send_to_nameserver(
            identity.clone(),
            nameserver,
            latest.subscribe(),
            interval,
        ));
    }
    loop {
        // A node outside the membership (removed, or not added yet) is no route to the
        // group: it lets its registration expire.
        let request = member.then(|| registration(&identity, role, &roles, &group));
        latest.send_replace(request);
        tokio::select! {
            () = shutdown.cancelled() => return,
            changed = roles.changed() => {
                if changed.is_none() {
                    return;
                }
                let now = roles.current();
                if now != role {
                    tracing::info!(changed = ?now, "role changed; registering at once");
                    if role.is_leader
                        && !now.is_leader
                        && !schedule.stopped(SERVICES_STOP_WAIT).await
                    {
                        tracing::warn!("the schedule service did not stop in time; registering anyway");
                    }
                    role = now;
                }
                let now_member = roles.is_member();
                if now_member != member {
                    if now_member {
                        tracing::info!("this node joined its group's membership; registering");
                    } else {
                        tracing::warn!(
                            "this node is no longer in its group's membership (removed); it \
                             stops registering with the nameservers and can be shut down"
                        );
                    }
                    member = now_member;
                }
            },
            // A leader publishes a topic change at once; a follower has no topics to send.
            changed = topics.changed() => if changed.is_err() { return },
        }
    }
}

/// Sends the newest registration in `latest` to `nameserver`: at once when it changes (a
/// call in flight is dropped for the newer one), again every `interval`, and after a failure
/// again after a pause that doubles up to `interval`. `None`: nothing to register.
async fn send_to_nameserver(
    identity: Arc<Identity>,
    nameserver: String,
    mut latest: tokio::sync::watch::Receiver<Option<pb::RegisterBrokerRequest>>,
    interval: Duration,
) {
    let mut retry = REGISTER_RETRY_MIN.min(interval);
    loop {
        if let Some(faults) = &identity.fault_injection {
            faults.held_while_blackholed(identity.node_id).await;
        }
        let request = latest.borrow_and_update().clone();
        let next_in = match request {
            None => interval,
            Some(request) => tokio::select! {
                sent = register_once(&identity, &nameserver, request) => match sent {
                    Ok(()) => {
                        retry = REGISTER_RETRY_MIN.min(interval);
                        interval
                    }
                    Err(error) => {
                        tracing::warn!(%nameserver, %error, retry_in = ?retry, "registration failed");
                        let pause = retry;
                        retry = (retry * 2).min(interval);
                        pause
                    }
                },
                // A newer registration replaces the one still waiting for an answer.
                changed = latest.changed() => match changed {
                    Ok(()) => continue,
                    Err(_closed) => return,
                },
            },
        };
        tokio::select! {
            () = tokio::time::sleep(next_in) => {}
            changed = latest.changed() => if changed.is_err() { return },
        }
    }
}

fn registration(
    identity: &Identity,
    role: Role,
    roles: &RoleWatch,
    group: &GroupState,
) -> pb::RegisterBrokerRequest {
    let topics = if role.is_leader {
        let metadata = group.metadata();
        metadata
            .topics
            .values()
            .map(|topic| pb::TopicConfig {
                name: topic.name.clone(),
                read_queue_count: topic.read_queue_count,
                write_queue_count: topic.write_queue_count,
                perm: topic.perm,
                message_type: metadata.topic_type(&topic.name).to_wire() as i32,
            })
            .collect()
    } else {
        Vec::new()
    };
    let members = if role.is_leader {
        roles.member_ids()
    } else {
        Vec::new()
    };
    pb::RegisterBrokerRequest {
        cluster: identity.cluster.clone(),
        group: identity.group.clone(),
        node_id: identity.node_id,
        addr: identity.addr.clone(),
        role: if role.is_leader {
            pb::Role::Leader
        } else {
            pb::Role::Follower
        } as i32,
        term: role.term,
        topics,
        auto_create_queue_count: identity.auto_create_queue_count,
        members,
    }
}

async fn register_once(
    identity: &Identity,
    addr: &str,
    request: pb::RegisterBrokerRequest,
) -> Result<(), String> {
    let mut request = tonic::Request::new(request);
    if let Some(secret) = &identity.cluster_secret {
        rocketraft_domain::secrets::attach(&mut request, CLUSTER_SECRET_HEADER, secret);
    }
    let endpoint = identity
        .connector
        .endpoint(addr)?
        .connect_timeout(REGISTER_CONNECT_TIMEOUT)
        .timeout(REGISTER_TIMEOUT);
    let channel = endpoint
        .connect()
        .await
        .map_err(|error| error.to_string())?;
    NameServerClient::new(channel)
        .register_broker(request)
        .await
        .map_err(|status| status.to_string())?;
    Ok(())
}
