//! A no-op worker for the benchmark (`jobwire-bench --worker-cmd`): serves job type `noop`.
//!
//!   make bench BENCH_ARGS="--scenarios drain --worker-cmd 'sdks/rust/target/release/examples/bench_worker'"

use jobwire::{Job, JobError, Worker};

#[tokio::main]
async fn main() -> Result<(), jobwire::Error> {
    let capacity = std::env::var("JOBWIRE_CONCURRENCY").ok().and_then(|v| v.parse().ok()).unwrap_or(256);
    Worker::from_env()
        .capacity(capacity)
        .handle("noop", |_job: Job| async { Ok::<_, JobError>(()) })
        .build()?
        .run_until_signal()
        .await
}
