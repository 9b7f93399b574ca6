//! The openshell CLI driver against recorded outputs in the shapes docs/upstream-facts.md
//! section 6 describes (JSON of `sandbox_to_json`, tonic status lines on stderr, remote exit
//! codes). The recordings are in fixtures/recorded/; they were written from the upstream source,
//! not captured from a live gateway.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::cli::{
    OpenShellCli, app_version_from_helm_list, capabilities_from_help, parse_get, parse_list,
    parse_refusal, parse_version,
};
use crate::command::{CmdOutput, ScriptedRunner, Unscripted};
use conformance_core::phase::Phase;
use conformance_core::target::{Capability, RestartPolicy, SandboxSpec, TargetError};

fn recorded() -> ScriptedRunner {
    let r = ScriptedRunner::new(Unscripted::Fail);
    r.load(include_str!(
        "../../../../fixtures/recorded/openshell-0.0.111.json"
    ))
    .unwrap();
    r
}

fn cli(r: &ScriptedRunner) -> OpenShellCli {
    OpenShellCli::new(Arc::new(r.clone()), "openshell", "/run/xdg".into(), "gw")
}

#[tokio::test]
async fn create_without_a_command_waits_with_json_and_parses_the_sandbox() {
    let r = recorded();
    let spec = SandboxSpec {
        name: "demo".into(),
        labels: BTreeMap::from([("openshell-conformance.io/run".into(), "r1".into())]),
        ..SandboxSpec::default()
    };
    let v = cli(&r).create(&spec, &BTreeSet::new()).await.unwrap();
    assert_eq!((v.name.as_str(), v.phase), ("demo", Phase::Ready));
    let call = &r.calls()[0];
    assert_eq!(call.env["XDG_CONFIG_HOME"], "/run/xdg/config");
    assert_eq!(call.env["HOME"], "/run/xdg");
    assert_eq!(call.env["OPENSHELL_GATEWAY"], "gw");
}

#[tokio::test]
async fn create_with_a_main_command_detaches_then_reads_the_phase_back() {
    let r = ScriptedRunner::new(Unscripted::Fail);
    r.respond(
        "openshell sandbox create",
        CmdOutput::ok("Created sandbox: demo\n"),
    );
    r.load(include_str!(
        "../../../../fixtures/recorded/openshell-0.0.111.json"
    ))
    .unwrap();
    let spec = SandboxSpec {
        name: "demo".into(),
        command: Some(vec!["sh".into(), "-c".into(), "exit 0".into()]),
        ..SandboxSpec::default()
    };
    let v = cli(&r).create(&spec, &BTreeSet::new()).await.unwrap();
    assert_eq!(v.phase, Phase::Error);
    let lines = r.lines();
    assert!(
        lines[0].ends_with("openshell sandbox create --name demo --detach -- sh -c 'exit 0'"),
        "{lines:?}"
    );
    assert!(
        lines[1].ends_with("openshell sandbox get demo -o json"),
        "{lines:?}"
    );
}

/// What the 0.0.111 CLI prints when the sandbox it created enters Error or stays idle while
/// provisioning (docs/upstream-facts.md F6.3), wrapped as miette wraps it.
#[rstest::rstest]
#[case::error(
    "Error:   × sandbox entered error phase while provisioning: BootstrapFailed: Policy\n  │ fetch failed: status: PermissionDenied, message: \"this method requires a\n  │ sandbox principal\"\n"
)]
#[case::idle(
    "Error:   × sandbox provisioning timed out after 300s. Last reported status: Pod\n  │ exists with phase: Failed\n"
)]
#[tokio::test]
async fn a_create_whose_sandbox_does_not_provision_returns_the_created_sandbox_not_an_error(
    #[case] said: &str,
) {
    let r = ScriptedRunner::new(Unscripted::Fail);
    r.respond("openshell sandbox create", CmdOutput::failed(1, said));
    r.load(include_str!(
        "../../../../fixtures/recorded/openshell-0.0.111.json"
    ))
    .unwrap();
    let spec = SandboxSpec {
        name: "demo".into(),
        command: Some(vec!["sleep".into(), "infinity".into()]),
        ..SandboxSpec::default()
    };
    let v = cli(&r).create(&spec, &BTreeSet::new()).await.unwrap();
    assert_eq!((v.name.as_str(), v.phase), ("demo", Phase::Error));
}

#[tokio::test]
async fn a_create_that_fails_before_the_sandbox_exists_stays_an_error() {
    let r = ScriptedRunner::new(Unscripted::Fail);
    r.respond(
        "openshell sandbox create",
        CmdOutput::failed(1, "Error:   × sandbox provisioning timed out after 300s.\n"),
    );
    r.respond(
        "openshell sandbox get",
        CmdOutput::failed(1, "Error:   × Sandbox demo not found\n"),
    );
    let spec = SandboxSpec {
        name: "demo".into(),
        command: Some(vec!["sleep".into(), "infinity".into()]),
        ..SandboxSpec::default()
    };
    let err = cli(&r).create(&spec, &BTreeSet::new()).await.unwrap_err();
    assert!(err.to_string().contains("timed out"), "{err}");
}

#[tokio::test]
async fn a_restart_policy_needs_the_flag_in_the_cli_help() {
    let r = recorded();
    let spec = SandboxSpec {
        name: "demo".into(),
        restart_policy: Some(RestartPolicy::OnFailure),
        ..SandboxSpec::default()
    };
    let err = cli(&r).create(&spec, &BTreeSet::new()).await.unwrap_err();
    assert!(matches!(err, TargetError::Unsupported(_)), "{err:?}");
    assert!(
        r.calls().is_empty(),
        "nothing runs when the flag is missing"
    );
    let caps = BTreeSet::from([Capability::RestartPolicy]);
    let c = cli(&r).create_cmd(&spec, &caps).unwrap();
    assert!(c.line().contains("--restart-policy on-failure"), "{c}");
}

#[tokio::test]
async fn get_of_an_unknown_sandbox_is_none_not_an_error() {
    let r = recorded();
    assert_eq!(cli(&r).get("ghost").await.unwrap(), None);
    assert_eq!(
        cli(&r).get("demo").await.unwrap().unwrap().phase,
        Phase::Error
    );
}

#[tokio::test]
async fn exec_returns_the_remote_exit_code_and_output() {
    let r = recorded();
    let c = cli(&r);
    let res = c
        .exec("demo", &["sh".into(), "-c".into(), "exit 3".into()])
        .await
        .unwrap();
    assert_eq!(res.exit_code, 3);
    let res = c
        .exec("demo", &["cat".into(), "/sandbox/.chaos".into()])
        .await
        .unwrap();
    assert_eq!((res.exit_code, res.stdout.as_str()), (0, "token-1"));
}

#[tokio::test]
async fn exec_on_a_sandbox_that_is_not_ready_is_a_refusal_with_the_grpc_code() {
    let r = recorded();
    let err = cli(&r).exec("stuck", &["true".into()]).await.unwrap_err();
    assert_eq!(
        err,
        TargetError::refused(
            "FailedPrecondition",
            "sandbox 'stuck' is not ready (phase: Provisioning); wait for it to reach Ready state"
        )
    );
}

#[tokio::test]
async fn stop_from_error_is_refused_with_the_gateway_message() {
    let r = recorded();
    let err = cli(&r).stop("demo").await.unwrap_err();
    assert_eq!(
        err,
        TargetError::refused(
            "FailedPrecondition",
            "sandbox must be Ready to stop (current phase: Error)"
        )
    );
}

#[tokio::test]
async fn a_cli_failure_without_a_status_is_an_infrastructure_error() {
    let r = recorded();
    let err = cli(&r).start("broken").await.unwrap_err();
    assert!(
        matches!(&err, TargetError::Infra { message, .. } if message.contains("Connection refused")),
        "{err:?}"
    );
}

#[tokio::test]
async fn deleting_a_sandbox_that_is_already_gone_succeeds() {
    let r = recorded();
    cli(&r).delete("ghost").await.unwrap();
    cli(&r).delete("demo").await.unwrap();
}

#[tokio::test]
async fn list_parses_every_sandbox_with_labels_and_phase() {
    let r = recorded();
    let l = cli(&r)
        .list(Some("openshell-conformance.io/run=r1"))
        .await
        .unwrap();
    assert_eq!(l.len(), 2);
    assert_eq!(l[0].labels["openshell-conformance.io/run"], "r1");
    assert_eq!(l[1].phase, Phase::Provisioning);
    assert!(r.lines()[0].ends_with("--selector openshell-conformance.io/run=r1"));
}

#[tokio::test]
async fn the_0_0_111_cli_has_a_main_command_but_no_restart_policy() {
    let r = recorded();
    let info = cli(&r).detect().await.unwrap();
    assert_eq!(info.version.to_string(), "0.0.111");
    assert!(info.capabilities.contains(&Capability::MainCommand));
    assert!(!info.capabilities.contains(&Capability::RestartPolicy));
}

#[test]
fn a_help_text_with_restart_policy_enables_the_capability() {
    // The flag as the restart-policy branch adds it (docs/upstream-facts.md F9.1).
    let help =
        "Options:\n      --restart-policy <POLICY>  [possible values: never, on-failure, always]\n";
    assert!(capabilities_from_help(help).contains(&Capability::RestartPolicy));
}

#[test]
fn versions_are_read_from_cli_and_helm_outputs() {
    assert_eq!(
        parse_version("openshell 0.1.6-dev.3").unwrap().to_string(),
        "0.1.6-dev.3"
    );
    assert_eq!(
        parse_version("v3.17.2+gcc0bbbd").unwrap().to_string(),
        "3.17.2+gcc0bbbd"
    );
    assert!(parse_version("no version here").is_none());
    let helm = r#"[{"name":"openshell","namespace":"openshell","revision":"1","status":"deployed","chart":"helm-chart-0.0.111","app_version":"0.0.111"}]"#;
    assert_eq!(
        app_version_from_helm_list(helm, "openshell")
            .unwrap()
            .to_string(),
        "0.0.111"
    );
    assert!(app_version_from_helm_list(helm, "other").is_none());
}

#[test]
fn refusals_are_read_from_miette_wrapped_tonic_statuses_and_the_clis_own_wording() {
    assert_eq!(
        parse_refusal(
            "Error:   × code: 'The system is not in a state required for the operation's\n  │ execution', message: \"sandbox must be Stopped to start (current phase:\n  │ Provisioning)\"\n"
        ),
        Some((
            "FailedPrecondition".into(),
            "sandbox must be Stopped to start (current phase: Provisioning)".into()
        ))
    );
    assert_eq!(
        parse_refusal(
            "Error:   × sandbox 's1' already exists\n  │\n  │ hint: delete it first with: openshell sandbox delete <name>\n"
        ),
        Some(("AlreadyExists".into(), "sandbox 's1' already exists".into()))
    );
    // A description tonic may add later is kept as printed rather than lost.
    assert_eq!(
        parse_refusal("Error:   × code: 'Something new', message: \"m\"").unwrap(),
        ("Something new".into(), "m".into())
    );
    assert_eq!(
        parse_refusal(
            "Error:   × transport error\n  ├─▶ tcp connect error\n  ╰─▶ Connection refused (os error 111)\n"
        ),
        None
    );
    assert_eq!(
        parse_refusal("status: Internal, message: \"not the CLI's error\""),
        None
    );
}

#[test]
fn an_empty_list_output_is_no_sandboxes_and_garbage_is_an_error() {
    assert!(parse_list("\n").unwrap().is_empty());
    assert!(parse_list("NAME PHASE\ndemo Ready").is_err());
}

#[tokio::test]
async fn a_remote_command_printing_a_status_line_is_its_own_exit_code_not_a_refusal() {
    let r = ScriptedRunner::new(Unscripted::Fail);
    r.respond(
        "openshell sandbox exec -n demo",
        CmdOutput::failed(2, "status: Internal, message: \"from the workload\"\n"),
    );
    let res = cli(&r).exec("demo", &["./tool".into()]).await.unwrap();
    assert_eq!(res.exit_code, 2);
}

#[test]
fn a_phase_a_newer_cli_prints_is_kept_as_printed_and_an_absent_one_is_unspecified() {
    let v = parse_get(r#"{"name":"demo","phase":"Suspending"}"#).unwrap();
    assert_eq!(v.view().phase, Phase::Other("Suspending".into()));
    assert_eq!(v.view().to_state().phase.as_deref(), Some("Suspending"));
    assert_eq!(
        parse_get(r#"{"name":"demo"}"#).unwrap().phase,
        Phase::Unspecified
    );
}

/// A runner whose every command runs into its timeout.
struct Hangs;

#[async_trait::async_trait]
impl crate::command::CommandRunner for Hangs {
    async fn run(&self, cmd: &crate::command::Cmd) -> Result<CmdOutput, crate::command::CmdError> {
        Err(crate::command::CmdError::TimedOut {
            line: cmd.line(),
            after: cmd.timeout,
        })
    }
}

#[tokio::test]
async fn an_exec_the_sandbox_does_not_answer_in_time_is_the_products_refusal_not_an_infrastructure_error()
 {
    let c = OpenShellCli::new(Arc::new(Hangs), "openshell", "/run/xdg".into(), "gw");
    let err = c.exec("demo", &["true".into()]).await.unwrap_err();
    let TargetError::Refused { code, message } = &err else {
        panic!("expected a refusal, got {err:?}")
    };
    assert_eq!(code, "Unresponsive");
    assert!(
        message.starts_with("the sandbox shell did not answer: `")
            && message.contains("openshell sandbox exec -n demo"),
        "{message}"
    );
    assert!(message.contains("did not finish within"), "{message}");
}

/// The phase poller samples `openshell sandbox list`: the timeline says so and with what
/// interval, a `never` check's verdict states it, and once the gateway stops answering the
/// sandboxes it listed are Unknown, not the phase last seen.
#[tokio::test(start_paused = true)]
async fn the_phase_poller_declares_its_interval_and_records_unknown_while_the_gateway_is_unreachable()
 {
    use conformance_core::checks::{Check, Predicate, Selector, Window};
    use conformance_core::timeline::{
        Event, GATEWAY_SANDBOX_KIND, Recorder, SAMPLING_INTERVAL_KEY,
    };
    let r = recorded();
    r.respond(
        "openshell sandbox list -o json",
        CmdOutput {
            code: 1,
            stdout: String::new(),
            stderr: "Error:   × transport error\n  ├─▶ tcp connect error\n  ╰─▶ Connection refused (os error 111)\n".into(),
        },
    );
    let rec = Recorder::new();
    let poller = tokio::spawn(crate::target::phase_poller(
        cli(&r),
        "openshell-conformance.io/run=r1".into(),
        rec.clone(),
        std::time::Duration::from_secs(2),
    ));
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    poller.abort();
    let t = rec.snapshot();
    assert_eq!(
        t.sampling_interval(GATEWAY_SANDBOX_KIND),
        Some(std::time::Duration::from_secs(2))
    );
    assert!(
        t.entries.iter().any(
            |e| matches!(&e.event, Event::Observation { key, .. } if key == SAMPLING_INTERVAL_KEY)
        ),
        "{t:?}"
    );
    let demo: Vec<_> = t
        .entries
        .iter()
        .filter_map(|e| match &e.event {
            Event::Object(o) if o.kind == GATEWAY_SANDBOX_KIND && o.name == "demo" => Some(o),
            _ => None,
        })
        .collect();
    assert_eq!(
        demo.iter()
            .map(|o| o.phase.as_deref().unwrap_or(""))
            .collect::<Vec<_>>(),
        ["Ready", "Unknown"]
    );
    assert!(demo[1].unobserved(), "{}", demo[1].summary());
    rec.record(Event::CheckPlan {
        checks: vec![Check::never(
            "never Error",
            &["R9"],
            Predicate::phase(Selector::named(GATEWAY_SANDBOX_KIND, "demo"), &["Error"]),
            Window::whole_run(),
        )],
    });
    let o = &conformance_core::engine::recheck(&rec.snapshot()).outcomes[0];
    assert!(o.passed, "{}", o.diagnosis());
    assert!(o.message.contains("sampled every 2s"), "{}", o.message);
}

/// `list` prints neither an exit code nor a restart count; on entering a phase a process exit
/// leads to, the poller asks `get` and records what it prints, and nothing when it prints none.
#[tokio::test(start_paused = true)]
async fn the_poller_reads_exit_code_and_restart_count_from_get_and_never_invents_them() {
    use conformance_core::timeline::{Event, GATEWAY_SANDBOX_KIND, Recorder};
    let r = ScriptedRunner::new(Unscripted::Fail);
    r.respond(
        "openshell sandbox list -o json",
        CmdOutput::ok(
            r#"[{"name":"a","phase":"Error"},{"name":"b","phase":"Error"},{"name":"c","phase":"Ready"}]"#,
        ),
    );
    r.respond(
        "openshell sandbox get a -o json",
        CmdOutput::ok(r#"{"name":"a","phase":"Error","status":{"exit_code":3,"restart_count":2}}"#),
    );
    r.respond(
        "openshell sandbox get b -o json",
        CmdOutput::ok(r#"{"name":"b","phase":"Error"}"#),
    );
    let rec = Recorder::new();
    let poller = tokio::spawn(crate::target::phase_poller(
        cli(&r),
        "openshell-conformance.io/run=r1".into(),
        rec.clone(),
        std::time::Duration::from_secs(2),
    ));
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    poller.abort();
    let t = rec.snapshot();
    let exit = |name: &str| {
        t.entries
            .iter()
            .filter_map(|e| match &e.event {
                Event::Object(s) if s.kind == GATEWAY_SANDBOX_KIND && s.name == name => {
                    Some(s.containers.iter().find_map(|c| c.exit_code))
                }
                _ => None,
            })
            .next_back()
            .flatten()
    };
    assert_eq!(exit("a"), Some(3));
    assert_eq!(exit("b"), None, "no exit code printed: unknown, not 0");
    let restarts: Vec<_> = t
        .entries
        .iter()
        .filter_map(|e| match &e.event {
            Event::Observation {
                key,
                subject,
                value,
            } if key == "restart_count" => Some((subject.clone(), value.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        restarts,
        vec![(
            Some(format!("{GATEWAY_SANDBOX_KIND}/a")),
            serde_json::json!(2)
        )]
    );
    // `get` is asked once per entry into the phase, not on every poll, and never for Ready.
    let gets: Vec<String> = r
        .lines()
        .into_iter()
        .filter(|l| l.contains("sandbox get"))
        .collect();
    assert_eq!(gets.len(), 2, "{gets:#?}");
}
