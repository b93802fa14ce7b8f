//! The HTTP server (HTTP/1.1 and h2c) and the in-process handles to start and stop it.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use crate::config::SimConfig;
use crate::engine::{spawn_engine, EngineHandle};
use crate::job::EngineParams;
use crate::prefix::PrefixCache;
use crate::routes::{handle, State};
use crate::truth::TruthLog;

/// Longest a client may take over its TLS handshake.
const TLS_HANDSHAKE_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Blocks the prefix cache remembers before it starts over.
const PREFIX_CACHE_BLOCKS: usize = 1 << 20;

/// A running simulator on the current tokio runtime.
pub struct SimServer {
    local_addr: SocketAddr,
    /// `https` with `--tls-cert`, else `http`.
    scheme: &'static str,
    stop: Option<oneshot::Sender<()>>,
    accept: Option<tokio::task::JoinHandle<()>>,
    engine: Option<JoinHandle<()>>,
    engine_handle: EngineHandle,
    truth: Option<TruthLog>,
}

impl SimServer {
    /// Binds `addr` (port 0 picks a free port) and starts serving on the current runtime.
    pub async fn start(config: SimConfig, addr: SocketAddr) -> io::Result<SimServer> {
        let tls = match (&config.tls_cert, &config.tls_key) {
            (Some(cert), Some(key)) => Some(crate::tls::acceptor(cert, key)?),
            _ => None,
        };
        let listener = listen(addr)?;
        let local_addr = listener.local_addr()?;
        let (truth, truth_tx) = match &config.truth_log {
            Some(path) => {
                let (log, tx) = TruthLog::create(path)?;
                (Some(log), Some(tx))
            }
            None => (None, None),
        };
        let (engine_handle, engine) = spawn_engine(EngineParams::from_config(&config))?;
        let prefix_cache = config.prefix_cache.then(|| {
            Mutex::new(PrefixCache::new(
                config.prefix_cache_block,
                PREFIX_CACHE_BLOCKS,
            ))
        });
        let state = Arc::new(State {
            config,
            engine: engine_handle.clone(),
            arrivals: AtomicU64::new(0),
            truth: truth_tx,
            prefix_cache,
        });
        let (stop, stop_rx) = oneshot::channel();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let accept = tokio::spawn(accept_loop(listener, tls, state, stop_rx));
        Ok(SimServer {
            local_addr,
            scheme,
            stop: Some(stop),
            accept: Some(accept),
            engine: Some(engine),
            engine_handle,
            truth,
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The OpenAI base URL, `http://ADDR/v1` (`https` when it serves TLS).
    pub fn base_url(&self) -> String {
        format!("{}://{}/v1", self.scheme, self.local_addr)
    }

    /// Closes every connection, stops the engine and flushes the truth log.
    pub async fn shutdown(mut self) -> io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(accept) = self.accept.take() {
            let _ = accept.await;
        }
        // Requests still being answered (h2 streams run outside the connection tasks) end
        // when the engine drops their sequences; the truth log ends with the last body.
        self.engine_handle.stop();
        let engine = self.engine.take();
        let truth = self.truth.take();
        tokio::task::spawn_blocking(move || {
            if let Some(engine) = engine {
                let _ = engine.join();
            }
            truth.map_or(Ok(()), TruthLog::finish)
        })
        .await
        .map_err(io::Error::other)?
    }

    /// Starts a simulator on its own thread and runtime, bound to 127.0.0.1 on a free port.
    pub fn spawn_background(config: SimConfig) -> io::Result<SimHandle> {
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("tokentrace-sim".into())
            .spawn(move || -> io::Result<()> {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build();
                let runtime = match runtime {
                    Ok(rt) => rt,
                    Err(err) => {
                        let _ = addr_tx.send(Err(err));
                        return Ok(());
                    }
                };
                runtime.block_on(async move {
                    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
                    match SimServer::start(config, loopback).await {
                        Ok(server) => {
                            let _ = addr_tx.send(Ok((server.local_addr(), server.base_url())));
                            let _ = stop_rx.await;
                            server.shutdown().await
                        }
                        Err(err) => {
                            let _ = addr_tx.send(Err(err));
                            Ok(())
                        }
                    }
                })
            })?;
        let (addr, base_url) = addr_rx
            .recv()
            .map_err(|_| io::Error::other("simulator thread ended before binding"))??;
        Ok(SimHandle {
            addr,
            base_url,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }
}

impl Drop for SimServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.engine_handle.stop();
    }
}

/// A simulator running on its own thread; dropping it stops it.
pub struct SimHandle {
    addr: SocketAddr,
    base_url: String,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl SimHandle {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The OpenAI base URL, `http://127.0.0.1:PORT/v1` (`https` when it serves TLS).
    pub fn base_url(&self) -> String {
        self.base_url.clone()
    }

    /// Stops the server and waits until the truth log is flushed.
    pub fn shutdown(mut self) -> io::Result<()> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.thread.take() {
            Some(thread) => thread
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("simulator thread panicked"))),
            None => Ok(()),
        }
    }
}

impl Drop for SimHandle {
    fn drop(&mut self) {
        let _ = self.stop_and_join();
    }
}

/// Connections the kernel queues before `accept` takes them, as uvicorn's default (vLLM's and
/// SGLang's servers): `TcpListener::bind` asks for 128, and a load of a few hundred streams
/// connecting at once overflows that, so some clients' SYNs are dropped and retried a second
/// later (`ListenOverflows` in `nstat`), which stretches the run for every client.
const LISTEN_BACKLOG: u32 = 2048;

fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

async fn accept_loop(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    state: Arc<State>,
    mut stop: oneshot::Receiver<()>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stop => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    Err(_) => {
                        // Out of descriptors or similar: back off instead of spinning.
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let socket = stream.as_raw_fd();
                let state = state.clone();
                let tls = tls.clone();
                connections.spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(handle(state, socket, req).await) }
                    });
                    let mut builder = auto::Builder::new(TokioExecutor::new());
                    builder.http1().timer(TokioTimer::new());
                    match tls {
                        None => {
                            let _ = builder.serve_connection(TokioIo::new(stream), service).await;
                        }
                        Some(tls) => {
                            // A failed handshake only ends this connection.
                            let handshake = tokio::time::timeout(TLS_HANDSHAKE_LIMIT, tls.accept(stream));
                            if let Ok(Ok(stream)) = handshake.await {
                                let _ = builder.serve_connection(TokioIo::new(stream), service).await;
                            }
                        }
                    }
                });
            }
        }
    }
    connections.shutdown().await;
}
