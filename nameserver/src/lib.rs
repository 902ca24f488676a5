//! rocketraft nameserver: the stateless route registry (topic -> broker groups and their
//! leaders). Built in issue 3 ("Nameserver, routes, topics and the producer"); this crate holds
//! its place in the workspace layout of DESIGN §1 until then.
