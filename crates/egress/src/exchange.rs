//! One request/response exchange through the guarded client: redirects followed by hand
//! (when the caller asks), so every hop passes the guard again, and a response body read
//! with a cap, so one large answer cannot exhaust the process's memory.

use bytes::{Bytes, BytesMut};
use reqwest::header::{self, HeaderMap};
use reqwest::{Method, StatusCode, Url};

use super::client::{GuardedClient, RequestError};

/// Most redirects followed for one request.
pub const MAX_REDIRECTS: usize = 5;

/// What is sent; kept whole so that a 307/308 redirect can send it again.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: Method,
    pub url: Url,
    pub headers: HeaderMap,
    pub body: Option<Bytes>,
}

#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    #[error(transparent)]
    Request(#[from] RequestError),
    /// A hop after the first: the message says so, since its URL came from a server.
    #[error("{source} (at redirect {hop})")]
    Redirected { hop: usize, source: RequestError },
    #[error("more than {MAX_REDIRECTS} redirects")]
    TooManyRedirects,
    #[error("the redirect location {0:?} is not a URL")]
    BadLocation(String),
}

impl ExchangeError {
    fn at_hop(hop: usize, source: RequestError) -> Self {
        match hop {
            0 => Self::Request(source),
            hop => Self::Redirected { hop, source },
        }
    }

    /// The guard refused the first URL or a redirect.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            Self::Request(RequestError::Refused(_))
                | Self::Redirected {
                    source: RequestError::Refused(_),
                    ..
                }
        )
    }
}

/// Sends `request`; with `follow_redirects`, follows up to [`MAX_REDIRECTS`] redirects,
/// each one checked by the guard before it connects. Otherwise a 3xx is the answer.
pub async fn send(
    client: &GuardedClient,
    mut request: Request,
    follow_redirects: bool,
) -> Result<reqwest::Response, ExchangeError> {
    let mut redirects = 0;
    loop {
        let hop_failed = |e| ExchangeError::at_hop(redirects, e);
        let mut builder = client
            .request(request.method.clone(), request.url.clone())
            .map_err(hop_failed)?
            .headers(request.headers.clone());
        if let Some(body) = &request.body {
            builder = builder.body(body.clone());
        }
        let response = builder.send().await.map_err(|e| hop_failed(e.into()))?;
        if !follow_redirects {
            return Ok(response);
        }
        let location = response
            .headers()
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok());
        let Some(next) = redirected(&request, response.status(), location)? else {
            return Ok(response);
        };
        if redirects == MAX_REDIRECTS {
            return Err(ExchangeError::TooManyRedirects);
        }
        redirects += 1;
        request = next;
    }
}

/// The request a redirect asks for, as browsers make it; None when `status` is not a
/// redirect or names no location. Pure.
/// - 301 and 302 turn a POST into a GET, 303 turns anything but HEAD into a GET: the
///   body and the headers that describe it are dropped. 307 and 308 repeat the request.
/// - Leaving the origin (scheme, host, port) drops the credentials (Authorization,
///   Cookie, Proxy-Authorization): they were meant for the first server only.
fn redirected(
    previous: &Request,
    status: StatusCode,
    location: Option<&str>,
) -> Result<Option<Request>, ExchangeError> {
    let to_get = match status {
        StatusCode::MOVED_PERMANENTLY | StatusCode::FOUND => previous.method == Method::POST,
        StatusCode::SEE_OTHER => previous.method != Method::HEAD,
        StatusCode::TEMPORARY_REDIRECT | StatusCode::PERMANENT_REDIRECT => false,
        _ => return Ok(None),
    };
    let Some(location) = location else {
        return Ok(None);
    };
    let url = previous
        .url
        .join(location)
        .map_err(|_| ExchangeError::BadLocation(location.to_owned()))?;
    let mut next = Request {
        url,
        ..previous.clone()
    };
    if to_get {
        next.method = Method::GET;
        next.body = None;
        for name in [
            header::CONTENT_TYPE,
            header::CONTENT_LENGTH,
            header::CONTENT_ENCODING,
            header::CONTENT_LANGUAGE,
            header::CONTENT_LOCATION,
        ] {
            next.headers.remove(name);
        }
    }
    if next.url.origin() != previous.url.origin() {
        for name in [
            header::AUTHORIZATION,
            header::COOKIE,
            header::PROXY_AUTHORIZATION,
        ] {
            next.headers.remove(name);
        }
    }
    Ok(Some(next))
}

#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("the response body is larger than the {limit}-byte limit")]
    TooLarge { limit: usize },
    #[error("reading the response failed: {0}")]
    Read(RequestError),
}

/// Reads the body, failing as soon as it grows past `limit` bytes: the rest is never
/// read. A declared Content-Length above the limit fails before reading anything.
/// Reads and discards at most `limit` bytes of the body, so the connection can return to
/// the pool; a longer body is left unread (the connection is then dropped).
pub async fn drain_capped(mut response: reqwest::Response, limit: usize) {
    if response
        .content_length()
        .is_some_and(|len| len > limit as u64)
    {
        return;
    }
    let mut read = 0;
    while let Ok(Some(chunk)) = response.chunk().await {
        read += chunk.len();
        if read > limit {
            return;
        }
    }
}

pub async fn read_capped(
    mut response: reqwest::Response,
    limit: usize,
) -> Result<Bytes, BodyError> {
    let too_large = BodyError::TooLarge { limit };
    if response
        .content_length()
        .is_some_and(|len| len > limit as u64)
    {
        return Err(too_large);
    }
    let mut body = BytesMut::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| BodyError::Read(e.into()))?
    {
        if body.len() + chunk.len() > limit {
            return Err(too_large);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: Method, url: &str) -> Request {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, "Bearer t".parse().unwrap());
        headers.insert(header::COOKIE, "s=1".parse().unwrap());
        headers.insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
        headers.insert("x-trace", "7".parse().unwrap());
        Request {
            method,
            url: Url::parse(url).unwrap(),
            headers,
            body: Some(Bytes::from_static(b"{}")),
        }
    }

    fn next(prev: &Request, status: u16, location: &str) -> Request {
        redirected(prev, StatusCode::from_u16(status).unwrap(), Some(location))
            .unwrap()
            .expect("a redirect")
    }

    #[test]
    fn only_redirect_statuses_with_a_location_redirect() {
        let prev = request(Method::GET, "http://a.example/x");
        for status in [200, 300, 304, 305, 404] {
            let status = StatusCode::from_u16(status).unwrap();
            assert!(redirected(&prev, status, Some("/y")).unwrap().is_none());
        }
        assert!(
            redirected(&prev, StatusCode::FOUND, None)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn relative_locations_resolve_against_the_previous_url() {
        let prev = request(Method::GET, "http://a.example/dir/x?q=1");
        assert_eq!(next(&prev, 302, "y").url.as_str(), "http://a.example/dir/y");
        assert_eq!(
            next(&prev, 302, "//b.example/z").url.as_str(),
            "http://b.example/z"
        );
        // Refusing a non-http scheme is the guard's job, at the next hop.
        assert_eq!(next(&prev, 302, "file:///etc/passwd").url.scheme(), "file");
        let bad = redirected(&prev, StatusCode::FOUND, Some("http://[::1"));
        assert!(matches!(bad, Err(ExchangeError::BadLocation(_))), "{bad:?}");
    }

    #[test]
    fn see_other_and_post_redirects_become_bodiless_gets() {
        let post = request(Method::POST, "http://a.example/x");
        for status in [301, 302, 303] {
            let n = next(&post, status, "/y");
            assert_eq!((n.method, n.body), (Method::GET, None), "{status}");
            assert!(!n.headers.contains_key(header::CONTENT_TYPE));
            assert_eq!(n.headers["x-trace"], "7");
        }
        let put = request(Method::PUT, "http://a.example/x");
        assert_eq!(next(&put, 303, "/y").method, Method::GET);
        let kept = next(&put, 302, "/y");
        assert_eq!((kept.method, kept.body.is_some()), (Method::PUT, true));
        let head = request(Method::HEAD, "http://a.example/x");
        assert_eq!(next(&head, 303, "/y").method, Method::HEAD);
    }

    #[test]
    fn temporary_and_permanent_redirects_repeat_the_request() {
        let post = request(Method::POST, "http://a.example/x");
        for status in [307, 308] {
            let n = next(&post, status, "/y");
            assert_eq!(n.method, Method::POST);
            assert_eq!(n.body.as_deref(), Some(&b"{}"[..]));
            assert_eq!(n.headers[header::CONTENT_TYPE], "application/json");
        }
    }

    #[test]
    fn credentials_stay_with_their_origin() {
        let prev = request(Method::GET, "https://a.example/x");
        let same = next(&prev, 302, "/y");
        assert_eq!(same.headers[header::AUTHORIZATION], "Bearer t");
        assert_eq!(same.headers[header::COOKIE], "s=1");
        for elsewhere in [
            "https://b.example/y",
            "https://a.example:8443/y",
            "http://a.example/y",
        ] {
            let n = next(&prev, 307, elsewhere);
            assert!(
                !n.headers.contains_key(header::AUTHORIZATION),
                "{elsewhere}"
            );
            assert!(!n.headers.contains_key(header::COOKIE), "{elsewhere}");
            assert_eq!(n.headers["x-trace"], "7", "{elsewhere}");
        }
    }
}
