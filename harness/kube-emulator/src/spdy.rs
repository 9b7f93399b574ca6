//! `pods/portforward` in kubectl's form (docs/upstream-facts.md F12.5): SPDY/3.1, either tunnelled
//! in binary WebSocket messages (subprotocol `SPDY/3.1+portforward.k8s.io`, kubectl's first
//! choice) or on a plain `Upgrade: SPDY/3.1` connection (its fallback). The URL names no port:
//! each forwarded connection is a pair of client-initiated streams, `error` then `data`, whose
//! headers carry `port` and `requestID`. The data stream reaches the handler a model registered
//! on the pod port, as the WebSocket channel form in [`crate::portforward`] does.
//!
//! Only what port-forwarding uses is implemented: SYN_STREAM (answered by an empty SYN_REPLY),
//! DATA with FIN, RST_STREAM, PING (echoed) and GOAWAY; SETTINGS and WINDOW_UPDATE are read and
//! ignored (the client does no flow control either).

use crate::backend::Backend;
use bytes::{Buf, BytesMut};
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};
use std::collections::BTreeMap;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, WriteHalf};
use tokio::sync::mpsc;

/// The WebSocket subprotocol of kubectl's tunnelled port-forward.
pub(crate) const TUNNEL_PROTOCOL: &str = "SPDY/3.1+portforward.k8s.io";
/// The protocol named in `X-Stream-Protocol-Version` on a plain SPDY upgrade.
pub(crate) const PORTFORWARD_PROTOCOL: &str = "portforward.k8s.io";

const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const FLAG_FIN: u8 = 0x01;
/// Largest DATA payload sent at once.
const CHUNK: usize = 32 * 1024;

/// The SPDY/3 header compression dictionary (draft-mbelshe-httpbis-spdy-00 §2.6.10.1): the
/// length-prefixed header names and values, then a run of common strings.
pub(crate) fn dictionary() -> Vec<u8> {
    const NAMES: &[&str] = &[
        "options",
        "head",
        "post",
        "put",
        "delete",
        "trace",
        "accept",
        "accept-charset",
        "accept-encoding",
        "accept-language",
        "accept-ranges",
        "age",
        "allow",
        "authorization",
        "cache-control",
        "connection",
        "content-base",
        "content-encoding",
        "content-language",
        "content-length",
        "content-location",
        "content-md5",
        "content-range",
        "content-type",
        "date",
        "etag",
        "expect",
        "expires",
        "from",
        "host",
        "if-match",
        "if-modified-since",
        "if-none-match",
        "if-range",
        "if-unmodified-since",
        "last-modified",
        "location",
        "max-forwards",
        "pragma",
        "proxy-authenticate",
        "proxy-authorization",
        "range",
        "referer",
        "retry-after",
        "server",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "user-agent",
        "vary",
        "via",
        "warning",
        "www-authenticate",
        "method",
        "get",
        "status",
        "200 OK",
        "version",
        "HTTP/1.1",
        "url",
        "public",
        "set-cookie",
        "keep-alive",
        "origin",
    ];
    const TAIL: &str = concat!(
        "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505",
        "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request",
        "401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented",
        "503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, ",
        "Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/gif,",
        "application/xml,application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age=",
        "gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.",
    );
    let mut d = Vec::with_capacity(1423);
    for n in NAMES {
        d.extend_from_slice(&(n.len() as u32).to_be_bytes());
        d.extend_from_slice(n.as_bytes());
    }
    d.extend_from_slice(TAIL.as_bytes());
    d
}

/// One direction's header compression context (one zlib stream for the whole connection).
struct HeaderCodec {
    dict: Vec<u8>,
    inflate: Decompress,
    deflate: Compress,
}

impl HeaderCodec {
    fn new() -> Self {
        let dict = dictionary();
        let mut deflate = Compress::new(Compression::default(), true);
        // A fresh stream accepts a preset dictionary; it cannot fail here.
        let _ = deflate.set_dictionary(&dict);
        Self {
            dict,
            inflate: Decompress::new(true),
            deflate,
        }
    }

    /// Inflates one header block (the client flushes its compressor after each).
    fn decode(&mut self, input: &[u8]) -> Result<Vec<(String, Vec<String>)>, String> {
        let mut out = Vec::with_capacity(1024);
        let mut pos = 0;
        loop {
            out.reserve(1024);
            let (in0, out0) = (self.inflate.total_in(), out.len());
            let r = self
                .inflate
                .decompress_vec(&input[pos..], &mut out, FlushDecompress::Sync);
            pos += (self.inflate.total_in() - in0) as usize;
            match r {
                Ok(_) => {}
                Err(e) if e.needs_dictionary().is_some() => {
                    self.inflate
                        .set_dictionary(&self.dict)
                        .map_err(|e| format!("header dictionary: {e}"))?;
                    continue;
                }
                Err(e) => return Err(format!("header block: {e}")),
            }
            let progressed = pos > 0 && self.inflate.total_in() > in0 || out.len() > out0;
            if (pos >= input.len() && out.len() < out.capacity()) || !progressed {
                break;
            }
        }
        parse_headers(&out)
    }

    /// Deflates a header block (sync-flushed so the client can read it at once).
    fn encode(&mut self, headers: &[(&str, &str)]) -> Vec<u8> {
        let mut plain = (headers.len() as u32).to_be_bytes().to_vec();
        for (k, v) in headers {
            for s in [k, v] {
                plain.extend_from_slice(&(s.len() as u32).to_be_bytes());
                plain.extend_from_slice(s.as_bytes());
            }
        }
        let mut out = Vec::with_capacity(plain.len() + 64);
        let mut pos = 0;
        loop {
            out.reserve(256);
            let before = self.deflate.total_in();
            let _ = self
                .deflate
                .compress_vec(&plain[pos..], &mut out, FlushCompress::Sync);
            pos += (self.deflate.total_in() - before) as usize;
            if pos >= plain.len() && out.len() < out.capacity() {
                break;
            }
        }
        out
    }
}

fn parse_headers(b: &[u8]) -> Result<Vec<(String, Vec<String>)>, String> {
    let mut b = b;
    let bad = || "malformed header block".to_string();
    let take = |b: &mut &[u8]| -> Result<Vec<u8>, String> {
        if b.len() < 4 {
            return Err(bad());
        }
        let n = b.get_u32() as usize;
        if b.len() < n {
            return Err(bad());
        }
        let v = b[..n].to_vec();
        b.advance(n);
        Ok(v)
    };
    if b.len() < 4 {
        return Err(bad());
    }
    let count = b.get_u32();
    let mut out = vec![];
    for _ in 0..count {
        let k = String::from_utf8_lossy(&take(&mut b)?).to_lowercase();
        let v = take(&mut b)?;
        let vals = v
            .split(|c| *c == 0)
            .map(|x| String::from_utf8_lossy(x).into_owned())
            .collect();
        out.push((k, vals));
    }
    Ok(out)
}

fn control(type_: u16, flags: u8, data: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(8 + data.len());
    f.extend_from_slice(&(0x8003u16).to_be_bytes());
    f.extend_from_slice(&type_.to_be_bytes());
    f.push(flags);
    f.extend_from_slice(&(data.len() as u32).to_be_bytes()[1..]);
    f.extend_from_slice(data);
    f
}

fn data_frame(stream: u32, flags: u8, data: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(8 + data.len());
    f.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    f.push(flags);
    f.extend_from_slice(&(data.len() as u32).to_be_bytes()[1..]);
    f.extend_from_slice(data);
    f
}

/// One parsed frame.
enum Frame {
    Control {
        type_: u16,
        data: Vec<u8>,
        raw: Vec<u8>,
    },
    Data {
        stream: u32,
        fin: bool,
        data: Vec<u8>,
    },
}

/// Takes one whole frame off the front of `buf`, if it holds one.
fn next_frame(buf: &mut BytesMut) -> Option<Frame> {
    if buf.len() < 8 {
        return None;
    }
    let len = u32::from_be_bytes([0, buf[5], buf[6], buf[7]]) as usize;
    if buf.len() < 8 + len {
        return None;
    }
    let raw = buf.split_to(8 + len);
    let data = raw[8..].to_vec();
    Some(if raw[0] & 0x80 != 0 {
        Frame::Control {
            type_: u16::from_be_bytes([raw[2], raw[3]]),
            data,
            raw: raw.to_vec(),
        }
    } else {
        Frame::Data {
            stream: u32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]) & 0x7fff_ffff,
            fin: raw[4] & FLAG_FIN != 0,
            data,
        }
    })
}

/// A forwarded connection: its two streams and, once both exist, the pod port's stream.
#[derive(Default)]
struct Forward {
    error: Option<u32>,
    data: Option<u32>,
    port: u16,
    writer: Option<WriteHalf<DuplexStream>>,
}

/// Serves one SPDY session: `input` yields the client's bytes as they arrive (frames may be
/// split anywhere), `output` takes whole frames. Ends when the input ends or the client says
/// GOAWAY.
pub(crate) async fn serve(
    mut input: mpsc::Receiver<Vec<u8>>,
    output: mpsc::Sender<Vec<u8>>,
    cluster: Backend,
    ns: String,
    pod: String,
    pod_uid: String,
) {
    let mut codec = HeaderCodec::new();
    let mut buf = BytesMut::new();
    // requestID → forward; stream id → requestID.
    let mut forwards: BTreeMap<String, Forward> = BTreeMap::new();
    let mut streams: BTreeMap<u32, String> = BTreeMap::new();
    while let Some(chunk) = input.recv().await {
        buf.extend_from_slice(&chunk);
        while let Some(frame) = next_frame(&mut buf) {
            match frame {
                Frame::Control { type_, data, raw } => match type_ {
                    SYN_STREAM if data.len() >= 10 => {
                        let id =
                            u32::from_be_bytes([data[0], data[1], data[2], data[3]]) & 0x7fff_ffff;
                        let headers = match codec.decode(&data[10..]) {
                            Ok(h) => h,
                            Err(e) => {
                                tracing::debug!(%e, "port-forward: unreadable SYN_STREAM");
                                return;
                            }
                        };
                        let get = |k: &str| {
                            headers
                                .iter()
                                .find(|(n, _)| n == k)
                                .and_then(|(_, v)| v.first().cloned())
                                .unwrap_or_default()
                        };
                        let reply = codec.encode(&[]);
                        let mut body = id.to_be_bytes().to_vec();
                        body.extend_from_slice(&reply);
                        if output.send(control(SYN_REPLY, 0, &body)).await.is_err() {
                            return;
                        }
                        let request = get("requestid");
                        let port = get("port").parse::<u16>().unwrap_or(0);
                        streams.insert(id, request.clone());
                        let f = forwards.entry(request).or_default();
                        f.port = port;
                        match get("streamtype").as_str() {
                            "error" => f.error = Some(id),
                            "data" => f.data = Some(id),
                            _ => {}
                        }
                        if let (Some(err), Some(data)) = (f.error, f.data)
                            && f.writer.is_none()
                        {
                            f.writer =
                                connect(&cluster, &ns, &pod, &pod_uid, port, err, data, &output)
                                    .await;
                        }
                    }
                    PING if output.send(raw).await.is_err() => return,
                    RST_STREAM if data.len() >= 4 => {
                        let id =
                            u32::from_be_bytes([data[0], data[1], data[2], data[3]]) & 0x7fff_ffff;
                        close_stream(&mut forwards, &streams, id).await;
                    }
                    GOAWAY => return,
                    _ => {}
                },
                Frame::Data { stream, fin, data } => {
                    let Some(f) = streams.get(&stream).and_then(|r| forwards.get_mut(r)) else {
                        continue;
                    };
                    if f.data != Some(stream) {
                        continue;
                    }
                    if let Some(w) = f.writer.as_mut()
                        && !data.is_empty()
                        && w.write_all(&data).await.is_err()
                    {
                        f.writer = None;
                    }
                    if fin {
                        close_stream(&mut forwards, &streams, stream).await;
                    }
                }
            }
        }
    }
    for f in forwards.values_mut() {
        if let Some(mut w) = f.writer.take() {
            let _ = w.shutdown().await;
        }
    }
}

async fn close_stream(
    forwards: &mut BTreeMap<String, Forward>,
    streams: &BTreeMap<u32, String>,
    id: u32,
) {
    if let Some(f) = streams.get(&id).and_then(|r| forwards.get_mut(r))
        && f.data == Some(id)
        && let Some(mut w) = f.writer.take()
    {
        let _ = w.shutdown().await;
    }
}

/// Connects a forward's data stream to the pod port. The pod's bytes go out as DATA frames; at
/// their end both streams are finished. When nothing listens on the port the error stream
/// carries the kubelet's message instead. Returns the writer towards the pod port.
#[allow(clippy::too_many_arguments)]
async fn connect(
    cluster: &Backend,
    ns: &str,
    pod: &str,
    pod_uid: &str,
    port: u16,
    error_stream: u32,
    data_stream: u32,
    output: &mpsc::Sender<Vec<u8>>,
) -> Option<WriteHalf<DuplexStream>> {
    let Some(h) = cluster.port_handler(ns, pod, port) else {
        let msg = format!(
            "error forwarding port {port} to pod {pod_uid}, uid : failed to connect to localhost:{port} inside namespace \"{ns}/{pod}\", IPv4: dial tcp4 127.0.0.1:{port}: connect: connection refused"
        );
        let _ = output
            .send(data_frame(error_stream, FLAG_FIN, msg.as_bytes()))
            .await;
        let _ = output.send(data_frame(data_stream, FLAG_FIN, &[])).await;
        return None;
    };
    let (ours, theirs) = tokio::io::duplex(64 * 1024);
    h.connect(theirs);
    let (mut rd, wr) = tokio::io::split(ours);
    let out = output.clone();
    tokio::spawn(async move {
        let mut b = vec![0u8; CHUNK];
        loop {
            match rd.read(&mut b).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if out.send(data_frame(data_stream, 0, &b[..n])).await.is_err() {
                        return;
                    }
                }
            }
        }
        let _ = out.send(data_frame(data_stream, FLAG_FIN, &[])).await;
        let _ = out.send(data_frame(error_stream, FLAG_FIN, &[])).await;
    });
    Some(wr)
}

/// The SPDY session of kubectl's WebSocket tunnel: the byte stream is carried in binary
/// messages, split anywhere.
pub(crate) async fn serve_ws(
    socket: axum::extract::ws::WebSocket,
    cluster: Backend,
    ns: String,
    pod: String,
    pod_uid: String,
) {
    use axum::extract::ws::Message;
    use futures::{SinkExt, StreamExt};
    let (in_tx, in_rx) = mpsc::channel::<Vec<u8>>(64);
    let (out_tx, mut out_rx) = mpsc::channel::<Vec<u8>>(64);
    tokio::spawn(serve(in_rx, out_tx, cluster, ns, pod, pod_uid));
    let (mut sink, mut stream) = socket.split();
    loop {
        tokio::select! {
            biased;
            frame = out_rx.recv() => match frame {
                Some(f) => {
                    if sink.send(Message::Binary(f.into())).await.is_err() {
                        break;
                    }
                }
                None => {
                    let _ = sink.send(crate::exec::normal_close()).await;
                    break;
                }
            },
            msg = stream.next() => match msg {
                Some(Ok(Message::Binary(b))) if in_tx.send(b.to_vec()).await.is_err() => break,
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                _ => {}
            },
        }
    }
}

/// The SPDY session of a plain `Upgrade: SPDY/3.1` connection (kubectl's fallback).
pub(crate) async fn serve_upgraded<IO>(
    io: IO,
    cluster: Backend,
    ns: String,
    pod: String,
    pod_uid: String,
) where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
{
    let (mut rd, mut wr) = tokio::io::split(io);
    let (in_tx, in_rx) = mpsc::channel::<Vec<u8>>(64);
    let (out_tx, mut out_rx) = mpsc::channel::<Vec<u8>>(64);
    tokio::spawn(serve(in_rx, out_tx, cluster, ns, pod, pod_uid));
    let writer = tokio::spawn(async move {
        while let Some(f) = out_rx.recv().await {
            if wr.write_all(&f).await.is_err() {
                break;
            }
        }
        let _ = wr.shutdown().await;
    });
    let mut b = vec![0u8; CHUNK];
    loop {
        match rd.read(&mut b).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if in_tx.send(b[..n].to_vec()).await.is_err() {
                    break;
                }
            }
        }
    }
    drop(in_tx);
    let _ = writer.await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Adler-32, as zlib puts it in a stream header that names a preset dictionary.
    fn adler32(d: &[u8]) -> u32 {
        let (mut a, mut b) = (1u32, 0u32);
        for x in d {
            a = (a + u32::from(*x)) % 65521;
            b = (b + a) % 65521;
        }
        (b << 16) | a
    }

    #[test]
    fn the_header_dictionary_is_the_one_spdy_3_peers_use() {
        let d = dictionary();
        // Every SPDY/3 header block starts with a zlib header naming this dictionary id.
        assert_eq!(d.len(), 1423);
        assert_eq!(adler32(&d), 0xe3c6_a7c2);
    }

    #[test]
    fn header_blocks_round_trip_through_one_compression_context_per_direction() {
        let mut client = HeaderCodec::new();
        let mut server = HeaderCodec::new();
        for (t, id) in [("error", "0"), ("data", "0"), ("error", "1")] {
            let block = client.encode(&[("streamType", t), ("port", "8080"), ("requestID", id)]);
            let h = server.decode(&block).unwrap();
            assert_eq!(h[0], ("streamtype".to_string(), vec![t.to_string()]));
            assert_eq!(h[1].1, vec!["8080".to_string()]);
            assert_eq!(h[2].1, vec![id.to_string()]);
        }
    }

    #[test]
    fn frames_split_anywhere_are_reassembled() {
        let mut all = control(PING, 0, &7u32.to_be_bytes());
        all.extend(data_frame(3, FLAG_FIN, b"hello"));
        let mut buf = BytesMut::new();
        let mut got = vec![];
        for b in all {
            buf.extend_from_slice(&[b]);
            while let Some(f) = next_frame(&mut buf) {
                got.push(f);
            }
        }
        assert!(matches!(&got[0], Frame::Control { type_: PING, .. }));
        assert!(matches!(&got[1], Frame::Data { stream: 3, fin: true, data } if data == b"hello"));
    }
}
