//! The page's files, built from `app/web/ui` (esbuild: `npm run build`) into `app/web/ui/dist`
//! and embedded here, so the binary serves everything the browser loads and nothing is fetched
//! from anywhere else (the Content-Security-Policy says so too: `default-src 'self'`).

use crate::http::Response;

const INDEX: &[u8] = include_bytes!("../ui/dist/index.html");
const APP_JS: &[u8] = include_bytes!("../ui/dist/app.js");
const APP_CSS: &[u8] = include_bytes!("../ui/dist/app.css");

/// The asset at `path`, or 404.
pub fn get(path: &str) -> Response {
    let (ct, body) = match path {
        "/" | "/index.html" => ("text/html; charset=utf-8", INDEX),
        "/app.js" => ("text/javascript; charset=utf-8", APP_JS),
        "/app.css" => ("text/css; charset=utf-8", APP_CSS),
        _ => return Response::error(404, format!("{path}: not found")),
    };
    Response {
        status: 200,
        content_type: ct,
        extra: vec![("Cache-Control", "no-cache".into())],
        body: body.to_vec(),
    }
}
