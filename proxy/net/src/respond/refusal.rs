//! Refusing a connection before any request is read: one `429 Too Many Requests` with the
//! JSON reason, written straight to the socket, then the close.

use std::time::Duration;

use tokio::io::{AsyncWrite, AsyncWriteExt as _};

use super::{ProxyError, ERROR_HEADER};

/// Writes `error`'s answer (status 429, `content-type: application/json`, the
/// [`ERROR_HEADER`] with its code, the JSON body, `connection: close`) to `stream` and
/// shuts it down, giving up after `within`: a client that does not read gets nothing more.
pub async fn refuse_connection<T: AsyncWrite + Unpin>(
    mut stream: T,
    error: &ProxyError,
    within: Duration,
) {
    let body = error.body().to_string();
    let head = format!(
        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\n{ERROR_HEADER}: {}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        error.code(),
        body.len()
    );
    let write = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        stream.shutdown().await
    };
    let _ = tokio::time::timeout(within, write).await;
}
