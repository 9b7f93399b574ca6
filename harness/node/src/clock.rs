//! The harness's scaled clock (`--time-scale`), passed on to every process the node starts.
//!
//! A harness on the scaled clock runs with libfaketime preloaded and its variables in its
//! environment. Container processes get exactly their spec's environment, so the node adds the
//! clock's variables to each one's `execve` itself: the clock reaches them through the node,
//! and the pod spec the API shows stays the chart's.
//!
//! The library is seen inside containers at [`LIBRARY_IN_CONTAINER`], a path outside every path
//! upstream's default Landlock policy grants (docs/upstream-facts.md F13.4). A sandbox's
//! workload, which its supervisor starts under that policy with the supervisor's own
//! environment, cannot open it there: the dynamic loader ignores a preload it cannot open (with
//! one line on the workload's stderr), so the workload runs on real time. Were it loaded, it
//! could not open the shared reference in `/dev/shm` either, and libfaketime would `exit(1)`
//! before the workload's first instruction (F13.2): the sandbox would fail for the harness's
//! sake. The workload's only use of time is the `sleep` of a loop that keeps it alive, which
//! nothing times; sessions (`sandbox exec`) start with an empty environment and run on real
//! time for the same reason in every run, scaled or not.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::OnceLock;

/// Where a container sees the clock's library.
pub const LIBRARY_IN_CONTAINER: &str = "/.openshell-conformance-clock/libfaketimeMT.so.1";

/// The variables libfaketime reads besides `LD_PRELOAD`, passed on as the harness has them.
const CLOCK_VARS: &[&str] = &["FAKETIME", "FAKETIME_SHARED", "NO_FAKE_STAT"];

/// The clock this process runs on, as its children inherit it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Clock {
    /// The library on the host.
    pub library: PathBuf,
    /// Its variables, `LD_PRELOAD` aside.
    pub vars: Vec<(String, String)>,
}

impl Clock {
    /// The clock an environment describes: libfaketime in `LD_PRELOAD` and its shared
    /// reference in `FAKETIME_SHARED`; `None` on real time.
    pub fn from_env(var: impl Fn(&str) -> Option<OsString>) -> Option<Clock> {
        let text = |k: &str| var(k).and_then(|v| v.into_string().ok());
        let preload = text("LD_PRELOAD")?;
        let library = preload
            .split([':', ' '])
            .find(|p| {
                p.rsplit('/')
                    .next()
                    .is_some_and(|f| f.starts_with("libfaketime"))
            })
            .map(PathBuf::from)?;
        text("FAKETIME_SHARED")?;
        let vars = CLOCK_VARS
            .iter()
            .filter_map(|k| text(k).map(|v| ((*k).to_string(), v)))
            .collect();
        Some(Clock { library, vars })
    }

    /// A container's environment on this clock: its own, with the clock's variables and the
    /// library first in `LD_PRELOAD` (a variable of the spec's by the same name gives way).
    pub fn environment(&self, env: &[(String, String)]) -> Vec<(String, String)> {
        let own_preload = env
            .iter()
            .rev()
            .find(|(k, _)| k == "LD_PRELOAD")
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty());
        let preload = match own_preload {
            Some(theirs) => format!("{LIBRARY_IN_CONTAINER}:{theirs}"),
            None => LIBRARY_IN_CONTAINER.to_string(),
        };
        let ours = |k: &str| k == "LD_PRELOAD" || self.vars.iter().any(|(v, _)| v == k);
        env.iter()
            .filter(|(k, _)| !ours(k))
            .cloned()
            .chain(self.vars.iter().cloned())
            .chain([("LD_PRELOAD".to_string(), preload)])
            .collect()
    }
}

/// The clock the harness runs on, read once from its environment.
pub fn inherited() -> Option<&'static Clock> {
    static CLOCK: OnceLock<Option<Clock>> = OnceLock::new();
    CLOCK
        .get_or_init(|| Clock::from_env(|k| std::env::var_os(k)))
        .as_ref()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn harness_env(k: &str) -> Option<OsString> {
        match k {
            "LD_PRELOAD" => Some("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1".into()),
            "FAKETIME" => Some("+0 x10".into()),
            "FAKETIME_SHARED" => Some("/s /m".into()),
            "NO_FAKE_STAT" => Some("1".into()),
            _ => None,
        }
    }

    #[test]
    fn a_harness_without_libfaketime_has_no_clock_to_pass_on() {
        assert_eq!(Clock::from_env(|_| None), None);
        let other_preload = |k: &str| match k {
            "LD_PRELOAD" => Some(OsString::from("/usr/lib/libjemalloc.so")),
            k => harness_env(k),
        };
        assert_eq!(Clock::from_env(other_preload), None);
    }

    #[test]
    fn a_container_gets_the_clock_and_the_library_at_its_path_in_the_container() {
        let clock = Clock::from_env(harness_env).expect("a clock");
        assert_eq!(
            clock.library,
            PathBuf::from("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1")
        );
        let spec = vec![
            ("PATH".to_string(), "/bin".to_string()),
            ("FAKETIME".to_string(), "-1d".to_string()),
            ("LD_PRELOAD".to_string(), "/lib/theirs.so".to_string()),
        ];
        let env = clock.environment(&spec);
        let get = |k: &str| {
            let found: Vec<&str> = env
                .iter()
                .filter(|(n, _)| n == k)
                .map(|(_, v)| v.as_str())
                .collect();
            assert!(found.len() <= 1, "{k} given twice: {found:?}");
            found.first().map(|v| v.to_string())
        };
        assert_eq!(get("PATH").as_deref(), Some("/bin"));
        assert_eq!(
            get("FAKETIME").as_deref(),
            Some("+0 x10"),
            "the harness's clock wins"
        );
        assert_eq!(get("FAKETIME_SHARED").as_deref(), Some("/s /m"));
        assert_eq!(get("NO_FAKE_STAT").as_deref(), Some("1"));
        assert_eq!(
            get("LD_PRELOAD"),
            Some(format!("{LIBRARY_IN_CONTAINER}:/lib/theirs.so"))
        );
    }
}
