//! A server as a long-running network service (the `puma-serve` program): the
//! connections to the other two servers, kept up and re-established after a loss; the
//! share stores it restarts from; and the TLS listener where clients send requests and
//! owners upload models ([`crate::protocol`]).

use std::net::TcpListener as StdListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use puma_core::PartyId;
use puma_core::dealing::Dealt;
use puma_layers::nn::{Deliver, Delivered, Delivery, SecureSettings};
use puma_layers::store::ModelHash;
use puma_layers::upload::DealtTensor;
use puma_transports::mux::{Mux, MuxOptions};
use puma_transports::tcp::Endpoints;
use puma_transports::tls::{Identity, Pins, service_server_config};
use tokio::io::{ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::cancel::{Cancel, Ended};
use crate::config::{ConfigError, ServiceConfig, resolve};
use crate::events::Log;
use crate::model::plan_of;
use crate::protocol::{
    EncodeHeader, ErrorKind, GenerateHeader, ProtocolError, Reply, Request, UploadHeader,
    decode_dealt, encode_components, read_message, write_message,
};
use crate::server::{
    EncodeRequest, GenerateRequest, ServeError, ServeOptions, Server, SessionCost,
};

/// The file name of model `name`'s share store in a server's store folder.
pub fn store_file(folder: &Path, name: &str) -> PathBuf {
    folder.join(format!("{name}.pumastore"))
}

/// Why a server could not start or had to stop.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The configuration, a key, an address or the store folder is wrong.
    #[error("configuration: {0}")]
    Config(#[from] ConfigError),
    /// A share store could not be loaded.
    #[error("share store: {0}")]
    Store(#[from] ServeError),
    /// A listener could not be bound.
    #[error("cannot listen on {addr}: {error}")]
    Listen {
        /// The address.
        addr: String,
        /// Why.
        error: std::io::Error,
    },
    /// The runtime could not start.
    #[error("cannot start: {0}")]
    Runtime(std::io::Error),
}

/// A running server's shared state.
struct Daemon {
    server: Arc<Server>,
    cfg: ServiceConfig,
    store: PathBuf,
    log: Log,
    stopping: AtomicBool,
}

/// Runs server `me` of the service in `cfg` until SIGTERM or SIGINT (or `stop` is
/// set): loads the share stores in its folder, connects to the other servers (and
/// reconnects after a loss), and serves clients and owners. On a signal it stops
/// accepting, lets the running requests finish (at most `grace`), and returns.
///
/// # Errors
/// [`DaemonError`] if it cannot start: a bad configuration, an unreadable or refused
/// share store, an address in use.
pub fn run(
    cfg: ServiceConfig,
    me: PartyId,
    settings: SecureSettings,
    grace: Duration,
    stop: Arc<AtomicBool>,
) -> Result<(), DaemonError> {
    let log = Log::new(me);
    let entry = cfg.server(me).clone();
    let (identity, pins) = cfg.identity_and_pins(me)?;
    let store = entry.store.clone().ok_or_else(|| {
        ConfigError(format!(
            "no store folder for server {} in the file",
            me.index()
        ))
    })?;
    create_private_dir(&store)?;
    let opts = ServeOptions {
        max_running: cfg.max_running,
        max_queued: cfg.max_queued,
        queue_wait: cfg.queue_wait,
        peer_timeout: cfg.peer_timeout,
        settings,
    };
    let server = Arc::new(Server::unconnected(me, opts));
    load_stores(&server, &store, &log)?;

    let peer_listener = if me == PartyId::P2 {
        None
    } else {
        Some(bind(&entry.peer_addr)?)
    };
    let mut peers = [None, None, None];
    for p in [me.next(), me.prev()] {
        if let Some(slot) = peers.get_mut(p.index()) {
            *slot = Some(resolve(&cfg.server(p).peer_addr)?);
        }
    }
    let endpoints = Endpoints { me, peers };
    let client_listener = bind(&entry.client_addr)?;
    let tls = TlsAcceptor::from(Arc::new(
        service_server_config(&identity).map_err(|e| ConfigError(e.to_string()))?,
    ));
    log.info(
        "start",
        &[
            ("client_addr", &entry.client_addr),
            ("peer_addr", &entry.peer_addr),
            ("store", &store.display()),
        ],
    );
    let daemon = Arc::new(Daemon {
        server,
        cfg,
        store,
        log,
        stopping: AtomicBool::new(false),
    });

    let keeper = {
        let (daemon, stop) = (Arc::clone(&daemon), Arc::clone(&stop));
        std::thread::Builder::new()
            .name("puma-peers".into())
            .spawn(move || keep_peers(&daemon, &endpoints, peer_listener, &identity, &pins, &stop))
            .map_err(DaemonError::Runtime)?
    };

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("puma-serve")
        .enable_all()
        .build()
        .map_err(DaemonError::Runtime)?;
    let served = rt.block_on(serve_clients(
        Arc::clone(&daemon),
        client_listener,
        tls,
        Arc::clone(&stop),
    ));
    daemon.stopping.store(true, Ordering::SeqCst);
    daemon
        .log
        .info("stopping", &[("running", &daemon.server.status().running)]);
    // Requests run on blocking threads: wait for them, at most `grace`.
    let until = Instant::now() + grace;
    while daemon.server.status().running + daemon.server.status().queued > 0
        && Instant::now() < until
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::SeqCst);
    rt.shutdown_timeout(Duration::from_secs(1));
    let _ = keeper.join();
    daemon.log.info("stopped", &[]);
    served
}

fn bind(addr: &str) -> Result<StdListener, DaemonError> {
    let a = resolve(addr)?;
    StdListener::bind(a).map_err(|error| DaemonError::Listen {
        addr: addr.to_owned(),
        error,
    })
}

/// Creates the store folder (mode 0700 on Unix) if it does not exist.
fn create_private_dir(dir: &Path) -> Result<(), ConfigError> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    b.create(dir).map_err(|e| {
        ConfigError(format!(
            "cannot create the store folder {}: {e}",
            dir.display()
        ))
    })
}

/// Loads every `*.pumastore` of the folder, named by its file stem.
fn load_stores(server: &Server, dir: &Path, log: &Log) -> Result<(), DaemonError> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        ConfigError(format!(
            "cannot read the store folder {}: {e}",
            dir.display()
        ))
    })?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "pumastore"))
        .collect();
    paths.sort();
    for path in paths {
        let Some(name) = path.file_stem().and_then(|s| s.to_str()).map(str::to_owned) else {
            continue;
        };
        let header = server.load_store(&name, &path, None)?;
        log.info(
            "model.loaded",
            &[
                ("model", &name),
                ("hash", &header.model_hash.short()),
                ("store", &path.display()),
            ],
        );
    }
    Ok(())
}

/// Keeps the connections to the other servers up: connects, and when a peer is lost
/// and no request uses the connections any more, drops them and connects again.
fn keep_peers(
    daemon: &Daemon,
    endpoints: &Endpoints,
    listener: Option<StdListener>,
    identity: &Identity,
    pins: &Pins,
    stop: &AtomicBool,
) {
    let log = daemon.log;
    let defaults = MuxOptions::default();
    let opts = MuxOptions {
        connect_timeout: Duration::from_secs(2),
        // A request's first frames from the other two reach the leader while it may still
        // hold the request in its queue: keep them that long.
        early_ttl: defaults
            .early_ttl
            .max(daemon.cfg.queue_wait + daemon.cfg.peer_timeout),
        ..defaults
    };
    let mut waiting_since: Option<Instant> = None;
    while !stop.load(Ordering::SeqCst) {
        if !daemon.server.release_broken_peers() {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        let listener = match listener.as_ref().map(StdListener::try_clone).transpose() {
            Ok(l) => l,
            Err(e) => {
                log.warn("peers.listener", &[("error", &e)]);
                std::thread::sleep(Duration::from_secs(1));
                continue;
            }
        };
        match Mux::connect(endpoints, listener, identity, pins, opts.clone()) {
            Ok(mux) => {
                daemon.server.connect_peers(mux);
                waiting_since = None;
                log.info("peers.connected", &[]);
            }
            Err(e) => {
                // Report once a minute while the peers stay away, not at every attempt.
                let now = Instant::now();
                if waiting_since.is_none_or(|t| now.duration_since(t) > Duration::from_secs(60)) {
                    log.warn("peers.waiting", &[("error", &e)]);
                    waiting_since = Some(now);
                }
            }
        }
    }
}

/// Accepts clients until a signal or `stop`; each connection is served on its own task.
async fn serve_clients(
    daemon: Arc<Daemon>,
    listener: StdListener,
    tls: TlsAcceptor,
    stop: Arc<AtomicBool>,
) -> Result<(), DaemonError> {
    listener
        .set_nonblocking(true)
        .map_err(DaemonError::Runtime)?;
    let listener = tokio::net::TcpListener::from_std(listener).map_err(DaemonError::Runtime)?;
    let connections = Arc::new(Semaphore::new(
        daemon.cfg.max_running + daemon.cfg.max_queued + 8,
    ));
    let mut signals = Signals::new().map_err(DaemonError::Runtime)?;
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((tcp, addr)) = accepted else { continue };
                let Ok(permit) = Arc::clone(&connections).try_acquire_owned() else {
                    daemon.log.warn("client.refused", &[("addr", &addr), ("why", &"too many connections")]);
                    continue;
                };
                let _ = tcp.set_nodelay(true);
                let (daemon, tls) = (Arc::clone(&daemon), tls.clone());
                tokio::spawn(async move {
                    let Ok(Ok(stream)) = tokio::time::timeout(Duration::from_secs(10), tls.accept(tcp)).await else {
                        daemon.log.warn("client.handshake", &[("addr", &addr)]);
                        return;
                    };
                    if let Err(e) = serve_connection(&daemon, stream).await {
                        daemon.log.warn("client.connection", &[("addr", &addr), ("error", &e)]);
                    }
                    drop(permit);
                });
            }
            sig = signals.next() => {
                daemon.log.info("signal", &[("signal", &sig)]);
                return Ok(());
            }
            _ = tick.tick() => {
                if stop.load(Ordering::SeqCst) {
                    return Ok(());
                }
            }
        }
    }
}

/// SIGTERM and SIGINT.
struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> std::io::Result<Signals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Signals {
                term: signal(SignalKind::terminate())?,
                int: signal(SignalKind::interrupt())?,
            })
        }
        #[cfg(not(unix))]
        Ok(Signals {})
    }

    async fn next(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.term.recv() => "SIGTERM",
                _ = self.int.recv() => "SIGINT",
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            "ctrl-c"
        }
    }
}

type Reader = ReadHalf<TlsStream<TcpStream>>;
type Writer = WriteHalf<TlsStream<TcpStream>>;

/// The largest payload of a request other than an upload's tensor: a prompt's dealt
/// one-hot rows (a correction vector of tokens × vocab words).
const MAX_PROMPT_PAYLOAD: u64 = 1 << 30;

/// Serves one client or owner connection: requests one after the other.
async fn serve_connection(
    daemon: &Arc<Daemon>,
    stream: TlsStream<TcpStream>,
) -> Result<(), ProtocolError> {
    let (mut rd, mut wr) = tokio::io::split(stream);
    while let Some((request, payload)) =
        read_message::<_, Request>(&mut rd, MAX_PROMPT_PAYLOAD).await?
    {
        match request {
            Request::Status => {
                write_message(&mut wr, &Reply::Status(daemon.server.status()), &[]).await?;
            }
            Request::Generate(h) => {
                if !serve_generate(daemon, h, payload, &mut rd, &mut wr).await? {
                    return Ok(());
                }
            }
            Request::Encode(h) => {
                if !serve_encode(daemon, h, payload, &mut rd, &mut wr).await? {
                    return Ok(());
                }
            }
            Request::UploadBegin(h) => serve_upload(daemon, h, &mut rd, &mut wr).await?,
            Request::UploadTensor { .. } | Request::UploadEnd { .. } => {
                let reply = error(ErrorKind::BadRequest, "an upload part outside an upload");
                write_message(&mut wr, &reply, &[]).await?;
                return Ok(());
            }
        }
    }
    Ok(())
}

fn error(kind: ErrorKind, message: impl Into<String>) -> Reply {
    Reply::Error {
        kind,
        message: message.into(),
    }
}

fn error_reply(e: &ServeError) -> Reply {
    let kind = match e {
        ServeError::UnknownModel(_) => ErrorKind::UnknownModel,
        ServeError::BadRequest(_) => ErrorKind::BadRequest,
        ServeError::Busy { .. } => ErrorKind::Busy,
        ServeError::QueueTimeout(_) => ErrorKind::Timeout,
        ServeError::Session(t) if t.to_string().contains("deadline") => ErrorKind::Timeout,
        ServeError::Session(_) | ServeError::PeersDown(_) => ErrorKind::Session,
        ServeError::Upload(_) => ErrorKind::Upload,
        _ => ErrorKind::Internal,
    };
    error(kind, e.to_string())
}

/// Runs one generation request, streaming this server's shares of the ids to the client.
/// Returns whether the connection can go on.
async fn serve_generate(
    daemon: &Arc<Daemon>,
    h: GenerateHeader,
    payload: Vec<u8>,
    rd: &mut Reader,
    wr: &mut Writer,
) -> Result<bool, ProtocolError> {
    let fields = format!(
        "session={} model={} prompts={} tokens={} max_new={} mode={:?}",
        h.session_id,
        h.model,
        h.lens.len(),
        h.lens.iter().sum::<usize>(),
        h.max_new,
        h.mode
    );
    // The payload may hold at most the prompts' one-hot rows.
    let width = daemon
        .server
        .model_infos()
        .into_iter()
        .find(|m| m.name == h.model)
        .map(|m| m.vocab);
    let Some(prompt) = dealt_input(daemon, &h.model, width, &h.lens, payload, wr).await? else {
        return Ok(false);
    };
    let request = GenerateRequest {
        session_id: h.session_id,
        model: h.model.clone(),
        lens: h.lens.clone(),
        decoding: h.decoding(),
        prompt,
    };
    let job = move |server: &Server, deliver, cancel: &Cancel| {
        server
            .generate(request, deliver, cancel)
            .map(|(_, cost)| cost)
    };
    run_request(daemon, h.session_id, h.deadline_ms, &fields, job, rd, wr).await
}

/// Runs one encode request, sending this server's shares of the outputs to the client.
/// Returns whether the connection can go on.
async fn serve_encode(
    daemon: &Arc<Daemon>,
    h: EncodeHeader,
    payload: Vec<u8>,
    rd: &mut Reader,
    wr: &mut Writer,
) -> Result<bool, ProtocolError> {
    let fields = format!(
        "session={} model={} sequences={} tokens={} outputs={}",
        h.session_id,
        h.model,
        h.lens.len(),
        h.lens.iter().sum::<usize>(),
        h.outputs.names()
    );
    // The payload may hold at most the batch's one-hot rows.
    let width = daemon
        .server
        .model_infos()
        .into_iter()
        .find(|m| m.name == h.model)
        .map(|m| m.vocab + m.encoder.map_or(0, |e| e.token_types));
    let Some(input) = dealt_input(daemon, &h.model, width, &h.lens, payload, wr).await? else {
        return Ok(false);
    };
    let request = EncodeRequest {
        session_id: h.session_id,
        model: h.model.clone(),
        lens: h.lens.clone(),
        outputs: h.outputs.outputs(),
        input,
    };
    let job =
        move |server: &Server, deliver, cancel: &Cancel| server.encode(request, deliver, cancel);
    run_request(daemon, h.session_id, h.deadline_ms, &fields, job, rd, wr).await
}

/// The client's dealt input of a request for model `name`, whose one-hot rows are
/// `width` wide (`None`: no such model), read from `payload`; `None` once an error reply
/// is sent.
async fn dealt_input(
    daemon: &Arc<Daemon>,
    name: &str,
    width: Option<usize>,
    lens: &[usize],
    payload: Vec<u8>,
    wr: &mut Writer,
) -> Result<Option<Dealt>, ProtocolError> {
    if daemon.stopping.load(Ordering::SeqCst) {
        let reply = error(ErrorKind::Busy, "the server is shutting down");
        write_message(wr, &reply, &[]).await?;
        return Ok(None);
    }
    let Some(width) = width else {
        let e = ServeError::UnknownModel(name.to_owned());
        write_message(wr, &error_reply(&e), &[]).await?;
        return Ok(None);
    };
    let rows = lens
        .iter()
        .try_fold(0usize, |a, &l| a.checked_add(l))
        .and_then(|t| t.checked_mul(width));
    match rows.map(|rows| decode_dealt(payload, rows)) {
        Some(Ok(d)) => Ok(Some(d)),
        _ => {
            let reply = error(
                ErrorKind::BadRequest,
                "the dealt input does not fit the request",
            );
            write_message(wr, &reply, &[]).await?;
            Ok(None)
        }
    }
}

/// The reply carrying one delivery of this server's shares to the client.
fn delivery_reply(d: &Delivery) -> (Reply, Vec<u8>) {
    let (a, b) = d.shares.components();
    let reply = match d.what {
        Delivered::StepIds { step } => Reply::Ids {
            step: Some(step),
            count: a.len(),
        },
        Delivered::FinalIds => Reply::Ids {
            step: None,
            count: a.len(),
        },
        Delivered::Encoded => Reply::Encoded { count: a.len() },
    };
    (reply, encode_components(a, b))
}

/// Runs `job` (one request on the server, on a worker thread) to its end: its deliveries
/// go to the client as they come, the client going away or the deadline ends it at all
/// three servers, and its end is logged and answered. Returns whether the connection can
/// go on.
async fn run_request<J>(
    daemon: &Arc<Daemon>,
    session: u64,
    deadline_ms: u64,
    fields: &str,
    job: J,
    rd: &mut Reader,
    wr: &mut Writer,
) -> Result<bool, ProtocolError>
where
    J: FnOnce(&Server, Deliver, &Cancel) -> Result<SessionCost, ServeError> + Send + 'static,
{
    let log = daemon.log;
    let limit = daemon.cfg.deadline;
    let wanted = if deadline_ms == 0 {
        limit
    } else {
        Duration::from_millis(deadline_ms).min(limit)
    };
    let cancel = Arc::new(Cancel::until(Instant::now() + wanted));
    log.info("request.start", &[("request", &fields)]);
    let (tx, mut rx) = mpsc::unbounded_channel::<(Reply, Vec<u8>)>();
    let deliver: Deliver = Arc::new(move |d: Delivery| {
        // A closed channel means the connection is gone; the cancel ends the session.
        let _ = tx.send(delivery_reply(&d));
    });
    let started = Instant::now();
    let mut job = {
        let (server, cancel) = (Arc::clone(&daemon.server), Arc::clone(&cancel));
        tokio::task::spawn_blocking(move || job(&server, deliver, &cancel))
    };
    let mut client_there = true;
    let result = loop {
        tokio::select! {
            Some((reply, payload)) = rx.recv() => {
                if client_there && write_message(wr, &reply, &payload).await.is_err() {
                    client_there = false;
                    cancel.end(Ended::ClientGone);
                }
            }
            done = &mut job => break done,
            // Nothing may arrive during a request: a message or the end of the connection
            // ends it.
            _ = read_message::<_, Request>(rd, 0), if client_there => {
                client_there = false;
                cancel.end(Ended::ClientGone);
            }
        }
    };
    while let Ok((reply, payload)) = rx.try_recv() {
        if client_there && write_message(wr, &reply, &payload).await.is_err() {
            client_there = false;
        }
    }
    let secs = format!("{:.3}", started.elapsed().as_secs_f64());
    let reply = match result {
        Ok(Ok(cost)) => {
            log.info(
                "request.done",
                &[
                    ("session", &session),
                    ("secs", &secs),
                    ("rounds", &cost.rounds),
                    ("bytes", &cost.bytes_sent),
                ],
            );
            Reply::Done {
                rounds: cost.rounds,
                bytes_sent: cost.bytes_sent,
            }
        }
        Ok(Err(e)) => {
            log.warn(
                "request.failed",
                &[("session", &session), ("secs", &secs), ("error", &e)],
            );
            error_reply(&e)
        }
        Err(e) => {
            log.warn("request.failed", &[("session", &session), ("error", &e)]);
            error(ErrorKind::Internal, "the request's worker failed")
        }
    };
    if !client_there {
        return Ok(false);
    }
    write_message(wr, &reply, &[]).await?;
    Ok(true)
}

/// Receives an owner's upload: its tensors in plan order, then assembles, loads and
/// saves the model.
async fn serve_upload(
    daemon: &Arc<Daemon>,
    h: UploadHeader,
    rd: &mut Reader,
    wr: &mut Writer,
) -> Result<(), ProtocolError> {
    let log = daemon.log;
    let refuse = |m: String| error(ErrorKind::Upload, m);
    if !daemon.cfg.accept_uploads {
        let reply = refuse("this server does not accept uploads (accept_uploads = false)".into());
        return write_message(wr, &reply, &[]).await.map(drop);
    }
    if h.name.is_empty()
        || h.name.len() > 64
        || !h
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        || h.name.starts_with('.')
    {
        let reply = refuse(format!(
            "the model name {:?} is not 1 to 64 letters, digits, '-', '_' or '.'",
            h.name
        ));
        return write_message(wr, &reply, &[]).await.map(drop);
    }
    let plan = match plan_of(&h.arch, &h.spec_json) {
        Ok(p) if p.tensors().len() as u64 == h.tensors => p,
        Ok(_) => {
            let reply = refuse("the tensor count does not match the spec".into());
            return write_message(wr, &reply, &[]).await.map(drop);
        }
        Err(e) => return write_message(wr, &refuse(e), &[]).await.map(drop),
    };
    log.info(
        "upload.start",
        &[("model", &h.name), ("tensors", &h.tensors)],
    );
    let me = daemon.server.me();
    let mut tensors = Vec::with_capacity(plan.tensors().len());
    for (stream, (name, len)) in (0u64..).zip(plan.tensors()) {
        let max = (*len as u64).saturating_mul(8).saturating_add(128);
        let Some((part, payload)) = read_message::<_, Request>(rd, max).await? else {
            return Err(ProtocolError::Io(std::io::ErrorKind::UnexpectedEof.into()));
        };
        let ok = matches!(&part, Request::UploadTensor { name: n, len: l } if n == name && *l == *len as u64);
        let dealt = if ok {
            decode_dealt(payload, *len).ok()
        } else {
            None
        };
        let Some(dealt) = dealt.filter(|d| d.party == me) else {
            let reply = refuse(format!(
                "tensor {stream} is not {name} of {len} elements for {me}"
            ));
            return write_message(wr, &reply, &[]).await.map(drop);
        };
        tensors.push(DealtTensor {
            name: name.clone(),
            len: *len,
            dealt,
        });
    }
    let hash = match read_message::<_, Request>(rd, 0).await? {
        Some((Request::UploadEnd { model_hash }, _)) => ModelHash::from_hex(&model_hash),
        _ => None,
    };
    let Some(hash) = hash else {
        let reply =
            refuse("the upload does not end with the model's hash after its tensors".into());
        return write_message(wr, &reply, &[]).await.map(drop);
    };
    let path = store_file(&daemon.store, &h.name);
    let installed = {
        let (server, h, path) = (Arc::clone(&daemon.server), h.clone(), path.clone());
        tokio::task::spawn_blocking(move || {
            server.install_upload(&h.name, &h.arch, &h.spec_json, hash, tensors, &path)
        })
        .await
    };
    let reply = match installed {
        Ok(Ok(())) => {
            log.info(
                "upload.done",
                &[("model", &h.name), ("store", &path.display())],
            );
            Reply::Uploaded {
                name: h.name.clone(),
                store: path.display().to_string(),
            }
        }
        Ok(Err(e)) => {
            log.warn("upload.failed", &[("model", &h.name), ("error", &e)]);
            error_reply(&e)
        }
        Err(_) => error(ErrorKind::Internal, "the upload's worker failed"),
    };
    write_message(wr, &reply, &[]).await.map(drop)
}
