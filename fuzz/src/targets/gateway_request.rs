//! Any HTTP request to the gateway, served in process by its axum router
//! over the bundled skills and the demo shop (no LLM, no hot reload).
//! Bad requests must get a 4xx with an OpenAI-style error; a 500 means the
//! gateway failed on input it should have refused (a panicking handler
//! answers 500 too).

use std::sync::LazyLock;

use crate::{bundled_host, executor};
use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use skillhost::gateway::{Gateway, GatewayConfig};
use tower::ServiceExt;

struct Served {
    executor: tokio::runtime::Runtime,
    router: Router,
}

static SERVED: LazyLock<Served> = LazyLock::new(|| {
    let executor = executor();
    let host = executor.block_on(bundled_host().build()).expect("the host");
    let router = Gateway::new(host, GatewayConfig::default()).router();
    Served { executor, router }
});

/// The request `input` writes as HTTP/1.1 would, without the version:
/// `METHOD /path?query`, header lines, an empty line, the body. `None` when
/// that is no request at all (a bad method, URI or header).
fn request(input: &[u8]) -> Option<Request<Body>> {
    let split = input.windows(2).position(|pair| pair == b"\n\n");
    let (head, body) = match split {
        Some(at) => (&input[..at], &input[at + 2..]),
        None => (input, &[][..]),
    };
    let head = std::str::from_utf8(head).ok()?;
    let mut lines = head.lines();
    let (method, uri) = lines.next()?.split_once(' ')?;
    let mut builder = Request::builder().method(method).uri(uri);
    for line in lines {
        let (name, value) = line.split_once(':')?;
        builder = builder.header(name, value.trim_start());
    }
    builder.body(Body::from(body.to_vec())).ok()
}

/// One input. Returns the status the gateway answered, `None` when the
/// input is no request: the seed replay makes sure every seed is one.
pub fn run(input: &[u8]) -> Option<StatusCode> {
    let request = request(input)?;
    let served = &*SERVED;
    served.executor.block_on(async {
        let response = served
            .router
            .clone()
            .oneshot(request)
            .await
            .expect("the router is infallible");
        let status = response.status();
        let streaming = response
            .headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|value| value.as_bytes().starts_with(b"text/event-stream"));
        let body = if streaming {
            Vec::new()
        } else {
            let body = response.into_body().collect().await.expect("a whole body");
            body.to_bytes().to_vec()
        };
        assert_ne!(
            status,
            StatusCode::INTERNAL_SERVER_ERROR,
            "{}",
            String::from_utf8_lossy(&body)
        );
        Some(status)
    })
}
