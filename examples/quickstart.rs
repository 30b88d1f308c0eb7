//! Run first: `cargo run --example quickstart --features testing` (needs `redis-server` on PATH).
fn main() {}
