# Developer entry points. CI runs .ci/run, which calls the same commands as `lint` and `test`.
#
#   make e2e                      the catalog on a kind cluster (needs Docker, kind, helm, openshell)
#   make e2e CLUSTER=k3d          ... on k3d; CLUSTER=existing uses CONTEXT; CLUSTER=emulated needs nothing
#   make e2e TOPOLOGY=sidecar SCENARIO='gateway-*' OUTAGE=2m SEED=7 CHART_VERSION=0.1.6 IMAGE_TAG=dev
#   make e2e CHART_PATH=../OpenShell/deploy/helm/openshell IMAGE_REPOSITORY=openshell/gateway \
#            SUPERVISOR_IMAGE_REPOSITORY=openshell/supervisor IMAGE_TAG=dev \
#            LOAD_IMAGES="openshell/gateway:dev openshell/supervisor:dev"   a local OpenShell build
#   make e2e-emulated             the whole catalog on the embedded emulated target, in seconds
#   make e2e-served               the real path (helm, kubectl, chart, manifest, openshell CLI) on a
#                                 served emulated cluster the run starts; no Docker, real time
#   make e2e-served CHART_PATH=... AGENT_SANDBOX_MANIFEST=... OPENSHELL_BIN=... MODEL=contract DEFECT=...
#   make e2e-real-openshell OPENSHELL_BINARIES=DIR   the v0.0.111 catalog on the release's own
#                                 binaries and in the model, then `compare` (CHART_PATH=...
#                                 AGENT_SANDBOX_MANIFEST=... to work offline; TIME_SCALE, JOBS)

CARGO ?= cargo
CLUSTER ?= kind
TOPOLOGY ?=
SCENARIO ?=
OUTAGE ?=
SEED ?=
CHART_VERSION ?=
CHART_PATH ?=
IMAGE_REPOSITORY ?=
SUPERVISOR_IMAGE_REPOSITORY ?=
IMAGE_TAG ?=
LOAD_IMAGES ?=
CONTEXT ?=
MODEL ?=
DEFECT ?=
AGENT_SANDBOX_MANIFEST ?=
OPENSHELL_BIN ?=
ARTIFACTS ?= artifacts
OPENSHELL_BINARIES ?=
TIME_SCALE ?= 10
JOBS ?= 4
KNOWN_DIFFERENCES ?= fixtures/known-differences/openshell-0.0.111.yaml
BIN = $(CARGO) run --quiet --release -p openshell-conformance --

RUN_FLAGS = --artifacts $(ARTIFACTS) \
	$(if $(TOPOLOGY),--topology $(TOPOLOGY)) \
	$(if $(SCENARIO),--scenario '$(SCENARIO)') \
	$(if $(OUTAGE),--outage $(OUTAGE)) \
	$(if $(SEED),--seed $(SEED))
REAL_FLAGS = $(if $(CHART_VERSION),--chart-version $(CHART_VERSION)) \
	$(if $(CHART_PATH),--chart-path $(CHART_PATH)) \
	$(if $(IMAGE_REPOSITORY),--image-repository $(IMAGE_REPOSITORY)) \
	$(if $(SUPERVISOR_IMAGE_REPOSITORY),--supervisor-image-repository $(SUPERVISOR_IMAGE_REPOSITORY)) \
	$(if $(IMAGE_TAG),--image-tag $(IMAGE_TAG) --supervisor-image-tag $(IMAGE_TAG)) \
	$(foreach i,$(LOAD_IMAGES),--load-image $(i)) \
	$(if $(CONTEXT),--context $(CONTEXT))

SERVED_FLAGS = $(if $(MODEL),--model $(MODEL)) \
	$(foreach d,$(DEFECT),--defect $(d)) \
	$(if $(CHART_VERSION),--chart-version $(CHART_VERSION)) \
	$(if $(CHART_PATH),--chart-path $(CHART_PATH)) \
	$(if $(AGENT_SANDBOX_MANIFEST),--agent-sandbox-manifest $(AGENT_SANDBOX_MANIFEST)) \
	$(if $(OPENSHELL_BIN),--openshell-bin $(OPENSHELL_BIN))

.PHONY: e2e e2e-emulated e2e-served e2e-real-openshell tools test lint fmt doctor clusters-down ci

## e2e: the conformance catalog on CLUSTER (kind by default)
e2e:
ifeq ($(CLUSTER),emulated)
	$(BIN) run --target emulated $(if $(MODEL),--model $(MODEL)) $(RUN_FLAGS)
else
	$(BIN) run --target $(CLUSTER) $(RUN_FLAGS) $(REAL_FLAGS)
endif

## e2e-emulated: the whole catalog on the embedded emulated target
e2e-emulated:
	$(MAKE) e2e CLUSTER=emulated

## e2e-served: the real path against a served emulated cluster that the run starts and stops
## (model: the release installed by default, fixtures/releases/, unless MODEL says otherwise);
## needs helm, kubectl and openshell
e2e-served:
	$(BIN) run --target served $(RUN_FLAGS) $(SERVED_FLAGS)

## e2e-real-openshell: every case of the openshell-0.0.111 catalog twice, on combined and
## sidecar: in the model (emulated target, Agent Sandbox v0.5.0, the release's install) and on
## the release's own binaries in OPENSHELL_BINARIES (openshell, openshell-gateway,
## openshell-sandbox) on served clusters, TIME_SCALE times as fast (libfaketime, docs/
## performance.md), JOBS cases at once; then `compare`, which exits 0 when they agree but for
## KNOWN_DIFFERENCES. A run's own failures (exit 1) do not stop the comparison.
e2e-real-openshell:
	@[ -n "$(OPENSHELL_BINARIES)" ] || { echo "e2e-real-openshell: set OPENSHELL_BINARIES=DIR, a directory with the release's openshell, openshell-gateway and openshell-sandbox"; exit 2; }
	$(BIN) run --target emulated --model openshell-0.0.111 --agent-sandbox v0.5.0 \
	  --topology combined --topology sidecar --artifacts $(ARTIFACTS)/model || [ $$? -eq 1 ]
	$(BIN) run --target served --model openshell-0.0.111 --topology combined --topology sidecar \
	  --openshell-binaries $(OPENSHELL_BINARIES) --openshell-bin $(OPENSHELL_BINARIES)/openshell \
	  --time-scale $(TIME_SCALE) --jobs $(JOBS) --artifacts $(ARTIFACTS)/binaries \
	  $(if $(CHART_PATH),--chart-path $(CHART_PATH)) \
	  $(if $(AGENT_SANDBOX_MANIFEST),--agent-sandbox-manifest $(AGENT_SANDBOX_MANIFEST)) || [ $$? -eq 1 ]
	$(BIN) compare $(ARTIFACTS)/model $(ARTIFACTS)/binaries --known-differences $(KNOWN_DIFFERENCES)

## tools: the real helm, kubectl and OpenShell SDK the tests drive, into .tools/; and Debian's
## libfaketime for --time-scale (apt-get, as root)
tools:
	@[ -f "/usr/lib/$$(uname -m)-linux-gnu/faketime/libfaketimeMT.so.1" ] || { \
	  echo "+ apt-get install libfaketime"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libfaketime; }
	bash .ci/tools.sh

## test: the project's tests (the README's test command): the virtual-time and quick ones, then
## the real path on served clusters, which waits in real time (minutes)
test:
	$(CARGO) nextest run --workspace --profile ci
	$(CARGO) nextest run --workspace --profile ci-real-time

## lint: formatting and clippy, as CI checks them
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets --all-features -- -D warnings

fmt:
	$(CARGO) fmt --all

## doctor: what a real run needs, and what is missing
doctor:
	$(BIN) doctor --provider $(if $(filter emulated,$(CLUSTER)),kind,$(CLUSTER)) $(if $(CONTEXT),--context $(CONTEXT))

## clusters-down: delete the kind and k3d clusters `e2e` created
clusters-down:
	-$(BIN) cluster down --provider kind
	-$(BIN) cluster down --provider k3d

## ci: exactly what CI runs
ci:
	bash .ci/run
