//! The container program the kubelet runs for the gateway image: reads the chart's config,
//! starts a [`Gateway`], serves it on port 8080 until signalled.

use std::sync::Arc;

use async_trait::async_trait;

use super::store::Store;
use crate::model::{GRPC_PORT, OpenShellModel};
use conformance_kube_models::program::{ContainerCtx, ContainerProgram};
use conformance_upstream::{NAMESPACE, SANDBOX_SERVICE_ACCOUNT};

use super::state::{Gateway, Served};
use super::{config, driver, grpc};

/// The program the kubelet runs for the gateway image.
pub(crate) struct GatewayProgram {
    pub model: Arc<OpenShellModel>,
}

#[async_trait]
impl ContainerProgram for GatewayProgram {
    async fn run(&self, mut ctx: ContainerCtx) -> i32 {
        // The chart's certgen hook runs the same image as `generate-certs` (F5.12).
        if crate::certgen::is_certgen(&ctx.argv) {
            return crate::certgen::run(ctx).await;
        }
        // Like the real program: a config it cannot use is an error line and exit 1 (F7.7).
        let (config, tls) = match self.configure(&ctx) {
            Ok(c) => c,
            Err(e) => {
                ctx.log(&format!("ERROR openshell_server: {e}"));
                return 1;
            }
        };
        // What sandboxes see of this gateway: the certificate it presents (read by the TLS
        // set-up above, so it parses) and the config's sandbox TLS Secret and auth settings.
        let chain = config
            .tls
            .as_ref()
            .and_then(|t| config::GatewayConfig::file(&ctx.mounts, &t.cert_path).ok())
            .map(|pem| {
                use tokio_rustls::rustls::pki_types::CertificateDer;
                use tokio_rustls::rustls::pki_types::pem::PemObject;
                CertificateDer::pem_slice_iter(&pem)
                    .filter_map(Result::ok)
                    .map(|c| c.as_ref().to_vec())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        // The StatefulSet's claim template `openshell-data` mounted at /var/openshell.
        let volume = ctx
            .cluster
            .pvc_volume(&ctx.namespace, &format!("openshell-data-{}", ctx.pod));
        let gw = Gateway::start(
            self.model.clone(),
            ctx.cluster.clone(),
            &ctx.namespace,
            &ctx.pod,
            &ctx.container,
            Store::open(volume).with_sink(self.model.views.clone()),
        );
        *gw.served.lock().unwrap_or_else(|p| p.into_inner()) = Some(Served {
            config: config.clone(),
            chain,
        });
        // F1.15: the startup sweep runs before the watchers and the listeners start.
        gw.startup_sweep();
        gw.spawn(driver::reconcile_loop(gw.clone()));
        ctx.network
            .bind(&ctx.namespace, &ctx.pod, GRPC_PORT, gw.clone());
        grpc::serve(&gw, config, tls);
        gw.log(
            "INFO",
            "openshell_server",
            "Server listening",
            &[("address", "0.0.0.0:8080")],
        );
        ctx.set_ready(true);
        let sig = ctx.signalled().await;
        ctx.set_ready(false);
        ctx.network.unbind(&ctx.namespace, &ctx.pod, GRPC_PORT);
        grpc::unserve(&gw);
        gw.shutdown();
        gw.log("INFO", "openshell_server", "Shutting down", &[]);
        match sig {
            conformance_kube_models::program::Signal::Term => 0,
            conformance_kube_models::program::Signal::Kill => 137,
        }
    }
}

impl GatewayProgram {
    /// The config file's settings and the TLS acceptor they ask for. The model cannot switch
    /// topology at run time (every part reads it from the model), so a config naming another
    /// topology, or another sandbox namespace, is refused with both named (F7.7).
    pub(crate) fn configure(
        &self,
        ctx: &ContainerCtx,
    ) -> Result<(config::GatewayConfig, Option<tokio_rustls::TlsAcceptor>), String> {
        let config = config::GatewayConfig::read(&ctx.mounts)?;
        let model_topology = &self.model.topology.name;
        if let Some(t) = config.topology.as_ref().filter(|t| *t != model_topology) {
            return Err(format!(
                "configured supervisor topology {t:?} is not the one this gateway model runs ({model_topology:?}); start the model with topology {t:?}"
            ));
        }
        if let Some(ns) = config
            .sandbox_namespace
            .as_ref()
            .filter(|ns| ns.as_str() != NAMESPACE)
        {
            return Err(format!(
                "configured sandbox_namespace {ns:?} is not the one this gateway model uses ({:?})",
                NAMESPACE
            ));
        }
        if let Some(sa) = config
            .sandbox_service_account
            .as_ref()
            .filter(|sa| sa.as_str() != SANDBOX_SERVICE_ACCOUNT)
        {
            return Err(format!(
                "configured service_account_name {sa:?} is not the one this gateway model runs sandbox pods as ({:?})",
                SANDBOX_SERVICE_ACCOUNT
            ));
        }
        let tls = grpc::tls_acceptor(&config, &ctx.mounts)?;
        Ok((config, tls))
    }
}
