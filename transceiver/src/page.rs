//! The demo page: a Talk button that starts a session through the relay with the
//! microphone, plays the echo, and shows live stats from `getStats()`.

/// `GET /`.
pub const PAGE: &str = include_str!("../static/index.html");
/// `GET /app.js`.
pub const APP_JS: &str = include_str!("../static/app.js");
