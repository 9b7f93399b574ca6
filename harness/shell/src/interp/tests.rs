//! Tests of the shell and its in-memory file system. Expected outputs and messages were
//! checked against dash and GNU coreutils where the shell claims to follow them.

use std::sync::Mutex;
use std::time::Duration;

use rstest::rstest;
use tokio::time::Instant;

use super::*;
use crate::error::KillError;
use crate::fs::Volume;
use crate::hooks::DefaultHooks;

/// A container's usual view: its own root file system plus a sandbox volume.
fn mounts() -> Mounts {
    let mut m = Mounts::new();
    m.mount("/", Volume::new(), false);
    m.mount("/sandbox", Volume::new(), false);
    m
}

fn argv(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

async fn exec_with(
    args: &[&str],
    stdin: &[u8],
    mounts: &Mounts,
    hooks: &dyn ShellHooks,
) -> ExecOutput {
    run(&argv(args), stdin, &BTreeMap::new(), "/", mounts, hooks).await
}

async fn sh_in(script: &str, mounts: &Mounts) -> ExecOutput {
    exec_with(&["sh", "-c", script], b"", mounts, &DefaultHooks::new(0)).await
}

async fn sh(script: &str) -> ExecOutput {
    sh_in(script, &mounts()).await
}

fn text(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).unwrap_or("<invalid utf-8>")
}

/// Asserts stdout, stderr and the exit code at once so a failure shows all three.
#[track_caller]
fn check(out: &ExecOutput, stdout: &str, stderr: &str, code: i32) {
    assert_eq!(
        (text(&out.stdout), text(&out.stderr), out.exit_code),
        (stdout, stderr, code)
    );
}

/// Records kill calls; the clock is fixed.
#[derive(Default)]
struct RecordingHooks {
    kills: Mutex<Vec<(String, String)>>,
}

impl ShellHooks for RecordingHooks {
    fn now_unix(&self) -> u64 {
        1_700_000_000
    }

    fn kill(&self, pid: &str, signal: &str) -> Result<(), KillError> {
        self.kills
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((pid.to_string(), signal.to_string()));
        if pid == "999" {
            Err(KillError::NotPermitted {
                pid: pid.to_string(),
            })
        } else {
            Ok(())
        }
    }
}

// ---- the public API contract ----

#[test]
fn the_run_future_is_send() {
    fn assert_send<T: Send>(_: &T) {}
    let (m, hooks, env, args) = (
        mounts(),
        DefaultHooks::new(0),
        BTreeMap::new(),
        argv(&["true"]),
    );
    let fut = run(&args, b"", &env, "/", &m, &hooks);
    assert_send(&fut);
}

#[tokio::test]
async fn the_harness_sentinel_token_round_trips_exactly() {
    let m = mounts();
    let out = sh_in("printf %s TOKEN > /sandbox/.chaos", &m).await;
    check(&out, "", "", 0);
    let out = exec_with(&["cat", "/sandbox/.chaos"], b"", &m, &DefaultHooks::new(0)).await;
    check(&out, "TOKEN", "", 0);
}

#[tokio::test]
async fn the_harness_start_counter_counts_each_start() {
    let m = mounts();
    let script = "echo start >> /sandbox/.starts; wc -l < /sandbox/.starts";
    check(&sh_in(script, &m).await, "1\n", "", 0);
    check(&sh_in(script, &m).await, "2\n", "", 0);
}

#[tokio::test]
async fn bin_sh_with_a_directory_runs_the_shell() {
    let out = exec_with(
        &["/bin/sh", "-c", "echo $0"],
        b"",
        &mounts(),
        &DefaultHooks::new(0),
    )
    .await;
    check(&out, "/bin/sh\n", "", 0);
}

#[tokio::test]
async fn a_bare_argv_runs_one_builtin_without_expansion() {
    let out = exec_with(
        &["/usr/bin/echo", "$HOME", "a  b"],
        b"",
        &mounts(),
        &DefaultHooks::new(0),
    )
    .await;
    check(&out, "$HOME a  b\n", "", 0);
}

#[tokio::test]
async fn a_bare_argv_naming_no_builtin_fails_like_the_runtime() {
    let out = exec_with(&["nosuch", "x"], b"", &mounts(), &DefaultHooks::new(0)).await;
    assert_eq!(out.exit_code, 127);
    assert!(text(&out.stderr).contains("exec: \"nosuch\": executable file not found in $PATH"));
}

#[tokio::test]
async fn an_empty_argv_fails() {
    let out = exec_with(&[], b"", &mounts(), &DefaultHooks::new(0)).await;
    assert_eq!(out.exit_code, 127);
    assert!(!out.stderr.is_empty());
}

#[tokio::test]
async fn sh_without_c_reads_the_script_from_stdin() {
    let out = exec_with(
        &["sh"],
        b"echo one\necho two $#\n",
        &mounts(),
        &DefaultHooks::new(0),
    )
    .await;
    check(&out, "one\ntwo 0\n", "", 0);
}

#[tokio::test]
async fn sh_runs_a_script_file_with_arguments() {
    let m = mounts();
    let out = sh_in("echo 'echo \"$0:$1:$#\"; exit 4' > /s.sh; sh /s.sh a b", &m).await;
    check(&out, "/s.sh:a:2\n", "", 4);
}

#[tokio::test]
async fn the_environment_is_visible_and_exported_to_nested_shells() {
    let env = BTreeMap::from([("GREETING".to_string(), "hello world".to_string())]);
    let args = argv(&[
        "sh",
        "-c",
        "echo $GREETING; x=local; sh -c 'echo [$x] $GREETING'",
    ]);
    let out = run(&args, b"", &env, "/", &mounts(), &DefaultHooks::new(0)).await;
    check(&out, "hello world\n[] hello world\n", "", 0);
}

#[tokio::test]
async fn the_workdir_is_the_initial_directory() {
    let m = mounts();
    let args = argv(&["sh", "-c", "pwd; echo x > rel; cat /sandbox/rel"]);
    let out = run(
        &args,
        b"",
        &BTreeMap::new(),
        "/sandbox",
        &m,
        &DefaultHooks::new(0),
    )
    .await;
    check(&out, "/sandbox\nx\n", "", 0);
}

// ---- volumes and mounts ----

#[test]
fn a_volume_write_creates_parents_and_read_returns_the_bytes() {
    let v = Volume::new();
    v.write("/a/b/c.txt", b"data");
    assert_eq!(v.read("a/b/c.txt").as_deref(), Some(&b"data"[..]));
    assert!(v.exists("/a/b"));
    assert_eq!(v.read("/a/b"), None, "a directory is not a file");
    assert_eq!(v.read("/missing"), None);
}

#[test]
fn a_volume_write_replaces_and_append_extends() {
    let v = Volume::new();
    v.write("f", b"one");
    v.write("f", b"two");
    v.append("f", b"three");
    v.append("new/g", b"x");
    assert_eq!(v.read("f").as_deref(), Some(&b"twothree"[..]));
    assert_eq!(v.read("new/g").as_deref(), Some(&b"x"[..]));
}

#[test]
fn a_volume_lists_sorted_names_and_only_for_directories() {
    let v = Volume::new();
    v.write("/d/b", b"");
    v.write("/d/a", b"");
    v.write("/d/c/x", b"");
    assert_eq!(v.list("/d"), Some(vec!["a".into(), "b".into(), "c".into()]));
    assert_eq!(v.list("/"), Some(vec!["d".into()]));
    assert_eq!(v.list("/d/a"), None);
    assert_eq!(v.list("/nope"), None);
}

#[test]
fn a_volume_remove_deletes_whole_trees_and_reports_whether_anything_was_there() {
    let v = Volume::new();
    v.write("/d/e/f", b"x");
    assert!(v.remove("/d"));
    assert!(!v.exists("/d/e/f"));
    assert!(!v.remove("/d"));
    assert!(!v.remove("/"), "the root cannot be removed");
}

#[tokio::test]
async fn a_file_written_through_one_mounts_is_visible_through_another_sharing_the_volume() {
    let pvc = Volume::new();
    let mut first_pod = Mounts::new();
    first_pod.mount("/", Volume::new(), false);
    first_pod.mount("/data", pvc.clone(), false);
    check(
        &sh_in("echo kept > /data/state", &first_pod).await,
        "",
        "",
        0,
    );

    // The replacement pod has a new root file system but mounts the same claim.
    let mut second_pod = Mounts::new();
    second_pod.mount("/", Volume::new(), false);
    second_pod.mount("/data", pvc.clone(), false);
    check(
        &sh_in("cat /data/state", &second_pod).await,
        "kept\n",
        "",
        0,
    );
    assert_eq!(pvc.read("/state").as_deref(), Some(&b"kept\n"[..]));

    let mut fresh_pod = Mounts::new();
    fresh_pod.mount("/", Volume::new(), false);
    fresh_pod.mount("/data", Volume::new(), false);
    let out = sh_in("cat /data/state", &fresh_pod).await;
    check(&out, "", "cat: /data/state: No such file or directory\n", 1);
}

#[tokio::test]
async fn the_longest_mount_prefix_wins_on_component_boundaries() {
    let (root, data, sub) = (Volume::new(), Volume::new(), Volume::new());
    let mut m = Mounts::new();
    m.mount("/", root.clone(), false);
    m.mount("/data", data.clone(), false);
    m.mount("/data/sub/", sub.clone(), false);
    let script = "echo r > /data2; echo d > /data/f; echo s > /data/sub/f; echo t > /data/subx";
    check(&sh_in(script, &m).await, "", "", 0);
    assert_eq!(
        root.read("/data2").as_deref(),
        Some(&b"r\n"[..]),
        "/data2 is not under /data"
    );
    assert_eq!(data.read("/f").as_deref(), Some(&b"d\n"[..]));
    assert_eq!(sub.read("/f").as_deref(), Some(&b"s\n"[..]));
    assert_eq!(
        data.read("/subx").as_deref(),
        Some(&b"t\n"[..]),
        "/data/subx is not under /data/sub"
    );
    assert_eq!(
        root.list("/"),
        Some(vec!["data2".to_string()]),
        "nothing leaked into the root"
    );
}

#[tokio::test]
async fn a_path_under_no_mount_does_not_exist() {
    let mut m = Mounts::new();
    m.mount("/only", Volume::new(), false);
    let out = sh_in(
        "echo x > /elsewhere; cat /elsewhere; ls /; test -d /only && echo dir",
        &m,
    )
    .await;
    check(
        &out,
        "only\ndir\n",
        "sh: 1: cannot create /elsewhere: Directory nonexistent\ncat: /elsewhere: No such file or directory\n",
        0,
    );
}

#[tokio::test]
async fn mounting_again_at_a_path_replaces_the_earlier_volume() {
    let (old, new) = (Volume::new(), Volume::new());
    old.write("f", b"old");
    new.write("f", b"new");
    let mut m = mounts();
    m.mount("/v", old, false);
    m.mount("/v/", new, false);
    check(&sh_in("cat /v/f", &m).await, "new", "", 0);
}

#[tokio::test]
async fn mount_points_show_up_in_listings_of_their_parent() {
    let mut m = mounts();
    m.mount("/mnt/deep/vol", Volume::new(), false);
    let out = sh_in("ls /; ls /mnt; test -d /mnt/deep && echo yes", &m).await;
    check(&out, "mnt\nsandbox\ndeep\nyes\n", "", 0);
}

// ---- read-only mounts ----

fn read_only_mounts(seed: &Volume) -> Mounts {
    let mut m = mounts();
    m.mount("/ro", seed.clone(), true);
    m
}

#[tokio::test]
async fn a_redirect_into_a_read_only_mount_fails_with_read_only_file_system() {
    let vol = Volume::new();
    vol.write("existing", b"keep");
    let m = read_only_mounts(&vol);
    let out = sh_in(
        "echo x > /ro/new; echo $?; echo y >> /ro/existing; echo $?",
        &m,
    )
    .await;
    check(
        &out,
        "2\n2\n",
        "sh: 1: cannot create /ro/new: Read-only file system\n\
         sh: 1: cannot create /ro/existing: Read-only file system\n",
        0,
    );
    assert!(!vol.exists("new"));
    assert_eq!(vol.read("existing").as_deref(), Some(&b"keep"[..]));
}

#[tokio::test]
async fn a_failed_redirect_is_the_exit_status_of_sh_c() {
    let m = read_only_mounts(&Volume::new());
    let out = sh_in("echo x > /ro/new", &m).await;
    check(
        &out,
        "",
        "sh: 1: cannot create /ro/new: Read-only file system\n",
        2,
    );
}

#[tokio::test]
async fn utilities_cannot_change_a_read_only_mount_but_can_read_it() {
    let vol = Volume::new();
    vol.write("d/f", b"content");
    let m = read_only_mounts(&vol);
    let out = sh_in(
        "touch /ro/t; mkdir /ro/n; rm /ro/d/f; rm -r /ro/d; mkdir -p /ro/d; cat /ro/d/f; rm /ro/missing",
        &m,
    )
    .await;
    check(
        &out,
        "content",
        "touch: cannot touch '/ro/t': Read-only file system\n\
         mkdir: cannot create directory '/ro/n': Read-only file system\n\
         rm: cannot remove '/ro/d/f': Read-only file system\n\
         rm: cannot remove '/ro/d': Read-only file system\n\
         rm: cannot remove '/ro/missing': No such file or directory\n",
        1,
    );
    assert_eq!(vol.read("d/f").as_deref(), Some(&b"content"[..]));
}

// ---- lists, status and control flow ----

#[tokio::test]
async fn a_missing_command_exits_127_with_not_found() {
    check(
        &sh("nosuch arg").await,
        "",
        "sh: 1: nosuch: not found\n",
        127,
    );
}

#[tokio::test]
async fn not_found_names_the_line_of_the_command() {
    let out = sh("echo a\n\nmissing; echo $?").await;
    check(&out, "a\n127\n", "sh: 3: missing: not found\n", 0);
}

#[tokio::test]
async fn semicolons_and_newlines_separate_commands() {
    check(
        &sh("echo a; echo b\necho c;\n\necho d").await,
        "a\nb\nc\nd\n",
        "",
        0,
    );
}

#[rstest]
#[case::and_after_success("true && echo yes", "yes\n", 0)]
#[case::and_after_failure("false && echo yes", "", 1)]
#[case::or_after_failure("false || echo yes", "yes\n", 0)]
#[case::or_after_success("true || echo yes", "", 0)]
#[case::left_associative("false && echo a || echo b", "b\n", 0)]
#[case::left_associative_2("true || echo a && echo b", "b\n", 0)]
#[case::failure_falls_through("false || false && echo a", "", 1)]
#[case::newline_after_operator("true &&\n echo cont", "cont\n", 0)]
#[tokio::test]
async fn and_or_lists_short_circuit(#[case] script: &str, #[case] stdout: &str, #[case] code: i32) {
    check(&sh(script).await, stdout, "", code);
}

#[tokio::test]
async fn bang_negates_the_status() {
    check(
        &sh("! true; echo $?; ! false; echo $?").await,
        "1\n0\n",
        "",
        0,
    );
}

#[tokio::test]
async fn dollar_question_mark_holds_the_last_status() {
    let out = sh("false; echo $?; echo $?; nosuch 2>/dev/null; echo $?; (exit 7); echo $?").await;
    check(&out, "1\n0\n127\n7\n", "", 0);
}

#[tokio::test]
async fn the_script_status_is_the_last_commands() {
    check(&sh("true; false").await, "", "", 1);
    check(&sh("false; true").await, "", "", 0);
    check(&sh("").await, "", "", 0);
}

#[rstest]
#[case::plain("exit 3; echo no", 3)]
#[case::wraps_at_256("exit 257", 1)]
#[case::default_is_last_status("false; exit", 1)]
#[case::inside_a_group("{ exit 5; }; echo no", 5)]
#[case::inside_a_loop("while true; do exit 6; done", 6)]
#[tokio::test]
async fn exit_ends_the_script_with_its_status(#[case] script: &str, #[case] code: i32) {
    check(&sh(script).await, "", "", code);
}

#[tokio::test]
async fn exit_in_a_subshell_or_pipeline_ends_only_that_part() {
    check(
        &sh("(exit 4); echo $?; exit 9 | true; echo $?").await,
        "4\n0\n",
        "",
        0,
    );
}

#[tokio::test]
async fn exit_rejects_a_non_number() {
    check(
        &sh("exit abc; echo no").await,
        "",
        "sh: 1: exit: Illegal number: abc\n",
        2,
    );
}

#[tokio::test]
async fn braces_group_and_parentheses_isolate_variables() {
    let out = sh("{ x=1; echo a; }; echo $x; (y=2; cd /sandbox); echo \"[$y]\"; pwd").await;
    check(&out, "a\n1\n[]\n/\n", "", 0);
}

#[tokio::test]
async fn if_picks_the_first_true_branch() {
    let script = "for v in 1 2 3; do if [ $v = 1 ]; then echo one; elif [ $v = 2 ]; then echo two; else echo other; fi; done";
    check(&sh(script).await, "one\ntwo\nother\n", "", 0);
    check(&sh("if false; then echo x; fi").await, "", "", 0);
}

#[tokio::test]
async fn while_until_and_for_loops_iterate() {
    let script = "i=; while [ \"$i\" != xxx ]; do i=${i}x; done; echo $i\n\
                  until [ -n \"$s\" ]; do s=set; echo once; done\n\
                  for w in a 'b c'; do echo \"<$w>\"; done";
    check(&sh(script).await, "xxx\nonce\n<a>\n<b c>\n", "", 0);
}

#[tokio::test]
async fn break_and_continue_leave_the_right_loop() {
    let script = "for i in 1 2 3; do for j in a b; do [ $j = b ] && continue 2; [ $i = 3 ] && break 2; echo $i$j; done; done; echo end";
    check(&sh(script).await, "1a\n2a\nend\n", "", 0);
}

#[tokio::test]
async fn set_e_stops_at_the_first_unchecked_failure() {
    let out =
        sh("set -e; false || true; ! true; if false; then :; fi; echo ok; false; echo no").await;
    check(&out, "ok\n", "", 1);
    check(
        &exec_with(
            &["sh", "-e", "-c", "false; echo no"],
            b"",
            &mounts(),
            &DefaultHooks::new(0),
        )
        .await,
        "",
        "",
        1,
    );
}

// ---- syntax errors ----

#[rstest]
#[case::unterminated_double_quote(
    "echo \"abc",
    "sh: 1: Syntax error: Unterminated quoted string\n"
)]
#[case::unterminated_single_quote("echo 'abc", "sh: 1: Syntax error: Unterminated quoted string\n")]
#[case::stray_fi("echo a; fi", "sh: 1: Syntax error: \"fi\" unexpected\n")]
#[case::missing_fi(
    "if true; then echo",
    "sh: 1: Syntax error: end of file unexpected (expecting \"fi\")\n"
)]
#[case::empty_then("if true; then\nfi", "sh: 2: Syntax error: \"fi\" unexpected\n")]
#[case::empty_pipe_side("echo a | ; echo", "sh: 1: Syntax error: \";\" unexpected\n")]
#[case::dangling_and("true &&", "sh: 1: Syntax error: end of file unexpected\n")]
#[case::unclosed_subshell(
    "(echo a",
    "sh: 1: Syntax error: end of file unexpected (expecting \")\")\n"
)]
#[case::unclosed_substitution(
    "echo $(echo a",
    "sh: 1: Syntax error: end of file unexpected (expecting \")\")\n"
)]
#[case::bad_substitution("echo ${}", "sh: 1: Syntax error: Bad substitution\n")]
#[case::background(
    "sleep 1 &",
    "sh: 1: Syntax error: background jobs (&) are not supported\n"
)]
#[case::heredoc(
    "cat <<EOF\nx\nEOF",
    "sh: 1: Syntax error: here-documents (<<) are not supported\n"
)]
#[case::function(
    "f() { :; }",
    "sh: 1: Syntax error: function definitions are not supported\n"
)]
#[tokio::test]
async fn a_syntax_error_is_reported_with_status_2(#[case] script: &str, #[case] stderr: &str) {
    check(&sh(script).await, "", stderr, 2);
}

#[tokio::test]
async fn lines_before_a_syntax_error_still_run() {
    check(
        &sh("echo a\necho b\nfi").await,
        "a\nb\n",
        "sh: 3: Syntax error: \"fi\" unexpected\n",
        2,
    );
}

#[tokio::test]
async fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let script = format!("{}echo x{}", "(".repeat(5000), ")".repeat(5000));
    let out = sh(&script).await;
    assert_eq!(out.exit_code, 2);
    assert!(text(&out.stderr).contains("nesting too deep"));
    let subst = format!("{}x{}", "$(echo ".repeat(5000), ")".repeat(5000));
    assert_eq!(sh(&subst).await.exit_code, 2);
}

#[tokio::test]
async fn moderate_nesting_works() {
    let script = format!("{}echo x{}", "( ".repeat(30), " )".repeat(30));
    check(&sh(&script).await, "x\n", "", 0);
    let nested = "sh -c 'sh -c \"sh -c \\\"echo deep\\\"\"'";
    check(&sh(nested).await, "deep\n", "", 0);
}

#[tokio::test]
async fn arbitrary_input_never_panics() {
    // A deterministic pseudo-random walk over the characters the lexer treats specially.
    let alphabet: Vec<char> = "ab $(){}[]|&;<>'\"\\`#=!-:?+%*@0123\n\t".chars().collect();
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let m = mounts();
    for len in 0..400 {
        let script: String = (0..len % 40)
            .map(|_| {
                seed = seed
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                alphabet[(seed >> 33) as usize % alphabet.len()]
            })
            .collect();
        let out = sh_in(&script, &m).await;
        assert!(
            (0..=255).contains(&out.exit_code),
            "{script:?} gave {}",
            out.exit_code
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_loop_that_never_sleeps_is_stopped_instead_of_hanging() {
    let out = sh("while true; do :; done; echo unreachable").await;
    assert_eq!(out.exit_code, 2);
    assert!(out.stdout.is_empty());
    assert!(text(&out.stderr).contains("without a sleep"));
}

// ---- quoting and expansion ----

#[tokio::test]
async fn single_quotes_keep_everything_literal() {
    check(
        &sh(r#"echo '$HOME "x" \n # ;|&'"#).await,
        "$HOME \"x\" \\n # ;|&\n",
        "",
        0,
    );
}

#[tokio::test]
async fn double_quotes_expand_variables_and_honour_their_escapes() {
    let out = sh(r#"v=val; echo "a $v ${v}x \"q\" \\ \$v \q 'sq'""#).await;
    check(&out, "a val valx \"q\" \\ $v \\q 'sq'\n", "", 0);
}

#[tokio::test]
async fn a_backslash_outside_quotes_escapes_one_character() {
    check(
        &sh(r"echo a\ b \$x \\ \; c\
d")
        .await,
        "a b $x \\ ; cd\n",
        "",
        0,
    );
}

#[tokio::test]
async fn a_hash_starts_a_comment_only_at_a_word_start() {
    check(&sh("echo a#b # c; echo d\necho e").await, "a#b\ne\n", "", 0);
}

#[tokio::test]
async fn unquoted_expansions_are_split_into_fields_and_quoted_ones_are_not() {
    let script = r#"x="a   b"; e=; for f in $x; do echo "<$f>"; done; for f in "$x" $e "$e"; do echo "[$f]"; done"#;
    check(&sh(script).await, "<a>\n<b>\n[a   b]\n[]\n", "", 0);
}

#[tokio::test]
async fn positional_parameters_come_from_the_sh_c_arguments() {
    let args = [
        "sh",
        "-c",
        r#"echo "$0|$1|$2|$#|$*"; for a in "$@"; do echo "<$a>"; done"#,
        "name",
        "a b",
        "c",
    ];
    let out = exec_with(&args, b"", &mounts(), &DefaultHooks::new(0)).await;
    check(&out, "name|a b|c|2|a b c\n<a b>\n<c>\n", "", 0);
}

#[tokio::test]
async fn parameter_operators_default_assign_alternate_and_length() {
    let script = r#"e=; echo ${u:-d1} ${e:-d2} "${e-d3}" ${u-d4}; echo ${u:=set} $u; echo ${u:+alt} "${n:+alt}"; echo ${#u}"#;
    check(&sh(script).await, "d1 d2  d4\nset set\nalt \n3\n", "", 0);
}

#[tokio::test]
async fn an_unset_parameter_with_question_mark_aborts_the_script() {
    check(
        &sh("echo ${X:?is required}; echo no").await,
        "",
        "sh: 1: X: is required\n",
        2,
    );
}

#[tokio::test]
async fn command_substitution_captures_stdout_without_trailing_newlines() {
    let out =
        sh("x=$(echo a; echo b; echo); echo \"[$x]\"; echo `echo back` \"$(printf '%s' q)\"").await;
    check(&out, "[a\nb]\nback q\n", "", 0);
    check(&sh("x=$(exit 3); echo $?").await, "3\n", "", 0);
}

#[tokio::test]
async fn assignments_before_a_command_apply_to_it_only() {
    let out = sh("A=1; A=2 sh -c 'echo $A'; echo $A; B=x env; export C=y; env").await;
    check(&out, "2\n1\nB=x\nPWD=/\nC=y\nPWD=/\n", "", 0);
}

#[tokio::test]
async fn tilde_is_not_expanded_and_an_unmatched_pattern_stays_as_written() {
    check(&sh("echo ~ /x?z /s*").await, "~ /x?z /sandbox\n", "", 0);
}

// ---- redirections ----

#[tokio::test]
async fn output_redirection_creates_and_truncates() {
    let m = mounts();
    check(
        &sh_in(
            "echo first > /sandbox/f; echo second > /sandbox/f; cat /sandbox/f",
            &m,
        )
        .await,
        "second\n",
        "",
        0,
    );
}

#[tokio::test]
async fn append_redirection_adds_to_the_end() {
    let m = mounts();
    let out = sh_in(
        "echo a >> /sandbox/f; echo b >>/sandbox/f; cat /sandbox/f",
        &m,
    )
    .await;
    check(&out, "a\nb\n", "", 0);
}

#[tokio::test]
async fn input_redirection_feeds_stdin() {
    let m = mounts();
    check(
        &sh_in("printf 'x\\ny\\n' > /in; cat < /in; wc -l </in", &m).await,
        "x\ny\n2\n",
        "",
        0,
    );
}

#[tokio::test]
async fn stderr_goes_to_a_file_or_follows_stdout_in_order() {
    let m = mounts();
    let script = "nosuch 2> /e; cat /e; { echo out; nosuch; } > /both 2>&1; cat /both; nosuch 2>&1 > /only-out";
    let out = sh_in(script, &m).await;
    check(
        &out,
        "sh: 1: nosuch: not found\nout\nsh: 1: nosuch: not found\nsh: 1: nosuch: not found\n",
        "",
        127,
    );
    assert_eq!(text(&m.file_bytes("/only-out")), "");
}

#[tokio::test]
async fn stdout_can_be_sent_to_stderr() {
    check(
        &sh("echo to-err >&2; echo to-out 1>&2 2>/dev/null").await,
        "",
        "to-err\nto-out\n",
        0,
    );
}

#[tokio::test]
async fn dev_null_swallows_output_and_reads_as_empty() {
    check(
        &sh("echo gone >/dev/null; nosuch 2>/dev/null; cat /dev/null; wc -c < /dev/null").await,
        "0\n",
        "",
        0,
    );
}

#[tokio::test]
async fn a_redirect_into_a_missing_directory_says_directory_nonexistent() {
    let out = sh("echo x > /no/such/f; echo $?").await;
    check(
        &out,
        "2\n",
        "sh: 1: cannot create /no/such/f: Directory nonexistent\n",
        0,
    );
}

#[tokio::test]
async fn reading_a_missing_file_says_no_such_file() {
    let out = sh("cat < /missing; echo $?").await;
    check(
        &out,
        "2\n",
        "sh: 1: cannot open /missing: No such file\n",
        0,
    );
}

#[tokio::test]
async fn a_redirect_on_a_compound_command_covers_all_of_it() {
    let m = mounts();
    let out = sh_in(
        "for i in 1 2; do echo $i; done > /l; if true; then echo x; fi >> /l; cat /l",
        &m,
    )
    .await;
    check(&out, "1\n2\nx\n", "", 0);
}

// ---- pipes ----

#[tokio::test]
async fn a_pipe_feeds_stdout_into_the_next_command() {
    check(
        &sh("printf 'a\\nb\\nc\\n' | tail -n 2 | head -n 1").await,
        "b\n",
        "",
        0,
    );
}

#[tokio::test]
async fn a_pipeline_has_the_status_of_its_last_command() {
    check(
        &sh("false | true; echo $?; true | false; echo $?").await,
        "0\n1\n",
        "",
        0,
    );
}

#[tokio::test]
async fn pipeline_elements_are_subshells() {
    check(
        &sh("x=1; x=2 | true; echo hi | read x; echo $x").await,
        "1\n",
        "",
        0,
    );
}

#[tokio::test]
async fn stderr_is_not_piped() {
    check(
        &sh("nosuch | wc -c").await,
        "0\n",
        "sh: 1: nosuch: not found\n",
        0,
    );
}

// ---- builtins ----

#[tokio::test]
async fn echo_joins_arguments_and_n_suppresses_the_newline() {
    check(
        &sh(r"echo a  b; echo -n c; echo; echo 'x\ny' -n").await,
        "a b\nc\nx\\ny -n\n",
        "",
        0,
    );
}

#[rstest]
#[case::strings_and_numbers(r#"printf '%s=%d%%\n' a 5"#, "a=5%\n")]
#[case::escapes(r#"printf 'a\tb\\c\n'"#, "a\tb\\c\n")]
#[case::format_reused_for_remaining_args(r#"printf '%s,' a b c"#, "a,b,c,")]
#[case::missing_args_are_empty_or_zero(r#"printf '[%s|%d]\n' x"#, "[x|0]\n")]
#[case::width_and_flags(
    r#"printf '%5s|%-3s|%03d|%x|%.2s' ab c 7 255 xyz"#,
    "   ab|c  |007|ff|xy"
)]
#[case::no_conversions_prints_once(r#"printf 'once\n' a b"#, "once\n")]
#[case::negative(r#"printf '%d %5d' -3 -42"#, "-3   -42")]
#[tokio::test]
async fn printf_formats_its_arguments(#[case] script: &str, #[case] stdout: &str) {
    check(&sh(script).await, stdout, "", 0);
}

#[tokio::test]
async fn printf_reports_a_non_numeric_argument() {
    check(
        &sh("printf '%d\\n' abc").await,
        "0\n",
        "sh: 1: printf: abc: expected numeric value\n",
        1,
    );
}

#[tokio::test]
async fn cat_concatenates_files_and_stdin() {
    let m = mounts();
    let out = exec_with(
        &[
            "sh",
            "-c",
            "echo 1 > /a; echo 3 > /c; cat /a - /c; cat /a /missing /c",
        ],
        b"2\n",
        &m,
        &DefaultHooks::new(0),
    )
    .await;
    check(
        &out,
        "1\n2\n3\n1\n3\n",
        "cat: /missing: No such file or directory\n",
        1,
    );
    check(&sh_in("cat /", &m).await, "", "cat: /: Is a directory\n", 1);
}

#[tokio::test]
async fn cat_without_arguments_copies_stdin() {
    let out = exec_with(&["cat"], b"stdin data", &mounts(), &DefaultHooks::new(0)).await;
    check(&out, "stdin data", "", 0);
}

#[rstest]
#[case::exists("test -e /sandbox/f", 0)]
#[case::missing("test -e /sandbox/none", 1)]
#[case::is_file("test -f /sandbox/f", 0)]
#[case::dir_is_not_file("test -f /sandbox", 1)]
#[case::is_dir("test -d /sandbox", 0)]
#[case::file_is_not_dir("[ -d /sandbox/f ]", 1)]
#[case::non_empty("[ -s /sandbox/f ]", 0)]
#[case::empty_file("[ -s /sandbox/empty ]", 1)]
#[case::zero_length("[ -z '' ]", 0)]
#[case::non_zero_length("[ -n '' ]", 1)]
#[case::one_arg_string("[ x ]", 0)]
#[case::no_args("[ ]", 1)]
#[case::string_equal("[ a = a ]", 0)]
#[case::string_differ("[ a != a ]", 1)]
#[case::eq("[ 10 -eq 10 ]", 0)]
#[case::ne("[ 1 -ne 1 ]", 1)]
#[case::lt("[ 2 -lt 10 ]", 0)]
#[case::le("[ 3 -le 2 ]", 1)]
#[case::gt("[ -1 -gt -2 ]", 0)]
#[case::ge("[ 2 -ge 3 ]", 1)]
#[case::not("[ ! -e /sandbox/none ]", 0)]
#[case::and("[ -f /sandbox/f -a -d /sandbox ]", 0)]
#[case::or("[ -f /sandbox/none -o -d /sandbox/none ]", 1)]
#[case::parens(r"[ \( a = b \) -o \( -n x \) ]", 0)]
#[case::not_parens(r"[ ! \( a = a \) ]", 1)]
#[case::dev_null("[ -e /dev/null ]", 0)]
#[tokio::test]
async fn test_evaluates_expressions(#[case] expr: &str, #[case] code: i32) {
    let m = mounts();
    m.seed_file("/sandbox/f", b"data");
    m.seed_file("/sandbox/empty", b"");
    let out = sh_in(expr, &m).await;
    check(&out, "", "", code);
}

#[rstest]
#[case::missing_bracket("[ 1 = 1", "sh: 1: [: missing ]\n")]
#[case::illegal_number("test 1 -eq a", "sh: 1: test: Illegal number: a\n")]
#[case::unknown_operator("test -q x", "sh: 1: test: -q: unexpected operator\n")]
#[tokio::test]
async fn test_reports_bad_expressions_with_status_2(#[case] script: &str, #[case] stderr: &str) {
    check(&sh(script).await, "", stderr, 2);
}

#[tokio::test]
async fn mkdir_creates_directories_and_p_creates_parents() {
    let m = mounts();
    let out = sh_in(
        "mkdir /d; mkdir -p /x/y/z /d; mkdir /d; mkdir /a/b; mkdir; ls /x/y",
        &m,
    )
    .await;
    check(
        &out,
        "z\n",
        "mkdir: cannot create directory '/d': File exists\n\
         mkdir: cannot create directory '/a/b': No such file or directory\n\
         mkdir: missing operand\n",
        0,
    );
}

#[tokio::test]
async fn rm_removes_files_and_r_removes_trees() {
    let m = mounts();
    let script = "mkdir -p /d/e; touch /d/e/f /g; rm /g; rm /d; rm -r /d; ls /; rm /g; rm -f /g; echo $?; rm -rf /sandbox/nothing; echo $?";
    let out = sh_in(script, &m).await;
    check(
        &out,
        "sandbox\n0\n0\n",
        "rm: cannot remove '/d': Is a directory\nrm: cannot remove '/g': No such file or directory\n",
        0,
    );
}

#[tokio::test]
async fn rm_refuses_the_root_and_empties_but_keeps_a_mount_point() {
    let m = mounts();
    let out = sh_in("touch /sandbox/a; rm -rf /; echo $?; rm -rf /sandbox; echo $?; ls /sandbox; test -d /sandbox && echo kept", &m).await;
    check(
        &out,
        "1\n1\nkept\n",
        "rm: it is dangerous to operate recursively on '/'\n\
         rm: use --no-preserve-root to override this failsafe\n\
         rm: cannot remove '/sandbox': Device or resource busy\n",
        0,
    );
}

#[tokio::test]
async fn ls_lists_sorted_names_one_per_line() {
    let m = mounts();
    let script = "cd /sandbox; touch b a .hidden; mkdir c; ls; echo --; ls -a; echo --; ls -A c; ls a c; ls /missing; echo $?";
    let out = sh_in(script, &m).await;
    check(
        &out,
        "a\nb\nc\n--\n.\n..\n.hidden\na\nb\nc\n--\na\n\nc:\n2\n",
        "ls: cannot access '/missing': No such file or directory\n",
        0,
    );
}

#[tokio::test]
async fn touch_creates_an_empty_file_and_keeps_an_existing_one() {
    let m = mounts();
    let out = sh_in(
        "echo keep > /f; touch /f /new; cat /f; wc -c < /new; touch /no/dir/x",
        &m,
    )
    .await;
    check(
        &out,
        "keep\n0\n",
        "touch: cannot touch '/no/dir/x': No such file or directory\n",
        1,
    );
}

#[tokio::test(start_paused = true)]
async fn sleep_advances_paused_time_exactly() {
    let start = Instant::now();
    check(&sh("sleep 2; sleep 0.25; sleep 1.5s").await, "", "", 0);
    assert_eq!(start.elapsed(), Duration::from_millis(3750));
    let start = Instant::now();
    check(&sh("sleep 1m 1").await, "", "", 0);
    assert_eq!(start.elapsed(), Duration::from_secs(61));
}

#[tokio::test(start_paused = true)]
async fn sleep_rejects_bad_intervals_without_waiting() {
    let start = Instant::now();
    check(
        &sh("sleep abc").await,
        "",
        "sleep: invalid time interval 'abc'\n",
        1,
    );
    check(&sh("sleep").await, "", "sleep: missing operand\n", 1);
    check(
        &sh("sleep -1").await,
        "",
        "sleep: invalid time interval '-1'\n",
        1,
    );
    assert_eq!(start.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_sleeping_loop_is_not_stopped_by_the_busy_limit() {
    // 1100 iterations of 1000 commands each: beyond the limit in total, but each sleeps.
    let inner = "x ".repeat(1000);
    let script = format!(
        "i=; while [ ${{#i}} -lt 1100 ]; do i=${{i}}x; for _ in {inner}; do :; done; sleep 1; done; echo ${{#i}}"
    );
    let start = Instant::now();
    check(&sh(&script).await, "1100\n", "", 0);
    assert_eq!(start.elapsed(), Duration::from_secs(1100));
}

#[tokio::test]
async fn kill_reaches_the_hooks_with_the_signal_name() {
    let hooks = RecordingHooks::default();
    let script =
        "kill 10; kill -9 11; kill -s INT 12; kill -SIGUSR1 13; kill -term 14 15; kill -0 16";
    let out = exec_with(&["sh", "-c", script], b"", &mounts(), &hooks).await;
    check(&out, "", "", 0);
    let kills = hooks
        .kills
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let expected = [
        ("10", "TERM"),
        ("11", "KILL"),
        ("12", "INT"),
        ("13", "USR1"),
        ("14", "TERM"),
        ("15", "TERM"),
        ("16", "0"),
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(p, s)| (p.to_string(), s.to_string()))
        .collect();
    assert_eq!(kills, expected);
}

#[tokio::test]
async fn a_kill_the_hooks_refuse_prints_their_message_with_status_1() {
    let hooks = RecordingHooks::default();
    let out = exec_with(&["sh", "-c", "kill 999 5; echo $?"], b"", &mounts(), &hooks).await;
    check(&out, "1\n", "kill: (999) - Operation not permitted\n", 0);
    assert_eq!(
        hooks.kills.lock().unwrap_or_else(|e| e.into_inner()).len(),
        2
    );
    let out = exec_with(&["kill", "42"], b"", &mounts(), &DefaultHooks::new(0)).await;
    check(&out, "", "kill: (42) - No such process\n", 1);
}

#[tokio::test]
async fn kill_rejects_unknown_signals_and_missing_pids() {
    let hooks = RecordingHooks::default();
    let out = exec_with(
        &["sh", "-c", "kill -FOO 1; echo $?; kill -9; echo $?"],
        b"",
        &mounts(),
        &hooks,
    )
    .await;
    assert_eq!(text(&out.stdout), "2\n2\n");
    assert!(
        text(&out.stderr)
            .starts_with("sh: 1: kill: invalid signal number or name: FOO\nsh: 1: kill: Usage:")
    );
    assert!(
        hooks
            .kills
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    );
}

#[tokio::test]
async fn date_plus_s_comes_from_the_hooks() {
    let out = exec_with(&["date", "+%s"], b"", &mounts(), &RecordingHooks::default()).await;
    check(&out, "1700000000\n", "", 0);
}

#[tokio::test]
async fn date_formats_the_hooks_clock_in_utc() {
    let hooks = RecordingHooks::default(); // 2023-11-14T22:13:20Z, a Tuesday
    let out = exec_with(
        &["sh", "-c", "date; date -R; date -u '+%F %T %j %a %B %y'"],
        b"",
        &mounts(),
        &hooks,
    )
    .await;
    check(
        &out,
        "Tue Nov 14 22:13:20 UTC 2023\nTue, 14 Nov 2023 22:13:20 +0000\n2023-11-14 22:13:20 318 Tue November 23\n",
        "",
        0,
    );
    let leap = exec_with(
        &["date", "+%F %j"],
        b"",
        &mounts(),
        &DefaultHooks::new(951_782_400),
    )
    .await;
    check(&leap, "2000-02-29 060\n", "", 0);
}

#[tokio::test(start_paused = true)]
async fn the_default_hooks_clock_follows_paused_time() {
    let hooks = DefaultHooks::new(1000);
    let m = mounts();
    let out = exec_with(
        &["sh", "-c", "date +%s; sleep 90; date +%s"],
        b"",
        &m,
        &hooks,
    )
    .await;
    check(&out, "1000\n1090\n", "", 0);
}

#[tokio::test]
async fn wc_counts_lines_words_and_bytes() {
    let m = mounts();
    let out = exec_with(
        &[
            "sh",
            "-c",
            "printf 'a b\\nc\\n' > /f; wc -l /f; wc -c < /f; wc -w /f; wc /f; wc; wc -l /f /f",
        ],
        b"x y\n",
        &m,
        &DefaultHooks::new(0),
    )
    .await;
    check(
        &out,
        "2 /f\n6\n3 /f\n2 3 6 /f\n      1       2       4\n 2 /f\n 2 /f\n 4 total\n",
        "",
        0,
    );
}

#[rstest]
#[case::head_n("head -n 2", "1\n2\n")]
#[case::head_short("head -2", "1\n2\n")]
#[case::head_default("head", "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n")]
#[case::head_all_but("head -n -10", "1\n2\n")]
#[case::head_bytes("head -c 3", "1\n2")]
#[case::tail_n("tail -n 2", "11\n12\n")]
#[case::tail_joined("tail -n1", "12\n")]
#[case::tail_from("tail -n +11", "11\n12\n")]
#[case::tail_default("tail", "3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n")]
#[case::tail_more_than_all("tail -n 100 | wc -l", "12\n")]
#[tokio::test]
async fn head_and_tail_select_lines(#[case] cmd: &str, #[case] stdout: &str) {
    let script = format!("printf '%s\\n' 1 2 3 4 5 6 7 8 9 10 11 12 | {cmd}");
    check(&sh(&script).await, stdout, "", 0);
}

#[tokio::test]
async fn head_reports_a_missing_file() {
    let out = sh("head -n 1 /missing").await;
    check(
        &out,
        "",
        "head: cannot open '/missing' for reading: No such file or directory\n",
        1,
    );
}

#[tokio::test]
async fn cd_changes_the_directory_for_relative_paths() {
    let m = mounts();
    let out = sh_in(
        "cd /sandbox; mkdir d; cd d; pwd; echo hi > f; cd ..; cat d/f; cd /missing; pwd",
        &m,
    )
    .await;
    check(
        &out,
        "/sandbox/d\nhi\n/sandbox\n",
        "sh: 1: cd: can't cd to /missing\n",
        0,
    );
}

#[tokio::test]
async fn read_assigns_fields_and_fails_at_end_of_input() {
    let out = exec_with(
        &[
            "sh",
            "-c",
            "while read a b; do echo \"<$a|$b>\"; done; echo $?",
        ],
        b"1 2 3\nx\n",
        &mounts(),
        &DefaultHooks::new(0),
    )
    .await;
    check(&out, "<1|2 3>\n<x|>\n0\n", "", 0);
}

#[tokio::test]
async fn set_and_shift_manage_positional_parameters() {
    check(
        &sh("set -- a b c; shift; echo $# $1; shift 5; echo $?").await,
        "2 b\n2\n",
        "sh: 1: shift: can't shift that many\n",
        0,
    );
}

#[tokio::test]
async fn eval_runs_its_arguments_as_a_script() {
    check(
        &sh("cmd='echo a; x=1'; eval $cmd; echo $x").await,
        "a\n1\n",
        "",
        0,
    );
}

#[tokio::test]
async fn export_lists_exported_variables() {
    check(
        &sh("export A='it''s' B; export -p").await,
        "export A='its'\nexport B\nexport PWD='/'\n",
        "",
        0,
    );
}

#[tokio::test]
async fn true_false_and_colon_set_the_status() {
    check(
        &sh("true; echo $?; false; echo $?; :; echo $?").await,
        "0\n1\n0\n",
        "",
        0,
    );
}

#[tokio::test]
async fn xtrace_prints_commands_to_stderr() {
    check(&sh("set -x; v=1; echo $v").await, "1\n", "+ echo 1\n", 0);
}

/// Test-only helpers on [`Mounts`] for seeding and inspecting files by absolute path.
impl Mounts {
    fn seed_file(&self, path: &str, data: &[u8]) {
        let _ = self.write(&fs::components(path), data, false);
    }

    fn file_bytes(&self, path: &str) -> Vec<u8> {
        self.read(&fs::components(path))
            .unwrap_or_else(|e| e.message().as_bytes().to_vec())
    }
}

/// Runs a script on a thread with half of tokio's default 2 MiB worker stack, so the nesting
/// limits are shown to leave a twofold margin even in a debug build.
fn run_on_small_stack(script: String) -> ExecOutput {
    let thread = std::thread::Builder::new()
        .stack_size(1 << 20)
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(sh(&script))
        })
        .expect("thread");
    thread.join().expect("the shell overflowed a 1 MiB stack")
}

#[rstest]
#[case::subshells(format!("{}echo x{}", "( ".repeat(31), " )".repeat(31)), 0)]
#[case::groups_and_eval(format!("{}eval '{}echo x{}'{}", "{ ".repeat(25), "( ".repeat(25), " )".repeat(25), "; }".repeat(25)), 2)]
#[case::substitutions(format!("echo {}x{}", "$(echo ".repeat(31), ")".repeat(31)), 0)]
#[case::backquotes_in_subshells(format!("{}echo `echo x`{}", "( ".repeat(31), " )".repeat(31)), 0)]
#[case::parameter_defaults(format!("echo {}x{}", "${u:-".repeat(31), "}".repeat(31)), 0)]
#[case::recursive_script("echo 'sh /r.sh' > /r.sh; sh /r.sh".to_string(), 2)]
#[case::recursive_eval("c='eval \"$c\"'; eval \"$c\"".to_string(), 2)]
fn the_deepest_accepted_nesting_fits_in_half_of_tokios_default_stack(
    #[case] script: String,
    #[case] code: i32,
) {
    let out = run_on_small_stack(script);
    assert_eq!(out.exit_code, code, "{}", text(&out.stderr));
}

#[rstest]
#[case::precedence("echo $((1 + 2 * 3 - 4 / 2))", "5\n")]
#[case::parentheses_and_unary("echo $(( -(1 + 2) * 2 )) $((!0)) $((~0))", "-6 1 -1\n")]
#[case::variables_with_and_without_dollar(
    "i=4; echo $((i + 1)) $(($i * 2)) $((unset + 1))",
    "5 8 1\n"
)]
#[case::counter_loop("i=0; while [ $i -lt 3 ]; do i=$((i+1)); done; echo $i", "3\n")]
#[case::comparisons_and_logic(
    "echo $((2 > 1)) $((2 <= 1)) $((1 == 1 && 0 || 1)) $((7 % 3))",
    "1 0 1 1\n"
)]
#[case::hex_and_octal("echo $((0x10 + 010))", "24\n")]
#[case::quoted("echo \"[$((1+1))]\"", "[2]\n")]
#[case::command_substitution_inside("echo $(( $(echo 20) + 1 ))", "21\n")]
#[tokio::test]
async fn arithmetic_expansion_evaluates_integers(#[case] script: &str, #[case] stdout: &str) {
    check(&sh(script).await, stdout, "", 0);
}

#[rstest]
#[case::division_by_zero(
    "echo $((1/0)); echo no",
    "sh: 1: arithmetic expression: division by zero: \"1/0\"\n"
)]
#[case::dangling_operator(
    "echo $((1+))",
    "sh: 1: arithmetic expression: expecting primary: \"1+\"\n"
)]
#[case::not_a_number("x=abc; echo $((x))", "sh: 1: Illegal number: abc\n")]
#[tokio::test]
async fn a_bad_arithmetic_expression_aborts_with_status_2(
    #[case] script: &str,
    #[case] stderr: &str,
) {
    check(&sh(script).await, "", stderr, 2);
}

#[tokio::test(start_paused = true)]
async fn sleep_infinity_waits_until_the_caller_gives_up() {
    let start = Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(3600), sh("sleep infinity")).await;
    assert!(result.is_err(), "sleep infinity must not finish");
    assert_eq!(start.elapsed(), Duration::from_secs(3600));
}

#[tokio::test]
async fn case_runs_the_first_matching_item() {
    let script = r#"for f in a.log b.txt c "d*" x; do case $f in *.log) echo "$f log";; b.*|c) echo "$f b-or-c" ;; "d*") echo "$f quoted";; [w-y]) echo "$f class";; esac; done"#;
    check(
        &sh(script).await,
        "a.log log\nb.txt b-or-c\nc b-or-c\nd* quoted\nx class\n",
        "",
        0,
    );
    let multiline = "case abc in\n  (x) echo no ;;\n  a*)\n    echo yes\n    ;;\nesac";
    check(&sh(multiline).await, "yes\n", "", 0);
    check(
        &sh("case z in a) echo no;; esac; echo $?").await,
        "0\n",
        "",
        0,
    );
    check(&sh("case a in a) ;; esac").await, "", "", 0);
}

#[tokio::test]
async fn a_quoted_case_pattern_matches_literally() {
    check(
        &sh("p='*'; case abc in \"$p\") echo lit;; $p) echo glob;; esac").await,
        "glob\n",
        "",
        0,
    );
}

#[rstest]
#[case::shortest_suffix("${f%.*}", "dir/a.tar")]
#[case::longest_suffix("${f%%.*}", "dir/a")]
#[case::shortest_prefix("${f#*/}", "a.tar.gz")]
#[case::longest_prefix("${f##*.}", "gz")]
#[case::no_match("${f%.zip}", "dir/a.tar.gz")]
#[case::basename("${f##*/}", "a.tar.gz")]
#[case::class("${f%[gz]}", "dir/a.tar.g")]
#[tokio::test]
async fn prefix_and_suffix_removal_use_patterns(#[case] expr: &str, #[case] stdout: &str) {
    check(
        &sh(&format!("f=dir/a.tar.gz; echo {expr}")).await,
        &format!("{stdout}\n"),
        "",
        0,
    );
}

#[test]
fn glob_patterns_match_like_fnmatch() {
    use crate::glob::matches;
    assert!(matches("*", ""));
    assert!(matches("a*b*c", "aXXbYYc"));
    assert!(!matches("a*b*c", "aXXbYY"));
    assert!(matches("?x", "ax"));
    assert!(!matches("?x", "x"));
    assert!(matches("[!a]", "b"));
    assert!(!matches("[!a]", "a"));
    assert!(matches("[]]", "]"));
    assert!(matches("[", "["), "an unclosed bracket is literal");
    assert!(matches(r"\*", "*"));
    assert!(!matches(r"\*", "x"));
}

#[tokio::test]
async fn every_command_the_shell_says_it_can_run_is_found() {
    let mounts = Mounts::default();
    for name in super::COMMANDS {
        let argv = vec![name.to_string()];
        assert!(super::can_run(&argv, &mounts), "{name}");
        let out = run(
            &argv,
            &[],
            &Default::default(),
            "/",
            &mounts,
            &DefaultHooks::new(0),
        )
        .await;
        assert_ne!(
            out.exit_code,
            127,
            "{name}: {:?}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(!super::can_run(
        &["/usr/local/bin/openshell-gateway".into()],
        &mounts
    ));
    assert!(!super::can_run(&[], &mounts));
}

/// A `/proc` as a container with a shared PID namespace sees it: the pause process and two
/// supervisors, with NUL-separated command lines.
fn with_proc() -> Mounts {
    let proc = Volume::new();
    proc.write("/1/cmdline", b"/pause\0");
    proc.write(
        "/7/cmdline",
        b"/opt/openshell/bin/openshell-sandbox\0--mode=process\0--workdir\0/sandbox\0",
    );
    proc.write("/12/cmdline", b"/openshell-sandbox\0--mode=network\0");
    proc.write("/12/cgroup", b"0::/../cri-containerd-abc.scope\n");
    let mut m = mounts();
    m.mount("/proc", proc, true);
    m
}

#[rstest]
#[case::digits("echo /proc/[0-9]*", "/proc/1 /proc/12 /proc/7\n")]
#[case::star_in_a_variable("p='/proc/1*'; echo $p", "/proc/1 /proc/12\n")]
#[case::quoted_stays_literal("echo '/proc/[0-9]*' \"/proc/*\"", "/proc/[0-9]* /proc/*\n")]
#[case::escaped_stays_literal("echo /proc/\\*", "/proc/*\n")]
#[case::no_match_stays_as_written("echo /proc/x*", "/proc/x*\n")]
#[case::a_deeper_component("echo /proc/*/cgroup", "/proc/12/cgroup\n")]
#[case::relative_to_the_directory("cd /proc && echo 1*", "1 12\n")]
#[tokio::test]
async fn unquoted_pattern_characters_expand_to_the_sorted_matching_paths(
    #[case] script: &str,
    #[case] want: &str,
) {
    check(&sh_in(script, &with_proc()).await, want, "", 0);
}

#[rstest]
#[case::nul_to_space(
    "tr '\\0' ' ' < /proc/7/cmdline",
    "/opt/openshell/bin/openshell-sandbox --mode=process --workdir /sandbox "
)]
#[case::a_range("echo abc | tr a-c x-z", "xyz\n")]
#[case::delete("echo a-b-c | tr -d -- -", "abc\n")]
#[case::a_short_second_set_repeats_its_last("echo abc | tr abc x", "xxx\n")]
#[tokio::test]
async fn tr_translates_and_deletes_bytes(#[case] script: &str, #[case] want: &str) {
    check(&sh_in(script, &with_proc()).await, want, "", 0);
}

#[rstest]
#[case::literal(
    "echo a--mode=process | grep -- --mode=process",
    "a--mode=process\n",
    0
)]
#[case::quiet("echo x | grep -q x; echo $?", "0\n", 0)]
#[case::no_match("echo x | grep y; echo $?", "1\n", 0)]
#[case::inverted("printf 'a\\nb\\n' | grep -v a", "b\n", 0)]
#[case::anchors_and_dot("printf 'ab\\nba\\n' | grep '^a.$'", "ab\n", 0)]
#[case::star_and_class("printf 'x12y\\nxy\\nxay\\n' | grep 'x[0-9][0-9]*y'", "x12y\n", 0)]
#[case::fixed("echo 'a.c abc' | grep -F -x 'a.c abc'", "a.c abc\n", 0)]
#[case::a_file("grep -q abc /proc/12/cgroup && echo found", "found\n", 0)]
#[case::a_missing_file_quietly("grep -qs abc /proc/99/cgroup; echo $?", "2\n", 0)]
#[tokio::test]
async fn grep_matches_lines_by_basic_regular_expressions(
    #[case] script: &str,
    #[case] want: &str,
    #[case] code: i32,
) {
    check(&sh_in(script, &with_proc()).await, want, "", code);
}

#[tokio::test]
async fn grep_refuses_what_it_cannot_match_by_name() {
    let out = sh("echo ab | grep 'a\\(b\\)'").await;
    assert_eq!(out.exit_code, 2);
    assert!(
        text(&out.stderr).contains("not supported"),
        "{}",
        text(&out.stderr)
    );
}

/// The sidecar supervisor kill's script, as the real path runs it, finds each supervisor by
/// its command line and signals the right one.
#[rstest]
#[case::the_network_side("*openshell-sandbox*--mode=process*) ;; *openshell-sandbox*)", "12")]
#[case::the_process_side("*openshell-sandbox*--mode=process*)", "7")]
#[tokio::test]
async fn the_supervisor_kill_script_signals_the_supervisor_by_its_command_line(
    #[case] choose: &str,
    #[case] pid: &str,
) {
    let script = format!(
        r#"for d in /proc/[0-9]*; do c=$(tr '\0' ' ' < "$d/cmdline" 2>/dev/null) || continue; case "$c" in {choose} kill -KILL "${{d#/proc/}}";; esac; done"#
    );
    let hooks = RecordingHooks::default();
    let out = exec_with(&["sh", "-c", &script], b"", &with_proc(), &hooks).await;
    assert_eq!(out.exit_code, 0, "{}", text(&out.stderr));
    let kills = hooks
        .kills
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    assert_eq!(kills, [(pid.to_string(), "KILL".to_string())]);
}
