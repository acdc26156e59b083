//! A MongoDB proxy that injects faults into chosen commands, as `failCommand` does on a real
//! server (the stand-in has no fail points): it reads the wire protocol's `OP_MSG` frames both
//! ways, and a command that matches a [`Rule`] gets its [`Fault`]:
//! - [`Fault::LoseReply`]: the command is sent to the server and applied, then its answer is
//!   dropped and the connection closed (a primary that steps down or a network cut after the
//!   write: the client cannot know whether it applied);
//! - [`Fault::Error`]: the server never sees it; the client gets `{ok: 0, code, errmsg}`
//!   (`failCommand` with `errorCode`).
//! - [`Fault::Unconfirmed`]: the command is sent to the server and applied, and its answer
//!   gets a `writeConcernError` with code 64 (`WriteConcernFailed`, `wtimeout`): a write the
//!   primary applied whose wait for the majority timed out.
//! - [`Fault::Answer`]: the server never sees it; a read gets the documents given as its
//!   whole result: what a majority read that lags behind the primary answers (a document as
//!   it was before a write, or none for one just inserted).
//!
//! Every other frame passes unchanged, in order, including the monitoring connections'
//! streamed `hello` answers.
//!
//! Beside the `failCommand` failpoint (which the stand-in takes too, see `testkit`'s
//! `fail_commands`), this singles out one command by what it says (the
//! update that claims a usage batch, not the status writes around it) and drops an answer
//! after the write applied, which a failpoint cannot do (its `writeConcernError` comes
//! closest). It sits in front of any server, so a test of a whole system (services as they
//! run, on their own connections) uses it without naming their clients.
#![forbid(unsafe_code)]

use std::{
    collections::HashMap,
    io,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use bson::{Document, doc};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::mpsc,
};
use tokio_util::sync::CancellationToken;

/// `OP_MSG`, the only opcode the driver sends.
const OP_MSG: i32 = 2013;

/// A command as the client sent it: its name, the collection it names, its body (the
/// `OP_MSG` kind-0 section) and any document sequences (kind-1: `documents`, `updates`, ...).
#[derive(Debug, Clone)]
pub struct Command {
    /// The command's name (`update`, `insert`, `find`, ...).
    pub name: String,
    /// The collection it names, when its value is a string.
    pub collection: String,
    /// The body.
    pub body: Document,
    /// The document sequences, by identifier.
    pub sequences: Vec<(String, Vec<Document>)>,
}

impl Command {
    /// The documents under `field`: from the body's array or from a sequence of that name.
    pub fn documents(&self, field: &str) -> Vec<Document> {
        let mut found: Vec<Document> = self
            .body
            .get_array(field)
            .map(|items| items.iter().filter_map(|i| i.as_document().cloned()).collect())
            .unwrap_or_default();
        for (name, docs) in &self.sequences {
            if name == field {
                found.extend(docs.iter().cloned());
            }
        }
        found
    }

    /// The read concern level the command asks for (`majority`, `local`, ...), if any.
    pub fn read_concern(&self) -> Option<&str> {
        self.body.get_document("readConcern").ok()?.get_str("level").ok()
    }

    /// The `_id` this command reads by, if it is a `find` by `_id` alone (as a value) that is
    /// not `local`: one a majority snapshot lagging behind the primary answers.
    pub fn lagging_read_by_id(&self) -> Option<bson::Bson> {
        if self.name != "find" || self.read_concern() == Some("local") {
            return None;
        }
        let filter = self.body.get_document("filter").ok()?;
        if filter.len() != 1 {
            return None;
        }
        filter.get("_id").filter(|id| !matches!(id, bson::Bson::Document(_))).cloned()
    }

    /// Whether the command's text (its body and sequences, as relaxed extended JSON) contains
    /// `needle`: a quick way to single out, say, the update that sets `usage.writer`.
    pub fn mentions(&self, needle: &str) -> bool {
        let body = bson::Bson::Document(self.body.clone()).into_relaxed_extjson().to_string();
        body.contains(needle)
            || self
                .sequences
                .iter()
                .flat_map(|(_, docs)| docs)
                .any(|d| bson::Bson::Document(d.clone()).into_relaxed_extjson().to_string().contains(needle))
    }
}

/// What a matched command gets.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Applied by the server, its answer dropped and the connection closed.
    LoseReply,
    /// Not sent; answered `{ok: 0, code, errmsg}`.
    Error {
        /// The error code (for example 91 `ShutdownInProgress`, 189 `PrimarySteppedDown`).
        code: i32,
    },
    /// Applied by the server; its answer carries `writeConcernError` code 64.
    Unconfirmed,
    /// Not sent; a `find` answered with these documents as its only batch.
    Answer(Vec<Document>),
}

/// Which commands get a fault, and how many times.
pub struct Rule {
    matches: Box<dyn Fn(&Command) -> bool + Send + Sync>,
    fault: Fault,
    times: usize,
}

/// The faults still to inject, and what was injected.
#[derive(Default)]
struct Faults {
    rules: Vec<Rule>,
    /// The matched commands, in order (name and collection).
    injected: Vec<(String, String)>,
    /// How long majority reads miss a document whose insert was [`Fault::Unconfirmed`]
    /// ([`MongoFaults::lag_unconfirmed_inserts`]); none by default.
    lag: Option<Duration>,
    /// Those documents: collection, `_id`, and until when they are missed.
    missed: Vec<(String, bson::Bson, std::time::Instant)>,
    /// Majority reads answered as missing one of them.
    lagged: usize,
}

/// A running proxy to one MongoDB server.
pub struct MongoFaults {
    addr: SocketAddr,
    faults: Arc<Mutex<Faults>>,
    stop: CancellationToken,
}

impl MongoFaults {
    /// Proxies a new loopback port to `target` (`host:port`).
    pub async fn start(target: String) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let faults = Arc::new(Mutex::new(Faults::default()));
        let stop = CancellationToken::new();
        let (shared, token) = (faults.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                let (client, _) = tokio::select! {
                    _ = token.cancelled() => return,
                    accepted = listener.accept() => match accepted {
                        Ok(conn) => conn,
                        Err(_) => continue,
                    },
                };
                let (target, faults, closed) = (target.clone(), shared.clone(), token.child_token());
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(&target).await {
                        connection(client, server, faults, closed).await;
                    }
                });
            }
        });
        Ok(Self { addr, faults, stop })
    }

    /// The proxy's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `uri` (`mongodb://[user@]host:port[/...]`, the address it proxies) with its host and
    /// port replaced by the proxy's.
    pub fn uri(&self, uri: &str) -> String {
        uri.replacen(host_port(uri), &self.addr.to_string(), 1)
    }

    /// Gives the next `times` commands that `matches` accepts `fault`.
    pub fn inject(&self, times: usize, fault: Fault, matches: impl Fn(&Command) -> bool + Send + Sync + 'static) {
        lock(&self.faults).rules.push(Rule { matches: Box::new(matches), fault, times });
    }

    /// From now on, a document whose `insert` got [`Fault::Unconfirmed`] is missing for `lag`
    /// from every read by `_id` that is not `local`: a majority snapshot lagging behind the
    /// primary, which has the insert. (Updates cannot be shown as they were before: the proxy
    /// does not know it.)
    pub fn lag_unconfirmed_inserts(&self, lag: Duration) {
        lock(&self.faults).lag = Some(lag);
    }

    /// How many reads were answered as a lagging majority snapshot would.
    pub fn lagged(&self) -> usize {
        lock(&self.faults).lagged
    }

    /// The commands that got a fault so far (name and collection), in order.
    pub fn injected(&self) -> Vec<(String, String)> {
        lock(&self.faults).injected.clone()
    }
}

/// The `host:port` a `mongodb://[user@]host:port[/...]` URI names.
pub fn host_port(uri: &str) -> &str {
    let rest = uri.split_once("://").map_or(uri, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    rest.split(['/', '?']).next().unwrap_or(rest)
}

impl Drop for MongoFaults {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The fault the first matching rule gives `command` (using one of its times), if any.
fn fault_for(faults: &Mutex<Faults>, command: &Command) -> Option<Fault> {
    let mut faults = lock(faults);
    let now = std::time::Instant::now();
    faults.missed.retain(|(_, _, until)| *until > now);
    if let Some(id) = command.lagging_read_by_id()
        && faults.missed.iter().any(|(coll, missed, _)| *coll == command.collection && *missed == id)
    {
        faults.lagged += 1;
        return Some(Fault::Answer(Vec::new()));
    }
    let rule = faults.rules.iter_mut().find(|r| r.times > 0 && (r.matches)(command))?;
    rule.times -= 1;
    let fault = rule.fault.clone();
    faults.injected.push((command.name.clone(), command.collection.clone()));
    if let (Fault::Unconfirmed, Some(lag)) = (&fault, faults.lag)
        && command.name == "insert"
    {
        let ids: Vec<_> = command.documents("documents").iter().filter_map(|d| d.get("_id").cloned()).collect();
        let collection = command.collection.clone();
        faults.missed.extend(ids.into_iter().map(|id| (collection.clone(), id, now + lag)));
    }
    Some(fault)
}

/// Carries one client connection: frames up to the server (or answered here), frames down to
/// the client (or dropped, closing both).
async fn connection(client: TcpStream, server: TcpStream, faults: Arc<Mutex<Faults>>, closed: CancellationToken) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    // Frames for the client, from the server or made here, written by one task.
    let (to_client, mut outgoing) = mpsc::unbounded_channel::<Vec<u8>>();
    // What becomes of the answers to faulted commands the server runs, by request id.
    let pending: Arc<Mutex<HashMap<i32, Fault>>> = Arc::default();
    let writer = async {
        while let Some(frame) = outgoing.recv().await {
            if client_write.write_all(&frame).await.is_err() {
                return;
            }
        }
    };
    let up = {
        let (to_client, pending) = (to_client.clone(), pending.clone());
        async move {
            while let Ok(frame) = read_frame(&mut client_read).await {
                let request_id = i32_at(&frame, 4);
                let command = command_of(&frame);
                let fault = command.as_ref().and_then(|c| fault_for(&faults, c));
                match fault {
                    Some(Fault::Error { code }) => {
                        let _ = to_client.send(error_reply(request_id, code));
                        continue;
                    }
                    Some(Fault::Answer(documents)) => {
                        let ns = command.as_ref().map(namespace).unwrap_or_default();
                        let _ = to_client.send(answer_reply(request_id, documents, ns));
                        continue;
                    }
                    Some(fault @ (Fault::LoseReply | Fault::Unconfirmed)) => {
                        lock(&pending).insert(request_id, fault);
                    }
                    None => {}
                }
                if server_write.write_all(&frame).await.is_err() {
                    return;
                }
            }
        }
    };
    let down = async move {
        while let Ok(frame) = read_frame(&mut server_read).await {
            let frame = match lock(&pending).remove(&i32_at(&frame, 8)) {
                Some(Fault::LoseReply) => return, // the answer is lost, and the connection with it
                Some(Fault::Unconfirmed) => unconfirmed(&frame).unwrap_or(frame),
                _ => frame,
            };
            if to_client.send(frame).is_err() {
                return;
            }
        }
    };
    tokio::select! {
        _ = closed.cancelled() => {}
        _ = writer => {}
        _ = up => {}
        _ = down => {}
    }
}

/// One whole wire-protocol message.
async fn read_frame(from: &mut (impl tokio::io::AsyncRead + Unpin)) -> io::Result<Vec<u8>> {
    let mut length = [0u8; 4];
    from.read_exact(&mut length).await?;
    let total = usize::try_from(i32::from_le_bytes(length)).map_err(|_| io::ErrorKind::InvalidData)?;
    if !(16..=64 * 1024 * 1024).contains(&total) {
        return Err(io::ErrorKind::InvalidData.into());
    }
    let mut frame = vec![0u8; total];
    frame[..4].copy_from_slice(&length);
    from.read_exact(&mut frame[4..]).await?;
    Ok(frame)
}

fn i32_at(frame: &[u8], at: usize) -> i32 {
    frame.get(at..at + 4).and_then(|b| b.try_into().ok()).map_or(0, i32::from_le_bytes)
}

/// The command an `OP_MSG` frame carries.
fn command_of(frame: &[u8]) -> Option<Command> {
    if i32_at(frame, 12) != OP_MSG {
        return None;
    }
    let flags = u32::from_le_bytes(frame.get(16..20)?.try_into().ok()?);
    let end = if flags & 1 == 1 { frame.len().checked_sub(4)? } else { frame.len() };
    let mut at = 20;
    let (mut body, mut sequences) = (None, Vec::new());
    while at < end {
        let kind = *frame.get(at)?;
        at += 1;
        let size = usize::try_from(i32_at(frame, at)).ok()?;
        match kind {
            0 => {
                body = Some(Document::from_reader(&mut frame.get(at..at + size)?).ok()?);
                at += size;
            }
            1 => {
                let section = frame.get(at + 4..at + size)?;
                let name_end = section.iter().position(|b| *b == 0)?;
                let name = String::from_utf8_lossy(&section[..name_end]).into_owned();
                let mut docs = Vec::new();
                let mut rest = &section[name_end + 1..];
                while !rest.is_empty() {
                    docs.push(Document::from_reader(&mut rest).ok()?);
                }
                sequences.push((name, docs));
                at += size;
            }
            _ => return None,
        }
    }
    let body = body?;
    let (name, value) = body.iter().next()?;
    let collection = value.as_str().unwrap_or_default().to_owned();
    Some(Command { name: name.clone(), collection, body, sequences })
}

/// An `OP_MSG` answer to `request_id`: `{ok: 0, code, errmsg}`.
fn error_reply(request_id: i32, code: i32) -> Vec<u8> {
    let reply =
        doc! { "ok": 0.0, "code": code, "errmsg": format!("injected fault {code}"), "codeName": "InjectedFault" };
    reply_frame(request_id, &reply)
}

/// `db.collection` of a command.
fn namespace(command: &Command) -> String {
    format!("{}.{}", command.body.get_str("$db").unwrap_or_default(), command.collection)
}

/// An `OP_MSG` answer to the read `request_id` on `ns`: `documents` as its one and last batch.
fn answer_reply(request_id: i32, documents: Vec<Document>, ns: String) -> Vec<u8> {
    let reply = doc! { "cursor": { "firstBatch": documents, "id": 0_i64, "ns": ns }, "ok": 1.0 };
    reply_frame(request_id, &reply)
}

/// The server's answer `frame` (an `OP_MSG` with one body section) with a `writeConcernError`
/// code 64 added, as a primary answers a write whose wait for the majority timed out.
fn unconfirmed(frame: &[u8]) -> Option<Vec<u8>> {
    if i32_at(frame, 12) != OP_MSG || *frame.get(20)? != 0 {
        return None;
    }
    let mut reply = Document::from_reader(&mut frame.get(21..)?).ok()?;
    reply.insert(
        "writeConcernError",
        doc! { "code": 64, "codeName": "WriteConcernFailed", "errmsg": "waiting for replication timed out", "errInfo": { "wtimeout": true } },
    );
    let mut answer = reply_frame(i32_at(frame, 8), &reply);
    answer[4..8].copy_from_slice(&frame[4..8]);
    Some(answer)
}

/// An `OP_MSG` frame answering `request_id` with `reply`.
fn reply_frame(request_id: i32, reply: &Document) -> Vec<u8> {
    let mut body = Vec::new();
    reply.to_writer(&mut body).expect("a document serializes");
    let total = 16 + 4 + 1 + body.len();
    let mut frame = Vec::with_capacity(total);
    frame.extend_from_slice(&i32::try_from(total).unwrap_or(i32::MAX).to_le_bytes());
    frame.extend_from_slice(&(request_id.wrapping_add(1_000_000)).to_le_bytes());
    frame.extend_from_slice(&request_id.to_le_bytes());
    frame.extend_from_slice(&OP_MSG.to_le_bytes());
    frame.extend_from_slice(&0u32.to_le_bytes());
    frame.push(0);
    frame.extend_from_slice(&body);
    frame
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_uri_names_the_proxy_instead_of_the_server() {
        let proxy = MongoFaults::start("127.0.0.1:1".into()).await.expect("proxy");
        let uri = proxy.uri("mongodb://u:p@127.0.0.1:27017/db?w=1");
        assert_eq!(uri, format!("mongodb://u:p@{}/db?w=1", proxy.addr()));
    }

    fn op_msg(body: &Document, sequence: Option<(&str, &[Document])>) -> Vec<u8> {
        let mut sections = vec![0u8];
        body.to_writer(&mut sections).expect("body");
        if let Some((name, docs)) = sequence {
            let mut section = Vec::new();
            section.extend_from_slice(name.as_bytes());
            section.push(0);
            for d in docs {
                d.to_writer(&mut section).expect("doc");
            }
            sections.push(1);
            sections.extend_from_slice(&i32::try_from(section.len() + 4).expect("size").to_le_bytes());
            sections.extend_from_slice(&section);
        }
        let total = 20 + sections.len();
        let mut frame = Vec::new();
        for n in [i32::try_from(total).expect("size"), 7, 0, OP_MSG] {
            frame.extend_from_slice(&n.to_le_bytes());
        }
        frame.extend_from_slice(&0u32.to_le_bytes());
        frame.extend_from_slice(&sections);
        frame
    }

    #[test]
    fn a_command_is_read_with_its_collection_body_and_sequences() {
        let updates = [doc! { "q": { "_id": "a" }, "u": { "$set": { "usage.writer": "w" } } }];
        let frame = op_msg(&doc! { "update": "predictions", "$db": "x" }, Some(("updates", &updates)));
        let command = command_of(&frame).expect("a command");
        assert_eq!((command.name.as_str(), command.collection.as_str()), ("update", "predictions"));
        assert_eq!(command.documents("updates").len(), 1);
        assert!(command.mentions("usage.writer"));
        assert!(!command.mentions("usage.seq"));
    }

    #[test]
    fn an_injected_error_answers_the_request_it_replaces() {
        let reply = error_reply(7, 91);
        assert_eq!((i32_at(&reply, 0) as usize, i32_at(&reply, 8), i32_at(&reply, 12)), (reply.len(), 7, OP_MSG));
        let body = Document::from_reader(&mut &reply[21..]).expect("a document");
        assert_eq!((body.get_f64("ok"), body.get_i32("code")), (Ok(0.0), Ok(91)));
    }
}
