//! Outgoing TLS trusts the system's CA store as well as the public roots the build carries: an
//! S3 endpoint, an OTLP collector or a Cog server behind a private CA is reached once that CA
//! is in the store (`update-ca-certificates` in an image, or `SSL_CERT_FILE`). The test makes a
//! CA and a server certificate with `openssl`, serves HTTPS with Python's `ssl`, and calls it
//! with the workspace's reqwest: refused while the CA is unknown, answered once `SSL_CERT_FILE`
//! names it (in a child process: the environment is the process's, and is set only at a
//! process's start here).

use std::{path::Path, process::Stdio, time::Duration};

use tokio::io::{AsyncBufReadExt, BufReader};

const SERVER: &str = r#"
import http.server, ssl, sys
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(sys.argv[1], sys.argv[2])
server.socket = context.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

fn openssl(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("openssl").args(args).current_dir(dir).output().expect("openssl runs");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A CA and a certificate for 127.0.0.1 signed by it, in `dir`.
fn private_ca(dir: &Path) {
    let day = ["-days", "1"];
    openssl(
        dir,
        &[
            &["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem"][..],
            &day,
            &["-subj", "/CN=a private CA", "-addext", "basicConstraints=critical,CA:TRUE"],
            &["-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        ]
        .concat(),
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
    );
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .expect("extensions written");
    openssl(
        dir,
        &[
            &["x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial"][..],
            &["-out", "server.pem", "-extfile", "server.ext"],
            &day,
        ]
        .concat(),
    );
}

async fn get(url: &str) -> Result<String, reqwest::Error> {
    // Each client reads the CA store when it is built, as the services' clients do at start.
    let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build()?;
    client.get(url).send().await?.error_for_status()?.text().await
}

/// The URL the helper calls.
const URL_VAR: &str = "SYSTEM_CA_TEST_URL";

/// Run only by the test above, in a child process whose `SSL_CERT_FILE` names the CA.
#[tokio::test]
#[ignore = "a helper of a_server_behind_a_ca_in_the_system_store_is_trusted, run in its child process"]
async fn helper_gets_the_url_of_its_environment() {
    let url = std::env::var(URL_VAR).expect("run by the test above, with the URL");
    let body = get(&url).await.expect("the server's certificate is trusted");
    println!("answered: {body}");
}

#[tokio::test]
async fn a_server_behind_a_ca_in_the_system_store_is_trusted() {
    let dir = std::env::temp_dir().join(format!("system-ca-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory");
    private_ca(&dir);
    let mut server = tokio::process::Command::new("python3")
        .args(["-c", SERVER, "server.pem", "server.key"])
        .current_dir(&dir)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python3 serves");
    let mut first = String::new();
    let stdout = server.stdout.take().expect("its output");
    tokio::time::timeout(Duration::from_secs(60), BufReader::new(stdout).read_line(&mut first))
        .await
        .expect("the server said its port")
        .expect("read");
    let url = format!("https://127.0.0.1:{}/", first.trim());

    let refused = get(&url).await.expect_err("a CA in no store is not trusted");
    assert!(refused.is_connect() || refused.is_request(), "refused at the handshake: {refused:?}");

    // The same call in a process whose environment names the CA: this test binary again, running
    // only the helper below.
    let child = tokio::process::Command::new(std::env::current_exe().expect("this test binary"))
        .args(["--exact", "helper_gets_the_url_of_its_environment", "--include-ignored", "--nocapture"])
        .env("SSL_CERT_FILE", dir.join("ca.pem"))
        .env(URL_VAR, &url)
        .output()
        .await
        .expect("the helper runs");
    let printed = String::from_utf8_lossy(&child.stdout);
    assert!(child.status.success(), "trusted once the store holds the CA: {printed}");
    assert!(printed.contains("answered: ok"), "{printed}");

    let _ = server.kill().await;
    let _ = std::fs::remove_dir_all(&dir);
}
