//! Tests of the models across modules: the Kubernetes models on the kube emulator, the
//! OpenShell models end to end, and regressions found by the catalog.

mod lifetime;
mod observe;
mod openshell;
mod regressions;
mod served_grpc;
