//! A small worker: greets whoever a `greet` job names, and shows typed payloads, fatal and
//! transient failures, retry-after and cancellation.
//!
//!   JOBWIRE_ADDR=127.0.0.1:7070 cargo run --release --example worker    # until Ctrl-C
//!   jobwire enqueue --type greet --payload '{"name": "Ada"}'

use std::time::Duration;

use jobwire::{Job, JobError, Worker};
use serde::Deserialize;

#[derive(Deserialize)]
struct Greet {
    name: String,
    /// How long greeting takes, to show cancellation; 0 by default.
    #[serde(default)]
    ms: u64,
}

async fn greet(job: Job, g: Greet) -> Result<(), JobError> {
    match g.name.as_str() {
        "" => return Err(JobError::fatal("no name")), // straight to the dead-letter queue
        "busy" => return Err(JobError::transient("greeter is busy").retry_after(Duration::from_secs(5))),
        _ => {}
    }
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_millis(g.ms)) => {}
        reason = job.cancelled() => return Err(JobError::transient(format!("stopped: {reason}"))),
    }
    println!("hello, {} (job {}, attempt {})", g.name, job.id(), job.attempt());
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), jobwire::Error> {
    tracing_subscriber::fmt().with_writer(std::io::stderr).with_ansi(false).init();
    Worker::from_env() // JOBWIRE_ADDR, JOBWIRE_TOKEN, JOBWIRE_TLS_*
        .capacity(4)
        .handle_json("greet", greet)
        .build()?
        .run_until_signal()
        .await
}
