//! The SDK's `testing` fixtures as a plugin author meets them: what they refuse, in the
//! host's own words, and Echo's real responses passing their checks.

mod declared;
mod fixture;
