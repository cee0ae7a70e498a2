//! The wire between a fence's relay and airlock's fence socket (docs/containment.md).
//!
//! Every connection on the socket opens with one hello: a big-endian `u16` length and
//! that many bytes of JSON ([`Hello`]). What follows depends on its `kind`:
//! - `proxy`: the bytes of a client that dialed the proxy variable (`CONNECT`, or
//!   absolute-form `http://`), served as the proxy listener serves them;
//! - `transparent`: the bytes of a connection the fence captured, whose original
//!   destination (`dst`) is a pool address airlock's DNS gave, or any other address;
//! - `dns`: DNS messages, each framed as over TCP (RFC 1035 §4.2.2: a `u16` length,
//!   then the message), answered in order.

use std::net::{Ipv4Addr, SocketAddr};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

/// The private pool names resolve into inside a fence: RFC 2544's benchmarking range
/// 198.18.0.0/15, which fake-IP resolvers commonly use. `198.18.0.1` is the fence's own
/// address on `lo`; answers start at `198.18.0.2`.
pub const POOL_BASE: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 0);
/// Prefix length of the pool (`/15`: 131,072 addresses).
pub const POOL_PREFIX: u8 = 15;

/// Whether `ip` lies in the pool.
pub fn in_pool(ip: Ipv4Addr) -> bool {
    u32::from(ip) >> (32 - POOL_PREFIX) == u32::from(POOL_BASE) >> (32 - POOL_PREFIX)
}

/// Longest hello accepted, in bytes.
pub const MAX_HELLO_BYTES: usize = 4096;

/// The first frame of a connection on the fence socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// The run the fence belongs to.
    pub run: String,
    /// The run's proxy token (what `Proxy-Authorization` carries elsewhere).
    pub token: String,
    /// What the connection carries.
    #[serde(flatten)]
    pub kind: Kind,
}

/// What a fence-socket connection carries after its hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Kind {
    /// A client of the proxy variable.
    Proxy,
    /// A captured connection and its original destination (`SO_ORIGINAL_DST`).
    Transparent {
        /// Where the client was connecting.
        dst: SocketAddr,
    },
    /// Framed DNS messages.
    Dns,
}

/// Why a hello or a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The connection failed or closed early.
    #[error("fence socket: {0}")]
    Io(#[from] std::io::Error),
    /// The hello was longer than [`MAX_HELLO_BYTES`].
    #[error("fence socket: a hello of {0} bytes is over the {MAX_HELLO_BYTES}-byte limit")]
    TooLong(usize),
    /// The hello was not the JSON of a [`Hello`].
    #[error("fence socket: the hello is not valid: {0}")]
    Invalid(#[from] serde_json::Error),
}

/// Writes `hello` as the connection's first frame.
///
/// # Errors
/// The write's error.
pub async fn write_hello<W: AsyncWrite + Unpin>(
    writer: &mut W,
    hello: &Hello,
) -> std::io::Result<()> {
    let json = serde_json::to_vec(hello).map_err(std::io::Error::other)?;
    write_frame(writer, &json).await
}

/// Reads the connection's hello.
///
/// # Errors
/// [`WireError`] when the connection fails, the frame is too long or not a hello.
pub async fn read_hello<R: AsyncRead + Unpin>(reader: &mut R) -> Result<Hello, WireError> {
    let len = reader.read_u16().await? as usize;
    if len > MAX_HELLO_BYTES {
        return Err(WireError::TooLong(len));
    }
    let mut json = vec![0u8; len];
    reader.read_exact(&mut json).await?;
    Ok(serde_json::from_slice(&json)?)
}

/// Writes one frame: a big-endian `u16` length, then `bytes` (at most 65,535 of them).
///
/// # Errors
/// `InvalidInput` for a longer frame; else the write's error.
pub async fn write_frame<W: AsyncWrite + Unpin>(
    writer: &mut W,
    bytes: &[u8],
) -> std::io::Result<()> {
    let len = u16::try_from(bytes.len()).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "a fence frame holds at most 65,535 bytes",
        )
    })?;
    let mut framed = Vec::with_capacity(bytes.len() + 2);
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(bytes);
    writer.write_all(&framed).await?;
    writer.flush().await
}

/// Reads one frame; `None` at a clean end of stream before its length.
///
/// # Errors
/// The read's error, or `UnexpectedEof` inside a frame.
pub async fn read_frame<R: AsyncRead + Unpin>(reader: &mut R) -> std::io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 2];
    match reader.read_exact(&mut len).await {
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(error) => return Err(error),
    }
    let mut bytes = vec![0u8; u16::from_be_bytes(len) as usize];
    reader.read_exact(&mut bytes).await?;
    Ok(Some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_is_198_18_0_0_slash_15() {
        assert!(in_pool(Ipv4Addr::new(198, 18, 0, 2)));
        assert!(in_pool(Ipv4Addr::new(198, 19, 255, 255)));
        assert!(!in_pool(Ipv4Addr::new(198, 20, 0, 0)));
        assert!(!in_pool(Ipv4Addr::new(127, 0, 0, 1)));
    }

    #[tokio::test]
    async fn a_hello_round_trips_and_an_oversized_one_is_refused() {
        let hello = Hello {
            run: "r".into(),
            token: "t".into(),
            kind: Kind::Transparent {
                dst: "198.18.0.2:443".parse().expect("addr"),
            },
        };
        let mut wire = Vec::new();
        write_hello(&mut wire, &hello).await.expect("write");
        assert!(String::from_utf8_lossy(&wire).contains(r#""kind":"transparent""#));
        assert_eq!(read_hello(&mut wire.as_slice()).await.expect("read"), hello);
        let mut long = vec![0xff, 0xff];
        long.extend(vec![b' '; 65535]);
        assert!(matches!(
            read_hello(&mut long.as_slice()).await,
            Err(WireError::TooLong(65535))
        ));
    }
}
