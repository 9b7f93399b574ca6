//! Tests of the models across modules: the Kubernetes models on the kube emulator, the
//! OpenShell models end to end, and regressions found by the catalog.

mod jobs;
mod kube;
mod lifetime;
mod observe;
mod openshell;
mod regressions;
mod rollout;
mod served_grpc;
mod volumes;
