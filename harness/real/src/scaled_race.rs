//! Refusals that a scaled clock makes likelier than real time does.
//!
//! Real OpenShell's Kubernetes driver closes its idle API connections after 30 s of its own
//! time, and a request written on one as it closes is lost; the gateway then answers the RPC
//! with the driver's error (docs/upstream-facts.md F3.11). The window is the request's round
//! trip in real time, so on a clock N times as fast (`--time-scale N`) the same release loses
//! about N times as many requests. Such a refusal is what a scale-1 run would most likely not
//! have met, so above scale 1 it is an infrastructure error naming the race, never a verdict; at scale 1 it
//! is the release's answer and judged as such.

use conformance_core::target::TargetError;

/// The words of hyper-util's error for a request lost on its connection, which the driver
/// passes on inside the gateway's message (F3.11).
const LOST_REQUEST: &str = "client error (SendRequest)";

/// The error for a status `code` with `message` that the gateway answered, on a clock `scale`
/// times as fast as real time.
pub(crate) fn refusal(code: &str, message: &str, scale: u32) -> TargetError {
    if scale <= 1 || !message.contains(LOST_REQUEST) {
        return TargetError::refused(code, message);
    }
    TargetError::infra(format!(
        "the gateway answered {code} \"{message}\": its Kubernetes client lost the request on an \
         idle connection its own 30 s read timeout was closing (docs/upstream-facts.md F3.11), a \
         real-time race that the clock at ×{scale} makes about {scale} times as likely; not a \
         verdict: run the case at --time-scale 1 to judge it"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOST: &str = "delete sandbox failed: ServiceError: client error (SendRequest)";

    #[test]
    fn a_request_the_gateways_kubernetes_client_lost_is_an_infrastructure_error_on_a_scaled_clock()
    {
        let e = refusal("Internal", LOST, 10);
        let TargetError::Infra { message, .. } = &e else {
            panic!("expected an infrastructure error, got {e:?}");
        };
        assert!(message.contains(LOST), "{message}");
        assert!(message.contains("F3.11"), "{message}");
        assert!(message.contains("×10"), "{message}");
        assert!(message.contains("--time-scale 1"), "{message}");
    }

    #[test]
    fn the_clis_wrapped_report_of_the_lost_request_is_recognised() {
        // As the CLI prints the gateway's Internal status, wrapped by miette inside the words.
        let stderr = "Error:   × code: 'Internal error', message: \"delete sandbox failed: ServiceError: client\n  │ error (SendRequest)\"\n";
        let (code, message) = crate::cli::parse_refusal(stderr).expect("a refusal");
        assert_eq!((code.as_str(), message.as_str()), ("Internal", LOST));
        assert!(matches!(
            refusal(&code, &message, 10),
            TargetError::Infra { .. }
        ));
    }

    #[test]
    fn the_same_answer_at_real_time_is_the_releases_refusal() {
        assert_eq!(
            refusal("Internal", LOST, 1),
            TargetError::refused("Internal", LOST)
        );
    }

    #[test]
    fn other_refusals_stay_refusals_on_a_scaled_clock() {
        let message = "sandbox 'demo' is not ready";
        assert_eq!(
            refusal("FailedPrecondition", message, 10),
            TargetError::refused("FailedPrecondition", message)
        );
    }
}
