//! A small TCP proxy for fault tests: it sits between a client and one Redis server
//! and can delay, blackhole, refuse or cut the traffic on command, the way a slow or
//! broken network does in production.
//!
//! It runs on a tokio runtime of its own thread, so a test's actix system (one thread)
//! or a bench's loop never slows it down, and the faults it injects are the only ones.
//! Every change of [`Mode`] applies at once to the connections already open as well as
//! to new ones. Dropping the proxy closes its listener and every connection.

use std::net::{SocketAddr, TcpListener as StdListener};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does with traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Forwards every byte at once.
    Pass,
    /// Forwards every byte after this delay, each way (so a round trip gains twice it).
    /// Order is kept; throughput is not limited.
    Delay(Duration),
    /// Accepts connections and reads from both sides, but forwards nothing: a peer
    /// that is gone without a word (a cut cable, a frozen host behind a firewall).
    Blackhole,
    /// Refuses new connections (the listener is closed: "Connection refused") and
    /// cuts the open ones.
    Refuse,
}

/// A running proxy in front of one upstream address.
pub struct Proxy {
    port: u16,
    mode: watch::Sender<Mode>,
    /// Bumped by [`Proxy::cut`]: every connection open at that moment is closed.
    cuts: watch::Sender<u64>,
    /// Keeps the runtime thread alive; its end closes everything.
    _stop: tokio::sync::oneshot::Sender<()>,
    upstream: Arc<Mutex<SocketAddr>>,
}

impl Proxy {
    /// Starts a proxy on a free loopback port, forwarding to `127.0.0.1:upstream`.
    pub fn start(upstream: u16) -> Proxy {
        let std_listener = StdListener::bind("127.0.0.1:0").expect("bind a free port");
        let port = std_listener.local_addr().expect("local addr").port();
        std_listener.set_nonblocking(true).expect("nonblocking");
        let (mode, mode_rx) = watch::channel(Mode::Pass);
        let (cuts, cuts_rx) = watch::channel(0u64);
        let (stop, stop_rx) = tokio::sync::oneshot::channel();
        let upstream = Arc::new(Mutex::new(SocketAddr::from(([127, 0, 0, 1], upstream))));
        let target = upstream.clone();
        std::thread::Builder::new()
            .name(format!("proxy-{port}"))
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("proxy runtime");
                rt.block_on(async move {
                    tokio::select! {
                        _ = serve(std_listener, port, target, mode_rx, cuts_rx) => {}
                        _ = stop_rx => {}
                    }
                });
            })
            .expect("spawn the proxy thread");
        Proxy {
            port,
            mode,
            cuts,
            _stop: stop,
            upstream,
        }
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Switches what the proxy does, for open and new connections alike.
    pub fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    /// What the proxy does now.
    pub fn mode(&self) -> Mode {
        *self.mode.borrow()
    }

    /// Closes every connection open now (new ones are accepted as the mode says).
    pub fn cut(&self) {
        self.cuts.send_modify(|n| *n += 1);
    }

    /// Points new connections at another upstream port (open ones stay where they are).
    pub fn retarget(&self, upstream: u16) {
        *self.upstream.lock().expect("upstream lock") =
            SocketAddr::from(([127, 0, 0, 1], upstream));
    }
}

/// Accepts connections while the mode is not `Refuse`; under `Refuse` the listener is
/// closed and bound again on the same port when the mode changes back.
async fn serve(
    first: StdListener,
    port: u16,
    upstream: Arc<Mutex<SocketAddr>>,
    mut mode: watch::Receiver<Mode>,
    cuts: watch::Receiver<u64>,
) {
    let mut listener = Some(TcpListener::from_std(first).expect("tokio listener"));
    loop {
        if *mode.borrow_and_update() == Mode::Refuse {
            listener = None;
        } else if listener.is_none() {
            // The port was ours a moment ago; retry briefly if the kernel still holds it.
            for _ in 0..50 {
                match TcpListener::bind(("127.0.0.1", port)).await {
                    Ok(l) => {
                        listener = Some(l);
                        break;
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
        }
        let Some(l) = listener.as_ref() else {
            if mode.changed().await.is_err() {
                return;
            }
            continue;
        };
        tokio::select! {
            accepted = l.accept() => {
                let Ok((client, _)) = accepted else { continue };
                let to = *upstream.lock().expect("upstream lock");
                tokio::spawn(connection(client, to, mode.clone(), cuts.clone()));
            }
            changed = mode.changed() => if changed.is_err() { return },
        }
    }
}

/// One client connection: two pumps, one per direction, until either side closes,
/// the mode turns to `Refuse`, or a cut.
async fn connection(
    client: TcpStream,
    upstream: SocketAddr,
    mode: watch::Receiver<Mode>,
    mut cuts: watch::Receiver<u64>,
) {
    let _ = client.set_nodelay(true);
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = server.set_nodelay(true);
    cuts.borrow_and_update();
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let mut refused = mode.clone();
    tokio::select! {
        _ = pump(cr, sw, mode.clone()) => {}
        _ = pump(sr, cw, mode) => {}
        _ = cuts.changed() => {}
        _ = async { let _ = refused.wait_for(|m| *m == Mode::Refuse).await; } => {}
    }
}

/// Copies `from` to `to` as the mode says. Delayed chunks go through a queue so
/// that a delay adds latency without limiting throughput, and order is kept.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mode: watch::Receiver<Mode>,
) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let writer = async move {
        while let Some((due, bytes)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&bytes).await.is_err() {
                return;
            }
        }
    };
    let reader = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let now = tokio::time::Instant::now();
            let due = match *mode.borrow() {
                Mode::Pass => now,
                Mode::Delay(d) => now + d,
                Mode::Blackhole => continue,
                Mode::Refuse => return,
            };
            if tx.send((due, buf[..n].to_vec())).is_err() {
                return;
            }
        }
    };
    // The writer ends when the reader has ended and everything queued is written.
    tokio::join!(reader, writer);
}
