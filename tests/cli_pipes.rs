//! Output to a closed pipe (`tokentrace protocols aiperf | head -5`) ends the process quietly
//! by SIGPIPE, exit status 141 in a shell, never with a panic or an error message.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

#[test]
fn printing_into_a_closed_pipe_ends_quietly() {
    for args in [&["protocols", "aiperf"][..], &["protocols"][..]] {
        let (reader, writer) = std::io::pipe().unwrap();
        // Nobody reads: the first write meets a closed pipe.
        drop(reader);
        let output = Command::new(assert_cmd::cargo::cargo_bin("tokentrace"))
            .args(args)
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.is_empty(), "{args:?}: {stderr}");
        assert_eq!(output.status.signal(), Some(libc::SIGPIPE), "{args:?}");
    }
}
