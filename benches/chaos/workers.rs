//! The workers of a chaos run: each a thread that runs the real `lockwarden run`
//! command in a loop, as an operator's cron jobs would, and keeps what each run
//! did (see `history.rs`).
//!
//! A run's child is a shell that writes `start <token> <ns>`, sleeps for the
//! section, and writes `end <token> <ns>` to a file of its own; the worker reads
//! that file after the run. The suite can SIGKILL the command of a worker that is
//! inside its section (a holder that crashes).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::history::{Run, Section};

/// Nanoseconds since the epoch, the clock the children write.
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// How the workers run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The `lockwarden` binary.
    pub bin: String,
    /// The connection arguments (`--redis URL`, `--sentinel ...`, `--cluster ...`).
    pub connect: Vec<String>,
    /// More arguments of `run` (`--redlock`).
    pub run_flags: Vec<String>,
    /// Workers, and locks they share (worker `w` takes lock `w % locks`).
    pub workers: usize,
    pub locks: usize,
    /// `--wait` and `--watchdog-lease` of every run.
    pub wait: Duration,
    pub lease: Duration,
    /// How long a section lasts.
    pub section: Duration,
    /// Where the children write.
    pub dir: PathBuf,
    /// Where each run's stderr is kept, with `-v` and `RUST_LOG=lockwarden=debug`
    /// (`LOCKWARDEN_CHAOS_LOGS`); `None`: read for an odd exit, then dropped.
    pub logs: Option<PathBuf>,
}

/// Per worker: the pid of its running command and its section file.
type Running = Mutex<Vec<Option<(u32, PathBuf)>>>;

/// Running workers.
pub struct Fleet {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Vec<Run>>>,
    running: Arc<Running>,
}

/// The name of lock `i`.
pub fn lock_name(i: usize) -> String {
    format!("chaos:{i}")
}

impl Fleet {
    /// Starts the workers.
    pub fn start(plan: &Plan) -> Fleet {
        let stop = Arc::new(AtomicBool::new(false));
        let running = Arc::new(Mutex::new(vec![None; plan.workers]));
        let threads = (0..plan.workers)
            .map(|w| {
                let (plan, stop, running) = (plan.clone(), stop.clone(), running.clone());
                std::thread::spawn(move || work(w, &plan, &stop, &running))
            })
            .collect();
        Fleet {
            stop,
            threads,
            running,
        }
    }

    /// SIGKILLs the command of one worker that is inside its section (a holder
    /// that crashes), the first seen within `limit`; answers whether there was
    /// one. Polled every millisecond: a single look finds every worker between
    /// sections now and then (a command starts, takes its lock, and only then
    /// writes "start"), more often on a busy machine.
    pub fn kill_a_holder(&self, limit: Duration) -> bool {
        let deadline = std::time::Instant::now() + limit;
        while std::time::Instant::now() < deadline {
            let running = self.running.lock().expect("running").clone();
            for (pid, file) in running.iter().flatten() {
                let inside = std::fs::read_to_string(file)
                    .map(|t| t.contains("start") && !t.contains("end"))
                    .unwrap_or(false);
                if inside {
                    let _ = Command::new("kill")
                        .args(["-KILL", &pid.to_string()])
                        .status();
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        false
    }

    /// Waits (at most `limit`) until a worker's section has just ended while its
    /// command still runs: its release is on the wire. Answers whether one was
    /// seen. Polls every millisecond, as a release takes about that long.
    pub fn wait_for_a_release(&self, limit: Duration) -> bool {
        let deadline = std::time::Instant::now() + limit;
        while std::time::Instant::now() < deadline {
            let running = self.running.lock().expect("running").clone();
            for (_, file) in running.iter().flatten() {
                if std::fs::read_to_string(file).is_ok_and(|t| t.contains("end")) {
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        false
    }

    /// Stops the workers after their current runs and returns every run. A run
    /// still going after `limit` is SIGKILLed (and counts as stuck: it lasted
    /// longer than any wait).
    pub fn stop(self, limit: Duration) -> Vec<Run> {
        self.stop.store(true, Ordering::Relaxed);
        let deadline = std::time::Instant::now() + limit;
        while self.threads.iter().any(|t| !t.is_finished()) && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        for (pid, _) in self.running.lock().expect("running").iter().flatten() {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
        self.threads
            .into_iter()
            .flat_map(|t| t.join().unwrap_or_default())
            .collect()
    }
}

/// One worker's loop.
fn work(w: usize, plan: &Plan, stop: &AtomicBool, running: &Running) -> Vec<Run> {
    let mut runs = Vec::new();
    let lock = w % plan.locks;
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let file = plan.dir.join(format!("w{w}-{i}"));
        // A RedLock's tokens come from several servers and compare with nothing:
        // its sections carry 0, so any overlap of two counts as unordered.
        let script = format!(
            "t=${{LOCKWARDEN_TOKEN:-0}}; echo start $t $(date +%s%N) >> '{f}'; sleep {s}; \
             echo end $t $(date +%s%N) >> '{f}'",
            f = file.display(),
            s = plan.section.as_secs_f64()
        );
        let asked = now_ns();
        let child = Command::new(&plan.bin)
            .args(&plan.connect)
            .args(plan.logs.as_ref().map(|_| "-v"))
            .args(["run", &lock_name(lock)])
            .args(&plan.run_flags)
            .args(["--wait", &format!("{}ms", plan.wait.as_millis())])
            .args(["--watchdog-lease", &format!("{}ms", plan.lease.as_millis())])
            .args(["--", "sh", "-c", &script])
            .env_remove("REDIS_URL")
            .env_remove("RUST_LOG")
            .envs(plan.logs.as_ref().map(|_| ("RUST_LOG", "lockwarden=debug")))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(
                std::fs::File::create(file.with_extension("err"))
                    .map_or_else(|_| Stdio::null(), Stdio::from),
            )
            .spawn();
        let Ok(mut child) = child else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        running.lock().expect("running")[w] = Some((child.id(), file.clone()));
        let status = child.wait();
        running.lock().expect("running")[w] = None;
        let exit = status.ok().map(|s| {
            use std::os::unix::process::ExitStatusExt;
            s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0))
        });
        // A killed command's child may still be writing its end line.
        if exit.is_some_and(|c| c > 128) {
            std::thread::sleep(plan.section + Duration::from_millis(50));
        }
        let section = std::fs::read_to_string(&file)
            .ok()
            .and_then(|t| Section::parse(&t));
        let _ = std::fs::remove_file(&file);
        // An exit the history does not explain (not 0, 75 or 76): say why.
        let said = std::fs::read_to_string(file.with_extension("err")).unwrap_or_default();
        if let Some(logs) = &plan.logs {
            // Named by worker, run, when it asked and ended (ms since the
            // epoch, as the fault lines print) and how it exited.
            let code = exit.map_or("none".to_string(), |c| c.to_string());
            let kept = format!(
                "w{w}-{i}-{}-{}-exit{code}.err",
                asked / 1_000_000,
                now_ns() / 1_000_000
            );
            let _ = std::fs::copy(file.with_extension("err"), logs.join(kept));
        }
        let _ = std::fs::remove_file(file.with_extension("err"));
        if exit.is_some_and(|c| !matches!(c, 0 | 75 | 76 | 128..)) {
            eprintln!("chaos: worker {w} exited {exit:?}: {}", said.trim());
        }
        runs.push(Run {
            lock,
            asked,
            done: now_ns(),
            exit,
            section,
        });
    }
    runs
}
