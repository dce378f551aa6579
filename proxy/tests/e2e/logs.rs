//! Logs for machines: the real binary, its stderr in a file (as journald or a log shipper
//! gets it). Text carries no ANSI escape codes off a terminal; `--log-format json` writes one
//! JSON object per line, a failed start included.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use crate::support;
use crate::support::process::{exited, free_port, until_answering};

/// A `tollgate` child writing its stderr to a file; killed when dropped.
struct Run {
    child: Child,
    stderr: PathBuf,
    /// The directory of `stderr`, removed after the child is killed (fields drop after
    /// `Drop::drop`).
    _dir: tempfile::TempDir,
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Run {
    /// `tollgate ARGS...` with RUST_LOG=info and stderr into a file of `dir`.
    fn spawn(dir: &str, args: &[&str]) -> Run {
        let dir = support::scratch(&format!("logs-{dir}"));
        let stderr = dir.path().join("stderr.log");
        let child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(args)
            .env("RUST_LOG", "info")
            .env_remove("NO_COLOR")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("tollgate starts");
        Run {
            child,
            stderr,
            _dir: dir,
        }
    }

    /// `tollgate [--log-format FORMAT] run` on a one-listener config until its admin answers,
    /// then SIGTERM; everything it wrote to stderr.
    fn serve_and_stop(dir: &str, format: Option<&str>) -> Vec<u8> {
        let admin = free_port();
        let config = support::one_listener(
            &format!("listen = \"{admin}\""),
            "127.0.0.1:9",
            "max_connections = 100",
            "",
        );
        // Declared before `run`, so removed after the child is killed.
        let scratch = support::scratch(&format!("logs-{dir}-config"));
        let path = scratch.path().join("tollgate.toml");
        std::fs::write(&path, config).unwrap();
        let path = path.to_str().unwrap();
        let mut args = Vec::new();
        if let Some(format) = format {
            args.extend(["--log-format", format]);
        }
        args.extend(["run", "--config", path]);
        let mut run = Run::spawn(dir, &args);
        if let Err(status) = until_answering(&mut run.child, admin) {
            panic!(
                "the proxy exited before it came up ({status}):\n{}",
                run.text()
            );
        }
        let status = run.terminate();
        assert!(status.success(), "{status}:\n{}", run.text());
        std::fs::read(&run.stderr).unwrap()
    }

    /// Sends the child SIGTERM and waits (bounded) for its exit status.
    fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-s", "TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
        exited(&mut self.child)
    }

    fn text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

/// The lines of `log` as JSON objects; panics naming the first line that is not one.
fn json_lines(log: &[u8]) -> Vec<serde_json::Value> {
    let text = String::from_utf8(log.to_vec()).expect("the log is UTF-8");
    text.lines()
        .enumerate()
        .map(|(index, line)| {
            let value: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|err| {
                panic!("stderr line {}: not JSON ({err}): {line:?}", index + 1)
            });
            assert!(value.is_object(), "stderr line {}: {line:?}", index + 1);
            value
        })
        .collect()
}

#[test]
fn text_logs_off_a_terminal_have_no_escape_codes() {
    let log = Run::serve_and_stop("text", None);
    let text = String::from_utf8_lossy(&log);
    assert!(
        text.contains("listening (tcp)") && text.contains("stopped"),
        "the start and the stop are logged:\n{text}"
    );
    let escape = log.iter().position(|&byte| byte == 0x1b);
    assert_eq!(
        escape, None,
        "an ESC byte in stderr written to a file, at byte {escape:?}:\n{text:?}"
    );
}

#[test]
fn json_logs_are_one_object_per_line() {
    let log = Run::serve_and_stop("json", Some("json"));
    assert!(!log.contains(&0x1b), "an ESC byte in the JSON log");
    let lines = json_lines(&log);
    let listening = lines
        .iter()
        .find(|line| line["fields"]["message"] == "listening (tcp)")
        .unwrap_or_else(|| panic!("no `listening (tcp)` event in {lines:#?}"));
    assert_eq!(listening["level"], "INFO");
    assert_eq!(listening["fields"]["listener"], "front");
    assert!(listening["timestamp"].is_string(), "{listening}");
    assert!(
        lines
            .iter()
            .any(|line| line["fields"]["message"] == "stopped"),
        "the stop is logged: {lines:#?}"
    );
}

#[test]
fn a_failed_start_is_a_json_line_too() {
    let scratch = support::scratch("logs-no-config");
    let missing = scratch.path().join("tollgate-logs-no-such-config.toml");
    let mut run = Run::spawn(
        "failed",
        &[
            "--log-format",
            "json",
            "run",
            "--config",
            missing.to_str().unwrap(),
        ],
    );
    assert!(
        !exited(&mut run.child).success(),
        "a missing config fails the start"
    );
    let lines = json_lines(&std::fs::read(&run.stderr).unwrap());
    let error = lines
        .iter()
        .find(|line| line["level"] == "ERROR" && line["fields"]["message"] == "failed")
        .unwrap_or_else(|| panic!("no ERROR `failed` event in {lines:#?}"));
    let message = error["fields"]["error"].as_str().unwrap_or_default();
    assert!(
        message.contains("tollgate-logs-no-such-config.toml") && message.contains("cannot read"),
        "the error names the file: {error}"
    );
}

/// A run-time list entry's reason is outside text (whoever holds the admin token writes it):
/// in the text log a newline and an escape sequence in it stay visible escapes on the one
/// line of the event, so it forges no second line and clears nothing on a terminal. (Before:
/// the reason written raw, a well-formed second line `... INFO forged` and an ESC byte.)
#[test]
fn a_reason_with_a_newline_and_an_escape_sequence_stays_one_line_in_the_text_log() {
    use std::io::{Read, Write};
    let admin = free_port();
    let scratch = support::scratch("logs-reason-config");
    let token = scratch.path().join("token");
    std::fs::write(&token, "logs-token\n").unwrap();
    let config = support::one_listener(
        &format!("listen = \"{admin}\"\ntoken_file = \"{}\"", token.display()),
        "127.0.0.1:9",
        "max_connections = 100",
        "",
    );
    let path = scratch.path().join("tollgate.toml");
    std::fs::write(&path, config).unwrap();
    let mut run = Run::spawn("reason", &["run", "--config", path.to_str().unwrap()]);
    if let Err(status) = until_answering(&mut run.child, admin) {
        panic!("the proxy exited ({status}):\n{}", run.text());
    }
    let body = r#"{"cidr": "203.0.113.0/24", "ttl": "1h", "reason": "ticket 42\n2026-01-01T00:00:00Z  INFO forged\u001b[2K"}"#;
    let mut stream = std::net::TcpStream::connect(admin).unwrap();
    write!(
        stream,
        "POST /lists/deny HTTP/1.1\r\nHost: admin\r\nAuthorization: Bearer logs-token\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    assert!(run.terminate().success(), "{}", run.text());
    let log = std::fs::read(&run.stderr).unwrap();
    let text = String::from_utf8_lossy(&log);
    let escape = log.iter().position(|&byte| byte == 0x1b);
    assert_eq!(escape, None, "an ESC byte in the text log:\n{text:?}");
    let added: Vec<&str> = text
        .lines()
        .filter(|line| line.contains("run-time list entry added"))
        .collect();
    assert_eq!(added.len(), 1, "{text}");
    assert!(
        added[0].contains(r"reason=ticket 42\n2026-01-01T00:00:00Z  INFO forged\u{1b}[2K"),
        "{}",
        added[0]
    );
    assert!(
        !text
            .lines()
            .any(|line| line.contains("INFO forged") && line != added[0]),
        "a forged line:\n{text}"
    );
}
