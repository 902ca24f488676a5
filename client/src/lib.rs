//! rocketraft client SDK.
