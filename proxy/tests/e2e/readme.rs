//! Every ```toml block of every documentation page (README.md, CONTRIBUTING.md, the crates'
//! READMEs, benches/README.md and the operator's manual under proxy/docs/) passes
//! `tollgate check` (the library call the binary makes): a config an operator copies from the
//! documentation is one the proxy accepts. A fragment that is not a whole config belongs in a
//! ```text block. A ```yaml block whose first line is `# NAME.yaml` is written beside the
//! page's configs as that file first (an `[rls]` example's descriptor file), and so checked
//! with them.

use crate::support as common;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The pages whose ```toml blocks are checked, relative to the workspace root: the named
/// ones, then every `.md` under `proxy/docs/`.
const PAGES: &[&str] = &[
    "README.md",
    "CONTRIBUTING.md",
    "sketch/README.md",
    "filter/README.md",
    "benches/README.md",
];

/// The ```toml blocks of `text`, each with the line its first line of TOML is on; `page`
/// names the file in the panic if it ends inside a block.
fn toml_blocks(page: &str, text: &str) -> Vec<(usize, String)> {
    blocks(page, text, "```toml")
}

/// The blocks of `text` fenced by `opening` (```toml, ```yaml), as [`toml_blocks`].
fn blocks(page: &str, text: &str, opening: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, String)> = None;
    for (index, line) in text.lines().enumerate() {
        let fence = line.trim_start();
        match open.take() {
            None if fence.starts_with(opening) => open = Some((index + 2, String::new())),
            None => {}
            Some(block) if fence.starts_with("```") => blocks.push(block),
            Some((start, mut body)) => {
                body.push_str(line);
                body.push('\n');
                open = Some((start, body));
            }
        }
    }
    assert!(open.is_none(), "{page} ends inside a {opening} block");
    blocks
}

/// Every `.md` file under `dir`, at any depth, sorted.
fn markdown_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|err| panic!("{} is readable: {err}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            found.extend(markdown_under(&path));
        } else if path.extension().is_some_and(|e| e == "md") {
            found.push(path);
        }
    }
    found
}

/// The documentation pages, as paths relative to the workspace root.
fn pages(root: &Path) -> Vec<String> {
    let mut pages: Vec<String> = PAGES.iter().map(|&p| p.to_owned()).collect();
    for path in markdown_under(&root.join("proxy/docs")) {
        let relative = path.strip_prefix(root).expect("under the root");
        pages.push(relative.to_string_lossy().into_owned());
    }
    pages
}

#[test]
fn every_toml_block_of_the_documentation_passes_check() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let scratch = common::scratch("readme");
    let dir = scratch.path();
    let mut checked = 0;
    let mut refused = Vec::new();
    for page in pages(&root) {
        let text = std::fs::read_to_string(root.join(&page))
            .unwrap_or_else(|err| panic!("{page} is readable: {err}"));
        for (_, body) in blocks(&page, &text, "```yaml") {
            let name = body.lines().next().and_then(|l| l.strip_prefix("# "));
            if let Some(name) = name.filter(|n| n.ends_with(".yaml")) {
                std::fs::write(dir.join(name), &body).expect("written");
            }
        }
        for (line, body) in toml_blocks(&page, &text) {
            checked += 1;
            let path = dir.join(format!("{}-line-{line}.toml", page.replace('/', "_")));
            std::fs::write(&path, &body).expect("written");
            let mut out = Vec::new();
            let code = tollgate::tools::check::check(&path, &mut out).expect("output is written");
            if code != ExitCode::SUCCESS {
                refused.push(format!(
                    "{page}:{line}: the ```toml block starting here is refused by check:\n{}",
                    String::from_utf8_lossy(&out)
                ));
            }
        }
    }
    // The README, the manual's quick start and each of its configuration pages hold one at
    // least: fewer means the pages were not found or their fences changed.
    assert!(checked >= 12, "only {checked} ```toml blocks found");
    assert!(refused.is_empty(), "{}", refused.join("\n"));
}

#[test]
fn blocks_are_found_with_their_lines() {
    let text = "intro\n```toml\na = 1\n```\n```text\nb\n```\n  ```toml\nc = 2\nd = 3\n  ```\n";
    let blocks = toml_blocks("page.md", text);
    assert_eq!(
        blocks,
        [(3, "a = 1\n".to_owned()), (9, "c = 2\nd = 3\n".to_owned())]
    );
}

#[test]
fn the_manual_is_among_the_pages() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let pages = pages(&root);
    for page in [
        "README.md",
        "proxy/docs/SUMMARY.md",
        "proxy/docs/configuration/listener.md",
    ] {
        assert!(pages.iter().any(|p| p == page), "{page} not in {pages:?}");
    }
}
