//! rocketraft client SDK: producer, push consumer and admin tools (issues 3 and 6 build the
//! SDK). Today the crate carries the append benchmark, `rocketraft-bench`, which speaks the
//! broker API directly.
