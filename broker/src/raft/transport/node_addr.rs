//! A group member's two addresses: where clients reach its broker API, and where its peers
//! reach its Raft service (`raft_listen`). Both are one address on a node that serves Raft on
//! its broker port.
//!
//! This is openraft's node type, so it is stored in the Raft log and in snapshots. It is
//! encoded as one string, `"<api>"` when both addresses are the same and
//! `"<api> raft=<raft>"` when not: bincode writes a string exactly as it wrote the single
//! field of `openraft::BasicNode`, the node type before, so data written then still decodes.
//! Addresses are checked where they enter (config, `ChangeMembership`); decoding what the log
//! holds never fails on an address, as a log that decodes is never mistaken for a corrupt one.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

use serde::Deserialize;
use serde::Serialize;

/// The separator between the API address and the Raft address in the encoded form.
const RAFT_ADDR_MARK: &str = " raft=";

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeAddr {
    /// The broker API: what clients, the nameserver's routes and `NOT_LEADER` hints name.
    pub api: String,
    /// The Raft service: what the group's peers connect to.
    pub raft: String,
}

/// An encoded [`NodeAddr`] that is not `"<ip:port>"` or `"<ip:port> raft=<ip:port>"`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an ip:port address (optionally followed by \" raft=<ip:port>\")")]
pub struct BadNodeAddr(pub String);

impl NodeAddr {
    /// A node serving the broker API and Raft on one address.
    pub fn shared(addr: impl Into<String>) -> NodeAddr {
        let addr = addr.into();
        NodeAddr {
            raft: addr.clone(),
            api: addr,
        }
    }

    /// A node serving Raft on an address of its own.
    pub fn split(api: impl Into<String>, raft: impl Into<String>) -> NodeAddr {
        NodeAddr {
            api: api.into(),
            raft: raft.into(),
        }
    }

    /// Whether Raft has an address of its own.
    pub fn has_own_raft_addr(&self) -> bool {
        self.api != self.raft
    }
}

impl fmt::Display for NodeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.has_own_raft_addr() {
            write!(f, "{}{RAFT_ADDR_MARK}{}", self.api, self.raft)
        } else {
            f.write_str(&self.api)
        }
    }
}

impl FromStr for NodeAddr {
    type Err = BadNodeAddr;

    fn from_str(encoded: &str) -> Result<NodeAddr, BadNodeAddr> {
        let node = NodeAddr::decode(encoded);
        for addr in [&node.api, &node.raft] {
            addr.parse::<SocketAddr>()
                .map_err(|_| BadNodeAddr(encoded.to_owned()))?;
        }
        Ok(node)
    }
}

impl NodeAddr {
    /// The addresses `encoded` names, unchecked.
    fn decode(encoded: &str) -> NodeAddr {
        match encoded.split_once(RAFT_ADDR_MARK) {
            Some((api, raft)) => NodeAddr::split(api, raft),
            None => NodeAddr::shared(encoded),
        }
    }
}

impl Serialize for NodeAddr {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for NodeAddr {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<NodeAddr, D::Error> {
        Ok(NodeAddr::decode(&String::deserialize(deserializer)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::codec;

    #[test]
    fn a_basic_node_written_before_decodes_as_a_shared_address() {
        let old = codec::encode(
            "node",
            &openraft::BasicNode {
                addr: "127.0.0.1:10911".into(),
            },
        )
        .expect("encode");
        let decoded: NodeAddr = codec::decode("node", &old).expect("decode");
        assert_eq!(decoded, NodeAddr::shared("127.0.0.1:10911"));
        assert_eq!(codec::encode("node", &decoded).expect("encode"), old);
    }

    #[test]
    fn a_split_address_round_trips() {
        let node = NodeAddr::split("10.0.0.1:10911", "10.0.0.1:10912");
        assert_eq!(node.to_string(), "10.0.0.1:10911 raft=10.0.0.1:10912");
        let encoded = codec::encode("node", &node).expect("encode");
        assert_eq!(
            codec::decode::<NodeAddr>("node", &encoded).expect("decode"),
            node
        );
    }

    #[test]
    fn anything_else_is_refused_where_it_enters() {
        for bad in [
            "",
            "host:1",
            "10.0.0.1:1 raft=",
            "10.0.0.1:1 raft=x:2",
            "10.0.0.1:1 10.0.0.1:2",
        ] {
            assert_eq!(bad.parse::<NodeAddr>(), Err(BadNodeAddr(bad.to_owned())));
        }
        let encoded = codec::encode("node", &"stored before any check").expect("encode");
        assert_eq!(
            codec::decode::<NodeAddr>("node", &encoded).expect("decoding never checks"),
            NodeAddr::shared("stored before any check")
        );
    }
}
