//! What the suite measures beside the relays: the bare forwarder ([`bare`], the floor that
//! does no routing work), the forwarders a user would pick instead ([`alternatives`]), and
//! the XDP programs ([`xdp`]: the in-kernel reference relay and the load tools that are
//! never the limit of what they measure).

pub mod alternatives;
pub mod bare;
pub mod xdp;
