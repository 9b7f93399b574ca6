//! `pods/portforward` over WebSocket (the channel protocol kube-rs's `Api::portforward` speaks):
//! per requested port i, data on channel 2i and errors on 2i+1, each opened by a frame carrying
//! the port (u16, little endian). Each connection reaches the handler a model registered on the
//! pod port as one end of a `tokio::io::duplex` pair.

use crate::backend::Backend;
use crate::exec::normal_close;
use axum::extract::ws::{Message, WebSocket};
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, WriteHalf};
use tokio::sync::mpsc;

fn frame(channel: u8, data: &[u8]) -> Message {
    let mut v = Vec::with_capacity(data.len() + 1);
    v.push(channel);
    v.extend_from_slice(data);
    Message::Binary(v.into())
}

/// Serves one upgraded port-forward connection for `ports` of a pod.
pub(crate) async fn serve_ws(
    socket: WebSocket,
    cluster: Backend,
    ns: String,
    pod: String,
    pod_uid: String,
    ports: Vec<u16>,
) {
    let (mut sink, mut stream) = socket.split();
    let (out_tx, mut out_rx) = mpsc::channel::<Message>(64);
    let writer = tokio::spawn(async move {
        while let Some(m) = out_rx.recv().await {
            let close = matches!(m, Message::Close(_));
            if sink.send(m).await.is_err() || close {
                break;
            }
        }
    });
    let (done_tx, mut done_rx) = mpsc::channel::<usize>(ports.len().max(1));
    let mut writers: Vec<Option<WriteHalf<DuplexStream>>> = vec![];
    for (i, port) in ports.iter().enumerate() {
        let data_ch = (2 * i) as u8;
        let _ = out_tx.send(frame(data_ch, &port.to_le_bytes())).await;
        let _ = out_tx.send(frame(data_ch + 1, &port.to_le_bytes())).await;
        match cluster.port_handler(&ns, &pod, *port) {
            Some(h) => {
                let (ours, theirs) = tokio::io::duplex(64 * 1024);
                h.connect(theirs);
                let (mut rd, wr) = tokio::io::split(ours);
                writers.push(Some(wr));
                let out = out_tx.clone();
                let done = done_tx.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 32 * 1024];
                    loop {
                        match rd.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                if out.send(frame(data_ch, &buf[..n])).await.is_err() {
                                    break;
                                }
                            }
                        }
                    }
                    let _ = done.send(i).await;
                });
            }
            None => {
                // The kubelet's answer when nothing listens on the port inside the pod.
                let msg = format!(
                    "error forwarding port {port} to pod {pod_uid}, uid : failed to connect to localhost:{port} inside namespace \"{ns}/{pod}\", IPv4: dial tcp4 127.0.0.1:{port}: connect: connection refused"
                );
                let _ = out_tx.send(frame(data_ch + 1, msg.as_bytes())).await;
                writers.push(None);
                let _ = done_tx.send(i).await;
            }
        }
    }
    let mut open = ports.len();
    loop {
        tokio::select! {
            biased;
            msg = stream.next() => match msg {
                Some(Ok(Message::Binary(b))) if b.len() > 1 => {
                    let i = (b[0] / 2) as usize;
                    if b[0] % 2 == 0 && let Some(Some(w)) = writers.get_mut(i) && w.write_all(&b[1..]).await.is_err() {
                        writers[i] = None;
                    }
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => {
                    for w in writers.iter_mut().flatten() {
                        let _ = w.shutdown().await;
                    }
                    break;
                }
                _ => {}
            },
            Some(_) = done_rx.recv() => {
                open -= 1;
                if open == 0 {
                    let _ = out_tx.send(normal_close()).await;
                    break;
                }
            }
        }
    }
    drop(out_tx);
    let _ = writer.await;
}
