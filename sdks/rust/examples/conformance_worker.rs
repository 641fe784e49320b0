//! The worker that the conformance suite (conformance/ of the repository) drives. Each job type
//! exercises one protocol path.
//!
//! Environment:
//!   JOBWIRE_ADDR              broker address (default 127.0.0.1:7070)
//!   JOBWIRE_WORKER_ID         worker id (default host-pid)
//!   JOBWIRE_CAPACITY          concurrent jobs (default 8)
//!   JOBWIRE_QUEUES            comma-separated queues to take from (default: every queue)
//!   JOBWIRE_GRACE_SECONDS     shutdown grace period (default 30)
//!   JOBWIRE_CONFORMANCE_DIR   where counters and marker files go (default: the temp dir)
//!   JOBWIRE_TOKEN, JOBWIRE_TLS_CA, JOBWIRE_TLS_CERT, JOBWIRE_TLS_KEY
//!                             token and TLS for a broker with auth and TLS on
//!
//! Job types (JSON payloads):
//!   echo              succeeds once the payload decodes; writes the payload's bytes to
//!                     <dir>/echo-<job_id>
//!   fatal             panics (FATAL, error type "panic")
//!   flaky             {"key": K, "fail_times": N}: fails transiently N times per key (an
//!                     std::io::Error), then succeeds; the count lives in <dir>/flaky-<key>
//!   always_transient  fails with JobError::transient (TRANSIENT, error type "error")
//!   retry_after       {"seconds": S}: fails asking for a retry after S seconds
//!   slow              {"ms": M}: sleeps M ms, stopping early on a cancel
//!   wait_cancel       waits for a cancel, then writes <dir>/cancelled-<job_id> with the reason
//!   block             {"marker": NAME}: writes <dir>/started-<NAME>, then waits for a cancel
//!   result            returns the payload's bytes as the job's result
//!   result_size       {"bytes": N}: returns a result of N bytes ("x" each)
//!   progress          {"steps": N, "marker": NAME}: reports progress i/N, "step i of N", for i
//!                     in 1..N at once, writes <dir>/started-<NAME>, then waits for a cancel
//!   parents           returns its parents' results as JSON: [{"job_id", "type", "state", "result"}]

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jobwire::{Job, JobError, Json, Worker};
use serde::Deserialize;

#[derive(Clone)]
struct State {
    dir: PathBuf,
    /// Flaky counts are read and written under this lock, so that two attempts never race.
    flaky: Arc<Mutex<()>>,
}

impl State {
    /// Writes a marker file through a rename, so the suite never reads half of one. The name
    /// is kept inside the state folder whatever the payload says.
    fn write_marker(&self, name: &str, data: &[u8]) -> std::io::Result<()> {
        let name: String = name.chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' }).collect();
        let path = self.dir.join(name);
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, data)?;
        std::fs::rename(tmp, path)
    }
}

#[derive(Deserialize)]
struct Flaky {
    key: String,
    fail_times: u32,
}

#[derive(Deserialize)]
struct Seconds {
    seconds: f64,
}

#[derive(Deserialize)]
struct Millis {
    ms: u64,
}

#[derive(Deserialize)]
struct Block {
    marker: String,
}

#[derive(Deserialize)]
struct Size {
    bytes: usize,
}

#[derive(Deserialize)]
struct Steps {
    steps: u32,
    marker: String,
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .init();
    let dir = std::env::var_os("JOBWIRE_CONFORMANCE_DIR").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&dir).expect("create the state folder");
    eprintln!("conformance worker state dir {}", dir.display());
    let st = State { dir, flaky: Arc::default() };
    let queues: Vec<String> = std::env::var("JOBWIRE_QUEUES").unwrap_or_default().split(',').filter(|q| !q.is_empty()).map(String::from).collect();

    let (echo, flaky, wait, block, progress) = (st.clone(), st.clone(), st.clone(), st.clone(), st.clone());
    let worker = Worker::from_env()
        .capacity(env_or("JOBWIRE_CAPACITY", 8))
        .queues(queues)
        .grace_period(Duration::from_secs(env_or("JOBWIRE_GRACE_SECONDS", 30)))
        .handle("echo", move |job: Job| {
            let st = echo.clone();
            async move {
                if !job.payload().is_empty() {
                    job.json::<serde_json::Value>()?;
                }
                st.write_marker(&format!("echo-{}", job.id()), job.payload())?;
                Ok::<_, JobError>(())
            }
        })
        .handle("fatal", |job: Job| async move {
            if job.id() > 0 {
                panic!("job {} is fatal by design", job.id());
            }
            Ok::<_, JobError>(())
        })
        .handle_json("flaky", move |_job: Job, f: Flaky| {
            let st = flaky.clone();
            async move {
                let _guard = st.flaky.lock().unwrap();
                let name = format!("flaky-{}", f.key);
                let failures: u32 = std::fs::read_to_string(st.dir.join(&name)).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
                if failures < f.fail_times {
                    st.write_marker(&name, (failures + 1).to_string().as_bytes())?;
                    let msg = format!("flaky failure {} of {} for key {}", failures + 1, f.fail_times, f.key);
                    return Err(std::io::Error::new(std::io::ErrorKind::ConnectionReset, msg).into());
                }
                Ok::<_, JobError>(())
            }
        })
        .handle("always_transient", |job: Job| async move {
            Err::<(), _>(JobError::transient(format!("job {} fails transiently by design", job.id())))
        })
        .handle_json("retry_after", |_job: Job, s: Seconds| async move {
            Err::<(), _>(JobError::transient("asked to retry later").retry_after(Duration::from_secs_f64(s.seconds)))
        })
        .handle_json("slow", |job: Job, m: Millis| async move {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(m.ms)) => Ok(()),
                reason = job.cancelled() => Err(JobError::transient(format!("cancelled: {reason}"))),
            }
        })
        .handle("wait_cancel", move |job: Job| {
            let st = wait.clone();
            async move {
                let reason = job.cancelled().await;
                st.write_marker(&format!("cancelled-{}", job.id()), reason.as_str().as_bytes())?;
                eprintln!("job {} cancelled ({reason})", job.id());
                Ok::<_, JobError>(())
            }
        })
        .handle_json("block", move |job: Job, b: Block| {
            let st = block.clone();
            async move {
                st.write_marker(&format!("started-{}", b.marker), job.id().to_string().as_bytes())?;
                let reason = job.cancelled().await;
                Err::<(), _>(JobError::transient(format!("cancelled: {reason}")))
            }
        })
        .handle("result", |job: Job| async move { Ok::<_, JobError>(job.payload().to_vec()) })
        .handle_json("result_size", |_job: Job, s: Size| async move { Ok::<_, JobError>("x".repeat(s.bytes)) })
        .handle_json("progress", move |job: Job, s: Steps| {
            let st = progress.clone();
            async move {
                for i in 1..=s.steps {
                    job.progress(Some(i as f64 / s.steps as f64), format!("step {i} of {}", s.steps))?;
                }
                st.write_marker(&format!("started-{}", s.marker), job.id().to_string().as_bytes())?;
                let reason = job.cancelled().await;
                Err::<(), _>(JobError::transient(format!("cancelled: {reason}")))
            }
        })
        .handle("parents", |job: Job| async move {
            let parents: Vec<_> = job
                .parent_results()
                .iter()
                .map(|p| {
                    let state = p.state.as_str_name().trim_start_matches("JOB_STATE_").to_lowercase();
                    serde_json::json!({"job_id": p.job_id, "type": p.job_type, "state": state, "result": String::from_utf8_lossy(&p.result)})
                })
                .collect();
            Ok::<_, JobError>(Json(parents))
        })
        .build();
    let worker = match worker {
        Ok(w) => w,
        Err(e) => {
            eprintln!("{e}");
            return std::process::ExitCode::from(2);
        }
    };
    match worker.run_until_signal().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            std::process::ExitCode::FAILURE
        }
    }
}
