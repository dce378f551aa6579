//! Every ```toml block of README.md passes `tollgate check` (the library call the binary
//! makes): a config an operator copies from the README is one the proxy accepts. A fragment
//! that is not a whole config belongs in a ```text block.

use crate::support as common;

use std::path::PathBuf;
use std::process::ExitCode;

/// The ```toml blocks of `text`, each with the README line its first line of TOML is on.
fn toml_blocks(text: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, String)> = None;
    for (index, line) in text.lines().enumerate() {
        let fence = line.trim_start();
        match open.take() {
            None if fence.starts_with("```toml") => open = Some((index + 2, String::new())),
            None => {}
            Some(block) if fence.starts_with("```") => blocks.push(block),
            Some((start, mut body)) => {
                body.push_str(line);
                body.push('\n');
                open = Some((start, body));
            }
        }
    }
    assert!(open.is_none(), "README.md ends inside a ```toml block");
    blocks
}

#[test]
fn every_toml_block_of_the_readme_passes_check() {
    let readme = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../README.md");
    let text = std::fs::read_to_string(&readme).expect("README.md is readable");
    let blocks = toml_blocks(&text);
    assert!(
        blocks.len() >= 3,
        "only {} ```toml blocks found",
        blocks.len()
    );
    let scratch = common::scratch("readme");
    let dir = scratch.path();
    let mut refused = Vec::new();
    for (line, body) in blocks {
        let path = dir.join(format!("readme-line-{line}.toml"));
        std::fs::write(&path, &body).expect("written");
        let mut out = Vec::new();
        let code = tollgate::tools::check::check(&path, &mut out).expect("output is written");
        if code != ExitCode::SUCCESS {
            refused.push(format!(
                "README.md:{line}: the ```toml block starting here is refused by check:\n{}",
                String::from_utf8_lossy(&out)
            ));
        }
    }
    assert!(refused.is_empty(), "{}", refused.join("\n"));
}

#[test]
fn blocks_are_found_with_their_lines() {
    let text = "intro\n```toml\na = 1\n```\n```text\nb\n```\n  ```toml\nc = 2\nd = 3\n  ```\n";
    let blocks = toml_blocks(text);
    assert_eq!(
        blocks,
        [(3, "a = 1\n".to_owned()), (9, "c = 2\nd = 3\n".to_owned())]
    );
}
