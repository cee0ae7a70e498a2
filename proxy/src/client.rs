//! A small client of the admin API, used by the CLI and the demo.

use bytes::Bytes;
use http::{header, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

/// Errors talking to the admin API.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The admin listener could not be reached.
    #[error("cannot reach the admin API at {url}: {reason}")]
    Connect {
        /// The URL.
        url: String,
        /// What failed.
        reason: String,
    },
    /// The API answered with an error.
    #[error("{message} ({code}, HTTP {status})")]
    Api {
        /// HTTP status.
        status: u16,
        /// Stable error code (the body's `reason_code`).
        code: String,
        /// What happened (the body's `reason`).
        message: String,
        /// Extra details, if any.
        details: Option<Value>,
    },
    /// Writing a streamed answer failed.
    #[error("cannot write the answer of {url}: {source}")]
    Write {
        /// The URL.
        url: String,
        /// The write's error.
        source: std::io::Error,
    },
    /// The answer was not the JSON expected.
    #[error("the admin API at {url} answered with something that is not JSON")]
    Decode {
        /// The URL.
        url: String,
    },
}

/// A client of one admin listener.
#[derive(Clone)]
pub struct AdminClient {
    base: String,
    token: String,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl AdminClient {
    /// A client of the admin API at `base` (`http://127.0.0.1:8081`) with bearer `token`.
    pub fn new(base: &str, token: &str) -> Self {
        Self {
            base: base.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    /// The base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<(StatusCode, Bytes), ClientError> {
        let payload = body.map(|b| b.to_string()).unwrap_or_default();
        self.send_raw(method, path, "application/json", payload)
            .await
    }

    async fn send_raw(
        &self,
        method: Method,
        path: &str,
        content_type: &str,
        payload: String,
    ) -> Result<(StatusCode, Bytes), ClientError> {
        let url = format!("{}{path}", self.base);
        let request = Request::builder()
            .method(method)
            .uri(&url)
            .header(header::AUTHORIZATION, format!("Bearer {}", self.token))
            .header(header::CONTENT_TYPE, content_type)
            .body(Full::new(Bytes::from(payload)))
            .map_err(|e| ClientError::Connect {
                url: url.clone(),
                reason: e.to_string(),
            })?;
        let response = self
            .client
            .request(request)
            .await
            .map_err(|e| ClientError::Connect {
                url: url.clone(),
                reason: airlock_net::respond::error_chain(&e).unwrap_or_default(),
            })?;
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| ClientError::Connect {
                url: url.clone(),
                reason: e.to_string(),
            })?
            .to_bytes();
        Ok((status, bytes))
    }

    async fn json(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, ClientError> {
        let (status, bytes) = self.send(method, path, body).await?;
        self.decode(path, status, &bytes)
    }

    fn decode(&self, path: &str, status: StatusCode, bytes: &[u8]) -> Result<Value, ClientError> {
        let url = format!("{}{path}", self.base);
        let value: Value =
            serde_json::from_slice(bytes).map_err(|_| ClientError::Decode { url })?;
        if status.is_success() {
            Ok(value)
        } else {
            Err(ClientError::Api {
                status: status.as_u16(),
                code: value["reason_code"].as_str().unwrap_or("error").to_owned(),
                message: value["reason"]
                    .as_str()
                    .unwrap_or("request failed")
                    .to_owned(),
                details: value.get("details").cloned(),
            })
        }
    }

    /// `GET path`, JSON.
    pub async fn get(&self, path: &str) -> Result<Value, ClientError> {
        self.json(Method::GET, path, None).await
    }

    /// `POST path` with an optional JSON body.
    pub async fn post(&self, path: &str, body: Option<Value>) -> Result<Value, ClientError> {
        self.json(Method::POST, path, body).await
    }

    /// `POST path` with a text body of `content_type` (e.g. a policy's TOML), JSON answer.
    pub async fn post_text(
        &self,
        path: &str,
        content_type: &str,
        text: String,
    ) -> Result<Value, ClientError> {
        let (status, bytes) = self
            .send_raw(Method::POST, path, content_type, text)
            .await?;
        self.decode(path, status, &bytes)
    }

    /// `GET path`, as text.
    pub async fn get_text(&self, path: &str) -> Result<String, ClientError> {
        let (status, bytes) = self.send(Method::GET, path, None).await?;
        if !status.is_success() {
            return Err(ClientError::Api {
                status: status.as_u16(),
                code: "error".into(),
                message: String::from_utf8_lossy(&bytes).into_owned(),
                details: None,
            });
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// `GET path`, the answer's body streamed into `out` frame by frame as it arrives
    /// (an export of any size holds no more than a frame in memory). Returns the bytes
    /// written.
    ///
    /// Errors: [`ClientError::Api`] for an error status (its JSON body decoded),
    /// [`ClientError::Connect`] when the connection fails mid-way, [`ClientError::Write`].
    pub async fn get_into(
        &self,
        path: &str,
        out: &mut dyn std::io::Write,
    ) -> Result<u64, ClientError> {
        let url = format!("{}{path}", self.base);
        let request = Request::builder()
            .method(Method::GET)
            .uri(&url)
            .header(header::AUTHORIZATION, format!("Bearer {}", self.token))
            .body(Full::new(Bytes::new()))
            .map_err(|e| ClientError::Connect {
                url: url.clone(),
                reason: e.to_string(),
            })?;
        let response = self
            .client
            .request(request)
            .await
            .map_err(|e| ClientError::Connect {
                url: url.clone(),
                reason: airlock_net::respond::error_chain(&e).unwrap_or_default(),
            })?;
        let status = response.status();
        let mut body = response.into_body();
        if !status.is_success() {
            let bytes = body
                .collect()
                .await
                .map_err(|e| ClientError::Connect {
                    url: url.clone(),
                    reason: e.to_string(),
                })?
                .to_bytes();
            return Err(self
                .decode(path, status, &bytes)
                .err()
                .unwrap_or(ClientError::Decode { url }));
        }
        let mut written = 0;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| ClientError::Connect {
                url: url.clone(),
                reason: e.to_string(),
            })?;
            if let Ok(data) = frame.into_data() {
                out.write_all(&data).map_err(|source| ClientError::Write {
                    url: url.clone(),
                    source,
                })?;
                written += data.len() as u64;
            }
        }
        Ok(written)
    }
}
