//! Clients that hang up (mid-stream and while waiting for a whole answer) cancel their
//! generation (speculative or not) and leave the server healthy; SIGTERM lets a request in flight finish and exits 0.

use super::server::{completion_body, Server};
use std::io::Read;
use std::time::{Duration, Instant};

/// A completion long enough that waiting for it would be noticed.
fn long_body(stream: bool) -> String {
    completion_body("1, 2, 3, 4, 5,", 1500, &format!(r#""stream": {stream}"#))
}

/// Seconds a two-token request takes now.
fn quick_request_secs(server: &Server) -> f64 {
    let started = Instant::now();
    let (status, body) = server.post("/v1/completions", &completion_body("Hello", 2, ""));
    assert_eq!(status, 200, "{body}");
    started.elapsed().as_secs_f64()
}

#[test]
fn hanging_up_cancels_the_generation() {
    hang_ups_cancel(&[]);
}

/// The same with speculative steps (`--lookup`: the counting prompt's drafts are accepted).
#[test]
fn hanging_up_cancels_a_speculative_generation() {
    hang_ups_cancel(&["--lookup"]);
}

fn hang_ups_cancel(flags: &[&str]) {
    let server = Server::start(flags);
    // The time 1500 tokens take, measured on 60 of them (the bound below is far under it).
    let started = Instant::now();
    let (_, body) = server.post(
        "/v1/completions",
        &completion_body("1, 2, 3, 4, 5,", 60, ""),
    );
    assert_eq!(body["usage"]["completion_tokens"], 60, "{body}");
    let per_token = started.elapsed().as_secs_f64() / 60.0;

    for stream in [true, false] {
        let mut client = server.raw_post("/v1/completions", &long_body(stream));
        client
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut buf = [0u8; 256];
        if stream {
            client
                .set_read_timeout(Some(Duration::from_secs(60)))
                .unwrap();
            assert!(client.read(&mut buf).unwrap() > 0, "no first chunk");
        } else {
            assert!(
                client.read(&mut buf).is_err(),
                "a 1500-token answer came at once"
            );
        }
        drop(client);
        let secs = quick_request_secs(&server);
        assert!(
            secs < 300.0 * per_token,
            "after a hang-up (stream {stream}) the next request took {secs:.1} s: the generation went on"
        );
    }
    assert_eq!(server.get("/health", None).0, 200);
}

#[test]
fn sigterm_finishes_the_request_in_flight_and_exits_0() {
    let server = Server::start(&[]);
    let mut client = server.raw_post("/v1/completions", &completion_body("Hello", 24, ""));
    std::thread::sleep(Duration::from_millis(300));
    let addr = server.addr.clone();
    let exit = std::thread::spawn(move || server.terminate(Duration::from_secs(60)));
    let mut answer = String::new();
    client.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"text_completion\""), "{answer}");
    let status = exit.join().unwrap();
    assert!(status.success(), "exit status {status:?}");
    assert!(
        std::net::TcpStream::connect(&addr).is_err(),
        "still listening after exit"
    );
}
