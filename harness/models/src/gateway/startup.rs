//! The gateway's startup sweep (`start_persisted_sandboxes`, docs/upstream-facts.md F1.15): runs
//! once, before the watchers and the listeners.

use std::sync::Arc;

use super::core::StartupAction;
use super::driver;
use super::state::Gateway;
use conformance_core::phase::Phase;

impl Gateway {
    pub(crate) fn startup_sweep(self: &Arc<Self>) {
        let names = self.core().store.names();
        for name in names {
            let mut action = StartupAction::None;
            let (cr, before) = {
                let core = self.core();
                let r = core.store.get(&name).expect("listed");
                (r.cr_name.clone(), r.phase.clone())
            };
            {
                let mut core = self.core();
                self.commit(&mut core, &name, |r, rec| action = r.on_startup(rec));
            }
            let after = self.core().store.get(&name).map(|r| r.phase.clone());
            match action {
                StartupAction::Stop => {
                    let gw = self.clone();
                    let n = name.clone();
                    self.spawn(async move { driver::stop_sandbox(&gw, &n, true).await });
                }
                StartupAction::Start => {
                    let _ = driver::set_operating_mode(self, &cr, "Running");
                    self.log(
                        "INFO",
                        "openshell_server::compute",
                        "Started sandbox during gateway startup",
                        &[("sandbox_name", &name), ("previous_phase", before.name())],
                    );
                }
                StartupAction::None => {
                    if after.as_ref() != Some(&before) && after == Some(Phase::Error) {
                        let reason = self
                            .core()
                            .store
                            .get(&name)
                            .and_then(|r| r.message.clone())
                            .unwrap_or_default();
                        self.log(
                            "WARN",
                            "openshell_server::compute",
                            "Failed to start sandbox during gateway startup",
                            &[("sandbox_name", &name), ("error", &reason)],
                        );
                    }
                }
            }
        }
    }
}
