//! Tests of the shell and its in-memory file system.

use super::*;

fn mounts() -> Mounts {
    let mut m = Mounts::new();
    m.mount("/", Volume::new(), false);
    m.mount("/sandbox", Volume::new(), false);
    m
}

async fn sh_in(script: &str, mounts: &Mounts) -> ExecOutput {
    let argv = vec!["sh".to_string(), "-c".to_string(), script.to_string()];
    run(
        &argv,
        b"",
        &BTreeMap::new(),
        "/",
        mounts,
        &DefaultHooks::new(0),
    )
    .await
}

#[tokio::test]
async fn differential_probe() {
    let Ok(script) = std::env::var("PROBE") else {
        return;
    };
    let out = sh_in(&script, &mounts()).await;
    print!("{}", String::from_utf8_lossy(&out.stdout));
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    println!("[exit {}]", out.exit_code);
}
