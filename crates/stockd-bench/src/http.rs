//! One HTTP/1.1 keep-alive connection to a stockd server, as a load generator needs it: one
//! request at a time, the whole answer read, and a new connection when the old one fails.
//!
//! Built on hyper's client connection directly (no pool): a load generator must control exactly
//! how many connections it opens, and reuse each for every request of its worker.

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use std::pin::Pin;

use hyper::client::conn::http1::{handshake, Connection as Driver, SendRequest};
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::{Method, Request as HttpRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Where the server is: `host:port` and the bearer token to send.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// `host:port`, from an `http://` URL.
    pub authority: String,
    /// Sent as `Authorization: Bearer ...` on every request when set.
    pub token: Option<String>,
}

impl Endpoint {
    /// Parses `http://host:port` (a trailing `/` is fine; `https` is not supported: put the
    /// bench next to the server, or behind the same proxy's plain side).
    pub fn parse(url: &str, token: Option<String>) -> Result<Endpoint, String> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| format!("--url {url:?}: expected http://HOST:PORT"))?;
        let authority = rest.trim_end_matches('/');
        if authority.is_empty() || authority.contains('/') {
            return Err(format!(
                "--url {url:?}: expected http://HOST:PORT with no path"
            ));
        }
        let authority = if authority.contains(':') {
            authority.to_string()
        } else {
            format!("{authority}:80")
        };
        Ok(Endpoint {
            authority,
            token: token.filter(|token| !token.is_empty()),
        })
    }
}

/// One request of a workload.
#[derive(Clone, Debug)]
pub struct Request {
    pub method: Method,
    pub path: String,
    pub body: Bytes,
}

impl Request {
    pub fn get(path: impl Into<String>) -> Request {
        Request {
            method: Method::GET,
            path: path.into(),
            body: Bytes::new(),
        }
    }

    /// A request whose body is `body` as JSON.
    pub fn serialize(
        method: Method,
        path: impl Into<String>,
        body: &impl serde::Serialize,
    ) -> Request {
        Request {
            method,
            path: path.into(),
            body: Bytes::from(serde_json::to_vec(body).expect("serialising to memory cannot fail")),
        }
    }

    pub fn json(method: Method, path: impl Into<String>, body: &serde_json::Value) -> Request {
        Request {
            method,
            path: path.into(),
            body: Bytes::from(body.to_string()),
        }
    }
}

/// A whole answer.
#[derive(Clone, Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Bytes,
}

impl Answer {
    pub fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(&self.body).ok()
    }

    /// The `error` code of an error body, if it has one.
    pub fn error_code(&self) -> Option<String> {
        if self.status < 400 {
            return None;
        }
        self.json()?.get("error")?.as_str().map(str::to_string)
    }
}

/// A keep-alive connection that reconnects on the next request after a failure.
///
/// The connection's I/O is driven by the task that sends on it, not by a task of its own: a
/// request then costs no wake-up of another task on the way out and none on the way back,
/// which on a machine the generator shares with the server is CPU the server gets.
pub struct Connection {
    endpoint: Endpoint,
    authorization: Option<HeaderValue>,
    host: HeaderValue,
    open: Option<Open>,
}

struct Open {
    sender: SendRequest<Full<Bytes>>,
    driver: Pin<Box<Driver<TokioIo<TcpStream>, Full<Bytes>>>>,
}

impl Connection {
    pub fn new(endpoint: &Endpoint) -> Result<Connection, String> {
        let authorization = match &endpoint.token {
            Some(token) => Some(
                HeaderValue::from_str(&format!("Bearer {token}"))
                    .map_err(|_| "the token has characters a header cannot carry".to_string())?,
            ),
            None => None,
        };
        let host = HeaderValue::from_str(&endpoint.authority)
            .map_err(|_| format!("bad host {:?}", endpoint.authority))?;
        Ok(Connection {
            endpoint: endpoint.clone(),
            authorization,
            host,
            open: None,
        })
    }

    async fn connect(&self) -> Result<Open, String> {
        let stream = TcpStream::connect(&self.endpoint.authority)
            .await
            .map_err(|error| format!("connect {}: {error}", self.endpoint.authority))?;
        let _ = stream.set_nodelay(true);
        let (sender, driver) = handshake(TokioIo::new(stream))
            .await
            .map_err(|error| format!("handshake: {error}"))?;
        Ok(Open {
            sender,
            driver: Box::pin(driver),
        })
    }

    /// Opens the connection now if it is not open, so that the first request's latency does
    /// not include the connect and the handshake. On an error, the next request tries again.
    pub async fn open(&mut self) -> Result<(), String> {
        if self.open.is_none() {
            self.open = Some(self.connect().await?);
        }
        Ok(())
    }

    /// Sends `request` and reads the whole answer. An error means the outcome is unknown (the
    /// request may or may not have reached the server); the next call reconnects.
    pub async fn send(&mut self, request: &Request) -> Result<Answer, String> {
        if let Some(open) = &mut self.open {
            // Nobody drove the connection since the last answer: a close that arrived
            // meanwhile (an idle timeout) is noticed here, before a request is sent into it.
            let ended = tokio::select! {
                biased;
                _ = open.driver.as_mut() => true,
                () = std::future::ready(()) => open.sender.is_closed(),
            };
            if ended {
                self.open = None;
            }
        }
        let open = match &mut self.open {
            Some(open) => open,
            None => self.open.insert(self.connect().await?),
        };
        let mut builder = HttpRequest::builder()
            .method(request.method.clone())
            .uri(&request.path)
            .header(HOST, self.host.clone());
        if let Some(authorization) = &self.authorization {
            builder = builder.header(AUTHORIZATION, authorization.clone());
        }
        if !request.body.is_empty() {
            builder = builder.header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        let http = builder
            .body(Full::new(request.body.clone()))
            .map_err(|error| format!("request: {error}"))?;
        let Open { sender, driver } = open;
        let exchange = async {
            sender
                .ready()
                .await
                .map_err(|error| format!("connection: {error}"))?;
            let response = sender
                .send_request(http)
                .await
                .map_err(|error| error.to_string())?;
            let status = response.status().as_u16();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|error| error.to_string())?
                .to_bytes();
            Ok::<_, String>(Answer { status, body })
        };
        // The exchange and the connection's I/O, polled together in this task. The driver
        // finishes only when the connection does (closed, or failed), which ends the exchange
        // too.
        let result = tokio::select! {
            biased;
            result = exchange => result,
            ended = driver.as_mut() => Err(match ended {
                Ok(()) => "the server closed the connection".to_string(),
                Err(error) => error.to_string(),
            }),
        };
        if result.is_err() {
            self.open = None;
        }
        result
    }
}
