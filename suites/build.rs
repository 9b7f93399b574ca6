//! Compiles the requirements table of `REQUIREMENTS.md` into the library
//! (`src/requirements.rs` includes it): the markdown is the one place a requirement is written,
//! so adding one is adding its row there.

use std::path::PathBuf;

fn main() {
    let md = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"))
        .join("REQUIREMENTS.md");
    println!("cargo:rerun-if-changed={}", md.display());
    let text = std::fs::read_to_string(&md).unwrap_or_else(|e| panic!("{}: {e}", md.display()));
    let mut out = String::from("&[\n");
    let mut count = 0;
    for (i, line) in text.lines().enumerate() {
        // The table's rows; its header (`| id | ...`) and separator start otherwise.
        if !line.starts_with("| R") {
            continue;
        }
        let cells: Vec<&str> = line
            .trim()
            .trim_start_matches('|')
            .trim_end_matches('|')
            .split('|')
            .map(str::trim)
            .collect();
        let [id, text, source] = cells[..] else {
            panic!(
                "{}:{}: a requirement row is `| R<n> | requirement | source |` (no `|` inside a cell), not {line:?}",
                md.display(),
                i + 1
            );
        };
        count += 1;
        // Ids are numbered in order without gaps: a check names them, so none may move.
        let want = format!("R{count}");
        assert!(
            id == want,
            "{}:{}: requirement {id} where {want} comes next: number the rows R1, R2, ... in order",
            md.display(),
            i + 1
        );
        out.push_str(&format!(
            "    Requirement {{ id: {id:?}, text: {text:?}, source: {source:?} }},\n"
        ));
    }
    assert!(
        count > 0,
        "{}: no requirement rows (`| R1 | ...`)",
        md.display()
    );
    out.push_str("]\n");
    let dest =
        PathBuf::from(std::env::var("OUT_DIR").expect("set by cargo")).join("requirements.rs");
    std::fs::write(&dest, out).unwrap_or_else(|e| panic!("{}: {e}", dest.display()));
}
