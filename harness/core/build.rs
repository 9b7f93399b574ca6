//! Compiles every topology in `fixtures/topologies/`, every release in `fixtures/releases/` and
//! every expectations file in `fixtures/expectations/` into the library, so the binary runs from
//! anywhere and adding a topology or a release is adding its YAML file.

use std::path::{Path, PathBuf};

fn main() {
    let fixtures = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"))
        .join("../../fixtures");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("set by cargo"));
    write(
        &out.join("topologies.rs"),
        "/// The topologies shipped in `fixtures/topologies`, compiled in.\nconst BUILTIN",
        &fixtures.join("topologies"),
    );
    let mut releases = String::new();
    releases.push_str(&table(
        "/// The releases shipped in `fixtures/releases`, compiled in.\nconst BUILTIN",
        &fixtures.join("releases"),
    ));
    releases.push_str(&table(
        "/// The expectations shipped in `fixtures/expectations`, compiled in.\nconst EXPECTATIONS",
        &fixtures.join("expectations"),
    ));
    std::fs::write(out.join("releases.rs"), releases)
        .unwrap_or_else(|e| panic!("{}: {e}", out.display()));
}

fn write(dest: &Path, head: &str, dir: &Path) {
    std::fs::write(dest, table(head, dir)).unwrap_or_else(|e| panic!("{}: {e}", dest.display()));
}

/// `<head>: &[(&str, &str)]` of (file stem, text) for every `*.yaml` in `dir`, by name.
fn table(head: &str, dir: &Path) -> String {
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    // By stem, which is the name: the order the by-name maps list them in (a path sort would put
    // `sidecar-copy.yaml` before `sidecar.yaml`).
    files.sort_by(|a, b| a.file_stem().cmp(&b.file_stem()));
    let mut out = format!("{head}: &[(&str, &str)] = &[\n");
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
        let stem = f
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("a UTF-8 file name");
        let path = f.canonicalize().expect("the file exists");
        out.push_str(&format!(
            "    ({stem:?}, include_str!({:?})),\n",
            path.display().to_string()
        ));
    }
    out.push_str("];\n");
    out
}
