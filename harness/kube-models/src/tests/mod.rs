//! Tests of the Kubernetes models across modules, on the kube emulator in paused time.

mod images;
mod jobs;
mod kube;
mod rollout;
mod volumes;
